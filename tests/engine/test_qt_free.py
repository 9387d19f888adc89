"""engine/ must import with Qt made unimportable (napari's rule for its core)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

from specdec_studio import engine


def test_engine_imports_without_qt():
    modules = [m.name for m in pkgutil.walk_packages(engine.__path__, "specdec_studio.engine.")
               if not m.name.endswith(".__main__")]  # `python -m` entry points run when imported
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
    assert len(modules) >= 10
