"""The real window for issue 51's explanations and speed-up curve, each shot from the X screen
with the mouse really hovering (xdotool):

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python scripts/issue51_screenshots.py docs/screenshots

1. a draft-model run (the default model, its Q2_K copy drafting, k 4, rejected drafts shown),
   the mouse on an accepted token, then on a rejected one: their explanations;
2. the same run's figures: the speed-up curve beside them with the run's point on it, and the
   Tune tab's curve;
3. the shipped draft-model trace replayed, the mouse on one of its accepted tokens, then on a
   rejected one;
4. File > Export run > Video's dialog.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import open_window, start  # noqa: E402

PROMPT = "The history of the printing press begins in the fifteenth century, when"


def main() -> None:
    _, shots, scratch = start(sys.argv[1])

    from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.records import demo_traces, trace

    wait = shots.wait

    # the curve needs this machine's profiles
    window = open_window(str(catalog.resolve("default")), scratch, chat=False, auto_profile=True)
    model = window.model
    wait(lambda: model.models.loaded and not model.machine.busy and model.tuning.profiles["target"] is not None, 300)
    window.models.choose_draft(str(catalog.resolve("default-q2_k")))
    wait(lambda: window.model.models.draft_path is not None and not window.model.machine.busy
         and window.model.tuning.profiles["draft"] is not None, 300)
    stream, controls = window.stream, window.controls

    def hover(source: str, nth: int = 0) -> None:
        """The mouse on the ``nth`` token of ``source`` that carries an explanation."""
        metas = [m for m in stream._token_meta if m[2] == source and m[7] is not None]
        meta = metas[min(nth, len(metas) - 1)]
        cursor = QtGui.QTextCursor(stream.document())
        cursor.setPosition(meta[0])
        stream.setTextCursor(cursor)
        stream.ensureCursorVisible()
        shots.settle(0.2)
        rect = stream.cursorRect(cursor)
        point = stream.viewport().mapToGlobal(rect.center() + QtCore.QPoint(3, 0))
        # Qt shows tooltips in the active window only, and Xvfb has no window manager to activate it
        window.activateWindow()
        subprocess.run(["xdotool", "mousemove", str(point.x() + 40), str(point.y() + 40), "click", "1"], check=True)
        shots.settle(0.3)
        subprocess.run(["xdotool", "mousemove", str(point.x()), str(point.y())], check=True)
        wait(lambda: QtWidgets.QToolTip.isVisible(), 10)

    def shoot_explanations(name: str, accepted_nth: int) -> None:
        """An accepted draft token's tooltip, then a rejected draft's, then the mouse away."""
        hover("accepted_draft", accepted_nth)
        shots.shoot(f"{name}-accepted", 0.8)
        hover("rejected", 0)
        shots.shoot(f"{name}-rejected", 0.8)
        subprocess.run(["xdotool", "mousemove", "1", "1"], check=True)
        QtWidgets.QToolTip.hideText()

    # 1. a draft-model run, hovered on an accepted and a rejected token
    controls.mode.setCurrentIndex(controls.mode.findData("speculative"))
    controls.k.setValue(4)
    controls.max_tokens.setValue(96)
    window.input.show_rejected.setChecked(True)
    window.input.set_text(PROMPT)
    window.input.run.click()
    wait(lambda: window.model.machine.busy)
    wait(lambda: not window.model.machine.busy, 300)
    window.right_tabs.setCurrentIndex(0)
    shoot_explanations("issue51-explain", accepted_nth=3)

    # 2. the speed-up curve with the run's point, live figures and Tune tab
    shots.shoot("issue51-speedup-curve-live", 0.8)
    tabs = window.right_tabs
    tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index("Tune"))
    shots.shoot("issue51-speedup-curve-tune", 0.8)
    window.right_tabs.setCurrentIndex(0)

    # 3. a shipped trace replayed, hovered
    shipped = [p for p in demo_traces.shipped() if p.stem == "draft_model_on_a_chat_answer"][0]
    window.replay_speed.setCurrentIndex(trace.SPEEDS.index(4.0))
    window.demo.open_trace(str(shipped))
    wait(lambda: not window.demo.player.active, 120)
    shoot_explanations("issue51-explain-replayed-trace", accepted_nth=5)

    # 4. the video dialog over the replay
    from specdec_studio.app.widgets.video_dialog import VideoDialog

    dialog = VideoDialog(4.0, window)
    dialog.show()
    shots.shoot("issue51-video-dialog", 0.8)
    dialog.close()
    window.close()


if __name__ == "__main__":
    main()
