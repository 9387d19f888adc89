"""App tests run offscreen, whatever the environment says; the window fixture they share."""

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

TIMEOUT_MS = 120_000


@pytest.fixture
def open_window(qtbot, tmp_path, smollm_drafts, monkeypatch):
    """Opens the window on the default model with its own settings and data folder, and waits
    for the model (and, with ``wait_for_profile``, its batch-cost profile). ``settings`` are
    stored before the window reads them (``chat``, ``n_ctx``, …)."""
    from specdec_studio.app.window.main_window import MainWindow
    from specdec_studio.app.qt import QtCore

    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path / "data"))  # a fresh conversation store per test
    opened = []

    def open_(*, wait_for_profile: bool = False, **settings_values) -> MainWindow:
        name = "settings.ini" if not opened else f"settings{len(opened)}.ini"  # a test may reopen settings.ini
        settings = QtCore.QSettings(str(tmp_path / name), QtCore.QSettings.IniFormat)
        settings.setValue("threads", 2)
        # a window measures a missing batch-cost profile after every model and draft it loads (~10 s
        # each here): only the tests that ask for one wait for it
        settings.setValue("auto_profile", "true" if wait_for_profile else "false")
        for key, value in settings_values.items():
            settings.setValue(key, value)
        win = MainWindow("default", settings=settings)
        qtbot.addWidget(win)
        opened.append(win)
        # loaded, and the load's job over (what it reads after the model: profile, sweeps, exactness)
        qtbot.waitUntil(lambda: win.model.models.loaded and not win.model.machine.busy
                        and (not wait_for_profile or win.model.tuning.profiles["target"] is not None),
                    timeout=TIMEOUT_MS)
        return win

    yield open_
    for win in opened:
        win.close()


@pytest.fixture
def window(open_window):
    """The window in completion mode (a test module may ask ``open_window`` for another)."""
    return open_window(chat="false")
