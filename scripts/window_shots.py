"""Helpers the screenshot scripts share: wait on the real window, and shoot the X screen."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path


class Shooter:
    """Drives ``app``'s event loop while waiting, and writes ``out/<screen size>-<name>.png``."""

    def __init__(self, app, out: Path, tag: str) -> None:
        self.app, self.out, self.tag = app, out, tag

    def wait(self, condition, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            self.app.processEvents()
            if time.monotonic() > deadline:
                raise SystemExit("timed out")
            time.sleep(0.02)

    def settle(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            time.sleep(0.02)

    def shoot(self, name: str, settle_s: float = 0.5) -> None:
        self.settle(settle_s)
        path = self.out / f"{self.tag}-{name}.png"
        subprocess.run(["import", "-window", "root", str(path)], check=True)
        print(path)


def open_window(model: str, scratch: Path, *, chat: bool, auto_profile: bool = False):
    """The app's window on ``model``, with settings of its own in ``scratch`` (2 threads; the
    batch-cost profile measured only if asked), filling the X screen. The caller waits for it."""
    from specdec_studio.app.window.main_window import MainWindow
    from specdec_studio.app.qt import QtCore, QtWidgets

    settings = QtCore.QSettings(str(scratch / "settings.ini"), QtCore.QSettings.IniFormat)
    settings.setValue("threads", 2)
    settings.setValue("auto_profile", "true" if auto_profile else "false")
    settings.setValue("chat", "true" if chat else "false")
    window = MainWindow(model, settings=settings)
    screen = QtWidgets.QApplication.primaryScreen().geometry()
    window.resize(screen.width(), screen.height())
    window.move(0, 0)
    window.show()
    return window


def start(out_arg: str):
    """What every screenshot script begins with: the output folder ``out_arg`` made, a scratch
    folder whose ``data`` the app uses (nothing of yours read or written), the QApplication and a
    Shooter tagged with the X screen's size. Returns (app, shooter, scratch)."""
    from specdec_studio.app.qt import QtWidgets

    out = Path(out_arg).resolve()
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="shots-"))
    os.environ["SPECDEC_DATA"] = str(scratch / "data")
    app = QtWidgets.QApplication([])
    screen = app.primaryScreen().geometry()
    return app, Shooter(app, out, f"{screen.width()}x{screen.height()}"), scratch
