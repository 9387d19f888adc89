"""The real window on hybrid and recurrent models (issue 48), each shot from the X screen:

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python scripts/issue48_screenshots.py docs/screenshots

1. llama.cpp's tiny qwen35 (hybrid: attention cells and a recurrent state per sequence) with
   Mamba-2's tiny model as the draft, Auto run: the map shows the cells and the state slots;
2. the mode menu opened on it: lookahead disabled, with the refusal as its tooltip;
3. the tiny mamba2 (recurrent only) with qwen35 as its draft, speculative run: the state slots alone;
4. the tiny qwen35 with an MTP block (tests/mtp_model.py), no draft model, the MTP mode run: the
   accepted head proposals in the stream, the model bar's MTP badge with its tooltip.

The tiny models come from scripts/tiny_archs.sh.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import Shooter, open_window  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    archs = Path(subprocess.run([str(ROOT / "scripts" / "tiny_archs.sh")], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip())
    scratch = Path(tempfile.mkdtemp(prefix="shots-"))
    os.environ["SPECDEC_DATA"] = str(scratch / "data")
    os.environ["SPECDEC_CACHE"] = str(scratch / "cache")

    from specdec_studio.app.qt import QtCore, QtWidgets

    app = QtWidgets.QApplication([])
    screen = app.primaryScreen().geometry()
    tag = f"{screen.width()}x{screen.height()}"

    shots = Shooter(app, out, tag)
    wait, settle = shots.wait, shots.settle

    def shoot(name: str) -> None:
        shots.shoot(name, 0.6)

    def run_on(window, model: str, draft: str | None, mode: str, prompt: str) -> None:
        window.models.load_model(str(archs / f"{model}.gguf"))
        models = window.model.models
        wait(lambda: models.loaded and models.path.endswith(f"{model}.gguf") and not window.model.machine.busy)
        if draft is not None:
            window.models.choose_draft(str(archs / f"{draft}.gguf"))
            wait(lambda: window.model.models.draft_path is not None and not window.model.machine.busy)
        controls = window.controls
        controls.mode.setCurrentIndex(controls.mode.findData(mode))
        window.input.set_text(prompt)
        window.input.run.click()
        wait(lambda: window.model.machine.busy)
        wait(lambda: not window.model.machine.busy)
        window.right_tabs.setCurrentIndex(0)  # Live: the stream, the KV map, the figures

    window = open_window(str(archs / "qwen35-dense.gguf"), scratch, chat=False)
    wait(lambda: window.model.models.loaded and not window.model.machine.busy)

    # 1. a hybrid model, Auto with a recurrent draft: cells and state slots
    run_on(window, "qwen35-dense", "mamba2-dense", "auto", "a b c a b c a b c a b c a b")
    shoot("issue48-hybrid-auto-cells-and-states")

    # 2. lookahead disabled for it, the reason as the item's tooltip
    combo = window.controls.mode
    combo.showPopup()
    settle(0.5)
    view = combo.view()
    row = combo.findData("lookahead")
    rect = view.visualRect(view.model().index(row, 0))
    QtWidgets.QToolTip.showText(view.viewport().mapToGlobal(rect.center()),
                                combo.itemData(row, QtCore.Qt.ToolTipRole), view)
    shoot("issue48-lookahead-disabled-with-reason")
    QtWidgets.QToolTip.hideText()
    combo.hidePopup()

    # 3. a recurrent model: the states alone
    run_on(window, "mamba2-dense", "qwen35-dense", "speculative", "a b c a b c a b c a b c a b")
    shoot("issue48-recurrent-states-only")

    # 4. the model's own MTP head drafting, and the badge that says the model has one
    run_on(window, "qwen35-mtp", None, "mtp", "x y z w x y z w x y")
    badge = window.model_bar.mtp_badge
    QtWidgets.QToolTip.showText(badge.mapToGlobal(badge.rect().bottomLeft()), badge.toolTip(), badge)
    shoot("issue48-mtp-head-drafting")
    QtWidgets.QToolTip.hideText()
    window.close()


if __name__ == "__main__":
    main()
