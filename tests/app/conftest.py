"""App tests run offscreen, whatever the environment says; the window fixture they share."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot, tmp_path, smollm_drafts, monkeypatch):
    """The window on the default model in completion mode, with its own settings and data folder
    (a test module may define its own ``window``)."""
    from app.main_window import MainWindow
    from app.qt import QtCore

    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path / "data"))
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.IniFormat)
    settings.setValue("threads", 2)
    settings.setValue("chat", "false")
    win = MainWindow("default", settings=settings)
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win.model_loaded, timeout=TIMEOUT_MS)
    yield win
    win.close()
