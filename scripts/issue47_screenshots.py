"""The real window in the three situations issue 47 asks to be seen in, each shot from the X
screen (run under Xvfb at the size wanted):

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python scripts/issue47_screenshots.py docs/screenshots

1. an answer with ``a <int> b``, ``<b>`` and an image reference to a local PNG (a saved chat);
2. Run pressed while Re-measure measures the profile;
3. a download stopped mid-part, from a throttled package index on localhost serving the default
   model's real bytes (tests/local_index.py), and what the window says after.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import Shooter, open_window  # noqa: E402


def main() -> None:
    import os

    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="shots-"))
    from specdec_studio.engine.models import catalog

    default_model = catalog.known_path("default")
    os.environ["SPECDEC_DATA"] = str(scratch / "data")
    os.environ["SPECDEC_MODELS"] = str(scratch / "models")  # the download lands here, not in your cache
    os.environ["SPECDEC_CACHE"] = str(scratch / "cache")

    import pytest

    from specdec_studio.app.qt import QtGui, QtWidgets
    from specdec_studio.engine.chat.conversation import Conversation, Message
    from specdec_studio.engine.chat.store import ConversationStore
    from tests.local_index import LocalIndex, model_bytes

    app = QtWidgets.QApplication([])
    screen = app.primaryScreen().geometry()
    tag = f"{screen.width()}x{screen.height()}"

    picture = scratch / "secret.png"
    image = QtGui.QImage(64, 64, QtGui.QImage.Format_RGB32)
    image.fill(QtGui.QColor("red"))
    image.save(str(picture))
    answer = [["Compare them: if a <int> b holds, ", "sampled", 1, 1, 0.0],
              ["the <b>bold</b> tag stays text", "accepted_ngram", 2, 2, 1.0],
              [f".\n\n![the chart]({picture}) is a reference, never loaded.", "accepted_draft", 3, 3, 1.0]]
    store = ConversationStore()
    chat = Conversation(title="raw HTML and an image", messages=[
        Message("user", "How does the answer show raw HTML and an image?"),
        Message("assistant", "".join(p[0] for p in answer), pieces=answer, finish_reason="stop")])
    store.save(chat)
    store.set_last_opened(chat.id)

    window = open_window(str(default_model), scratch, chat=True)

    shots = Shooter(app, out, tag)
    wait, settle = shots.wait, shots.settle

    def shoot(name: str) -> None:
        shots.shoot(name, 0.5)

    wait(lambda: window.model.models.loaded and not window.model.machine.busy)
    window.left_tabs.setCurrentIndex(1)  # the Chats tab: the saved chat listed
    window.chat.act("open", chat.id)
    shown = window.model.chat
    wait(lambda: shown.conversation is not None and shown.conversation.id == chat.id and not window.model.machine.busy)
    shoot("issue47-raw-html-and-image")
    window.left_tabs.setCurrentIndex(0)

    # 2. Run pressed during Re-measure
    window.chat.new_conversation()
    wait(lambda: not window.model.machine.busy)
    window.right_tabs.setCurrentIndex(window.right_tabs.count() - 1)  # the Profile tab, where Re-measure is
    window.remeasure_button.click()
    wait(lambda: window.model.profiling)
    settle(1.5)
    shoot("issue47-remeasure-measuring")
    window.input.set_text("Name three prime numbers.")
    window.input.run.click()
    shoot("issue47-run-during-remeasure")
    wait(lambda: not window.model.machine.busy)
    shoot("issue47-run-during-remeasure-done")

    # 3. a download stopped mid-part
    with pytest.MonkeyPatch.context() as mp:
        index = LocalIndex()
        index.pip_environment(mp)
        index.add_model(mp, "localtest", model_bytes(default_model), parts=2)
        index.rate = 2_000_000
        window.model_bar.set_models([], [], window.model.models.path)  # lists "Download localtest" now
        window.models.download_model("localtest")
        wait(lambda: index.sent >= 6_000_000)
        shoot("issue47-download-mid-part")
        window.gate.stop()
        wait(lambda: not window.model.machine.busy, 10)
        shoot("issue47-download-stopped")
        print("left in the model folder:", sorted(p.name for p in (scratch / "models").iterdir()))
        index.close()
    window.close()


if __name__ == "__main__":
    main()
