"""Where a frozen build of the app (``make package``: PyInstaller, one folder) keeps what it ships.

A frozen app has no ``python -m`` and no pip, and its data lies in the bundle's ``_internal/``
folder. Code that would run a Python module or pip asks here for the executable to use instead.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def bundle_data_dir() -> Path | None:
    """The bundle's data folder (PyInstaller's ``sys._MEIPASS``); None when not frozen."""
    data = getattr(sys, "_MEIPASS", None)
    return Path(data) if is_frozen() and data else None


def bundled_models_dir() -> Path | None:
    """The models embedded in the bundle (the default model), or None."""
    data = bundle_data_dir()
    return data / "models" if data is not None and (data / "models").is_dir() else None


def sibling_executable(name: str) -> Path:
    """Another executable of the same bundle (``specdec`` beside ``specdec-studio``)."""
    return Path(sys.executable).resolve().parent / name


def pip_command() -> list[str] | None:
    """How to run pip: this interpreter's pip, or in a frozen app a system Python's, or None."""
    if not is_frozen():
        return [sys.executable, "-m", "pip"]
    python = shutil.which("python3") or shutil.which("python")
    return [python, "-m", "pip"] if python else None
