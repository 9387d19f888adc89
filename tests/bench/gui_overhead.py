"""The app's own cost: the same lookahead run headless and inside the window (offscreen),
alternated 3 times; prints ``gui/headless tokens-per-second ratio: X`` (target >= 0.95)."""

from __future__ import annotations

import os
import statistics
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from _common import CODE_PROMPT, THREADS, model_path  # noqa: E402

from specdec_studio.engine.config import LookaheadParams, RunConfig  # noqa: E402
from specdec_studio.engine.session import Session  # noqa: E402

ROUNDS = 3
N_TOKENS = 160
VALUES = {"mode": "lookahead", "W": 4, "N": 3, "G": 4, "max_tokens": N_TOKENS, "temperature": 0.0}


def headless(session: Session) -> float:
    config = RunConfig(mode="lookahead", max_tokens=N_TOKENS, lookahead=LookaheadParams(4, 3, 4))
    final = None
    for event in session.run(config, session.tokenize_prompt(CODE_PROMPT)):
        final = event
    return final.stats["tokens_per_second"]


def in_app(app, window) -> float:
    from specdec_studio.app.qt import QtCore

    window.controls.set_values(VALUES)
    window.input.set_text(CODE_PROMPT)
    window.start_run()
    loop = QtCore.QEventLoop()
    timer = QtCore.QTimer()
    timer.timeout.connect(lambda: loop.quit() if not window.running else None)
    timer.start(20)
    loop.exec()
    timer.stop()
    return window.last_finished.stats["tokens_per_second"]


def main() -> None:
    from specdec_studio.app.main_window import MainWindow
    from specdec_studio.app.qt import QtCore, QtWidgets

    app = QtWidgets.QApplication([])
    settings = QtCore.QSettings(tempfile.mktemp(suffix=".ini"), QtCore.QSettings.IniFormat)
    settings.setValue("threads", THREADS)
    window = MainWindow(str(model_path("default")), settings=settings)
    window.show()
    while not window.model_loaded:
        app.processEvents()
    window.input.chat_mode.setChecked(False)
    session = Session(model_path("default"), n_ctx=4096, n_threads=THREADS)
    ours, gui = [], []
    headless(session)
    in_app(app, window)
    for r in range(ROUNDS):
        ours.append(headless(session))
        gui.append(in_app(app, window))
        print(f"round {r + 1}: headless {ours[-1]:7.2f} t/s   in the app {gui[-1]:7.2f} t/s")
    print(f"gui/headless tokens-per-second ratio: {statistics.median(gui) / statistics.median(ours):.3f}")
    session.close()
    window.close()


if __name__ == "__main__":
    main()
