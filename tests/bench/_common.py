"""Helpers the benchmark scripts share: the model, threads and prompts of a side-by-side run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specdec_studio.engine.models import catalog  # noqa: E402

THREADS = int(os.environ.get("SPECDEC_BENCH_THREADS", "2"))
# layers offloaded to a GPU (scripts/gpu_check.sh sets it; 0 on a CPU build)
GPU_LAYERS = int(os.environ.get("SPECDEC_BENCH_GPU_LAYERS", "0"))
CODE_PROMPT = (
    "import numpy as np\n\n"
    "class RunningStats:\n"
    "    def __init__(self):\n"
    "        self.count = 0\n"
    "        self.mean = 0.0\n"
    "        self.m2 = 0.0\n\n"
    "    def push(self, x):\n"
    "        self.count += 1\n"
    "        delta = x - self.mean\n"
    "        self.mean += delta / self.count\n"
    "        self.m2 += delta * (x - self.mean)\n\n"
    "    def variance(self):\n"
    "        return self.m2 / (self.count - 1) if self.count > 1 else 0.0\n\n"
    "# Rewrite RunningStats with type hints and docstrings, keeping the same methods.\n"
)
CHAT_PROMPT = "Explain in a few paragraphs how a bicycle's gears work and why they help on hills."


def model_path(key: str | None = None) -> Path:
    """The bench's model: ``key``, else SPECDEC_BENCH_MODEL (a catalog name such as default-q4_0,
    or a path), else the default model."""
    return catalog.resolve(key or os.environ.get("SPECDEC_BENCH_MODEL", "default"))


def bench_prompts(session) -> dict[str, list[int]]:
    """The two prompts every side-by-side bench runs: raw code completion and one chat turn."""

    return {
        "code": session.tokenize_prompt(CODE_PROMPT),
        "chat": session.chat_tokens([("user", CHAT_PROMPT)]),
    }


def measure(session, tokens: list[int], config) -> dict:
    """Run ``config`` on ``tokens`` to the end and return the run's stats."""
    final = None
    for event in session.run(config, tokens):
        final = event
    return final.stats
