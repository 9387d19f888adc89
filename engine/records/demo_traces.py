"""The recorded runs shipped in ``resources/traces/``: the demo works before any model is fetched.

Each was made with ``specdec run --trace`` on the default model (see ``scripts/make_demo_traces.sh``).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path


def shipped() -> list[Path]:
    folder = resources.files("specdec_studio.resources") / "traces"
    if not folder.is_dir():
        return []
    return sorted(Path(str(entry)) for entry in folder.iterdir() if entry.name.endswith(".jsonl"))


def label(path: Path) -> str:
    """The menu text of a shipped trace: its mode, model and what it shows, from its header."""
    try:
        with open(path, encoding="utf-8") as f:
            header = json.loads(f.readline())
    except (OSError, ValueError):
        return path.stem
    detail = setting_words(header.get("config", {}))
    what = path.stem.replace("_", " ").capitalize()
    return f"{what} ({detail})" if detail else what


def setting_words(config: dict) -> str:
    """A recorded run's setting in a few words: W, N and G for lookahead, k for the modes that
    draft; "" for plain and Auto."""
    return {"lookahead": f"W={config.get('W')} N={config.get('N')} G={config.get('G')}",
            "lookup": f"k={config.get('k')}", "speculative": f"k={config.get('k')}",
            "mtp": f"k={config.get('k')}"}.get(config.get("mode"), "")
