"""``specdec-studio --self-test``: the real window, on the model given, decodes a few tokens and
the process exits with what it saw (one JSON line on standard output, exit status 0), or with one
sentence on standard error and status 1. Used by the wheel's and the bundle's smoke tests: a GUI
that merely has not crashed yet proves little; one that loaded a model and streamed its tokens does.

The window gets scratch settings (no batch-cost profile after the load, nothing written to the
user's settings)."""

from __future__ import annotations

import atexit
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from specdec_studio.app.qt import QtCore

PROMPT = "The capital of France is"
N_TOKENS = 8
POLL_MS = 50


def scratch_settings() -> QtCore.QSettings:
    """Settings in a folder of their own, removed when the process ends."""
    folder = Path(tempfile.mkdtemp(prefix="specdec-self-test-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    settings = QtCore.QSettings(str(folder / "settings.ini"), QtCore.QSettings.IniFormat)
    settings.setValue("auto_profile", "false")
    return settings


class SelfTest(QtCore.QObject):
    """Drives ``window`` through load → run → result, then quits the application."""

    def __init__(self, window, app, timeout_s: float = 120.0) -> None:
        super().__init__(window)
        self.window, self.app = window, app
        self.deadline = time.monotonic() + timeout_s
        self.started = False
        self.timer = QtCore.QTimer(self)
        self.timer.timeout.connect(self._poll)
        self.timer.start(POLL_MS)

    def _poll(self) -> None:
        w = self.window
        if time.monotonic() > self.deadline:
            self._end(1, f"self-test: no result within the time limit ({w.statusBar().currentMessage()})")
        elif not self.started and w.model.models.loaded:
            w.input.chat_mode.setChecked(False)
            w.controls.set_values({"mode": "plain", "max_tokens": N_TOKENS})
            w.input.set_text(PROMPT)
            w.runs.start_run()
            self.started = w.model.running
        elif not self.started and not w.model.loading and w.error_label.text():
            self._end(1, f"self-test: {w.error_label.text()}")
        elif self.started and not w.model.running:
            final = w.model.run.last_finished
            if final is None:
                self._end(1, f"self-test: the run failed: {w.error_label.text()}")
                return
            print(json.dumps({"model": w.model.models.path, "n_tokens": len(final.token_ids), "text": final.text,
                              "shown": w.stream.generated_text()}), flush=True)
            self._end(0, "")

    def _end(self, status: int, message: str) -> None:
        self.timer.stop()
        if message:
            print(message, file=sys.stderr, flush=True)
        self.window.close()
        self.app.exit(status)
