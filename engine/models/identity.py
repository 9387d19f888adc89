"""What the caches of measurements are keyed by, in one place that the exactness probe and the
batch-cost profile both import (neither imports the other): the model file's hash, the llama.cpp
build's fingerprint, and the fixed text both decode."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import llama_cpp as llama

from specdec_studio.engine.jsonfile import update_json
from specdec_studio.engine.paths import cache_root

# The text the probe and the profile decode: prose, a number, code (every kind of token a run meets).
PROBE_TEXT = (
    "The quick brown fox jumps over the lazy dog. In 1905 Albert Einstein published four papers "
    "that changed physics: on the photoelectric effect, Brownian motion, special relativity and "
    "the equivalence of mass and energy. def add(a, b):\n    return a + b\n"
)


def build_fingerprint() -> str:
    """The llama.cpp build: llama-cpp-python's version and the CPU features and backends llama.cpp
    reports (a different wheel, flags or machine gives a different fingerprint)."""
    info = llama.llama_print_system_info().decode("utf-8", "replace")
    return f"{llama.__version__}-{hashlib.sha256(info.encode()).hexdigest()[:12]}"


def file_identity(path: str | Path) -> str:
    """A file as its resolved path, size and mtime: what a cache of facts about the file is keyed by
    (a change to any of them means the file may have changed). Raises OSError if it is gone."""
    path = Path(path).resolve()
    st = path.stat()
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    """The file's sha256, read in chunks (a GGUF can be larger than memory allows twice)."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def model_sha256(path: str | Path) -> str:
    """The model file's sha256, hashed once per (path, size, mtime) and remembered on disk."""
    path = Path(path).resolve()
    index_path = cache_root() / "file-hashes.json"
    entry = file_identity(path)
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        index = {}
    if entry not in index:
        sha = file_sha256(path)  # hashed outside the lock: a large file takes seconds
        index = update_json(index_path, lambda shared: shared.setdefault(entry, sha), indent=1)
    return index[entry]
