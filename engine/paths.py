"""Where the engine keeps what it can make again: the cache root (measurements, verdicts, hashes)
and the model cache; and what it cannot: the data root (conversations, the n-gram memory). Below
every module that reads or writes them, so none imports another's package just to find a folder."""

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


def data_root() -> Path:
    """What the user made and would miss (conversations, the n-gram memory): ``SPECDEC_DATA`` if
    set, else platformdirs' user data directory."""
    root = os.environ.get("SPECDEC_DATA")
    if root:
        return Path(root).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("specdec-studio", appauthor=False))
