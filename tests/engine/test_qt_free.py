"""engine/, and the window's model and worker (app/model/, app/worker/), must import with Qt made
unimportable (napari's rule for its core): only app/window and app/widgets draw."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

from specdec_studio import engine
from specdec_studio.app import model, worker


def _modules(package) -> list[str]:
    prefix = package.__name__ + "."
    return [m.name for m in pkgutil.walk_packages(package.__path__, prefix)
            if not m.name.endswith(".__main__")]  # `python -m` entry points run when imported


@pytest.mark.parametrize("package", [engine, model, worker], ids=lambda p: p.__name__)
def test_imports_without_qt(package):
    modules = [package.__name__, *_modules(package)]
    code = (
        "import sys\n"
        "for name in ('PySide6', 'PyQt5', 'PyQt6', 'pyqtgraph', 'shiboken6'):\n"
        "    sys.modules[name] = None\n"
        f"for m in {modules!r}:\n"
        "    __import__(m)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph') and sys.modules[m] is not None]\n"
        "assert not bad, bad\n"
        "print(len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(modules) >= (10 if package is engine else 3)
