"""The real window for issue 49's parts, each shot from the X screen:

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python scripts/issue49_screenshots.py docs/screenshots

1. Auto on the default model with the Q8_0 copy as its draft and the n-gram memory on, after its
   third run of the code prompt (two to remember the answer): under the decision strip, every
   source it considered, what each sent and had accepted; hovered, the price that ruled the draft
   out and what held the other sources back;
2. prompt lookup's source menu opened: our n-gram cache and latest match, and llama.cpp's
   ngram-simple, -map-k, -map-k4v and -mod;
3. a lookup run with ngram-mod as the source (k 64) on the same prompt.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from window_shots import open_window, start  # noqa: E402

from _common import CODE_PROMPT  # noqa: E402


def main() -> None:
    _, shots, scratch = start(sys.argv[1])  # its data folder: a memory of this script's runs alone

    from specdec_studio.app.qt import QtCore, QtWidgets
    from specdec_studio.engine.models import catalog

    wait = shots.wait

    window = open_window(str(catalog.resolve("default")), scratch, chat=False)
    wait(lambda: window.model.models.loaded and not window.model.machine.busy)
    controls = window.controls

    def run(mode: str) -> None:
        controls.mode.setCurrentIndex(controls.mode.findData(mode))
        window.input.set_text(CODE_PROMPT)
        window.input.run.click()
        wait(lambda: window.model.machine.busy)
        wait(lambda: not window.model.machine.busy, 300)
        window.right_tabs.setCurrentIndex(0)

    # 1. Auto with a draft it prices out and the n-gram memory, third run of the prompt
    window.models.choose_draft(str(catalog.resolve("default-q8_0")))
    wait(lambda: window.model.models.draft_path is not None and not window.model.machine.busy, 300)
    controls.max_tokens.setValue(160)
    controls.ngram_memory.setChecked(True)
    for _ in range(3):
        run("auto")
    shots.shoot("issue49-auto-sources-summary", 0.8)
    label = window.auto_sources  # its tooltip: each source's whole account
    QtWidgets.QToolTip.showText(label.mapToGlobal(QtCore.QPoint(0, label.height())), label.toolTip(), label)
    shots.shoot("issue49-auto-sources-tooltip", 0.8)
    QtWidgets.QToolTip.hideText()

    # 2. prompt lookup's source menu
    controls.mode.setCurrentIndex(controls.mode.findData("lookup"))
    controls.lookup.setCurrentIndex(controls.lookup.findData("mod"))
    controls.k.setValue(64)
    shots.settle(0.3)
    controls.lookup.showPopup()
    shots.shoot("issue49-lookup-source-menu", 0.8)
    controls.lookup.hidePopup()

    # 3. a lookup run with llama.cpp's ngram-mod as the source
    run("lookup")
    shots.shoot("issue49-lookup-ngram-mod-run", 0.8)
    window.close()


if __name__ == "__main__":
    main()
