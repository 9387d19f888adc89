"""Where the engine keeps what it can make again: the cache root (measurements, verdicts, hashes)
and the model cache. Below every module that reads or writes them, so none imports another's
package just to find a folder."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Everything the app keeps between sessions that can be made again (``SPECDEC_CACHE``)."""
    root = os.environ.get("SPECDEC_CACHE")
    if root:
        return Path(root).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specdec-studio"


def cache_dir() -> Path:
    """The model cache (``SPECDEC_MODELS``, else ``models/`` in :func:`cache_root`)."""
    root = os.environ.get("SPECDEC_MODELS")
    if root:
        return Path(root).expanduser()
    return cache_root() / "models"
