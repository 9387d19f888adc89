"""The real window with the default model's layers on two llama.cpp RPC servers on this machine,
each shot from the X screen:

    xvfb-run -s "-screen 0 1366x768x24" .venv/bin/python scripts/rpc_screenshots.py docs/screenshots

1. the model loaded on the servers (the title says so, the model bar's field names them, its
   tooltip lists what each holds), a chat answer by prompt lookup;
2. one server killed mid-answer: the sentence naming it, the chat still on screen with the answer
   kept as far as it had come (marked interrupted), the window ready to load the model again;
3. on two fresh servers, one stalled mid-answer (SIGSTOP): the status bar's word once the servers
   have been silent for 10 s, then what Stop did 5 s later (the engine process ended, the server
   that still does not answer named, the chat kept).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import open_window, start  # noqa: E402

from tests.rpc_local import rpc_servers  # noqa: E402


def main() -> None:
    _, shots, scratch = start(sys.argv[1])

    from specdec_studio.app.qt import QtWidgets
    from specdec_studio.engine.models import catalog

    wait = shots.wait
    model = str(catalog.resolve("default"))

    with rpc_servers(2) as procs:
        window = open_window(model, scratch, chat=True)
        wait(lambda: window.model.models.loaded and not window.model.machine.busy)
        window.model_bar.rpc.setText(",".join(p.endpoint for p in procs))
        window.models.load_model(model)
        wait(lambda: window.model.models.loaded and not window.model.machine.busy and "RPC" in window.windowTitle())
        window.controls.set_values({"mode": "lookup", "max_tokens": 96})
        window.input.set_text("List the planets of the solar system, one line each, with one fact about each.")
        window.runs.start_run()
        wait(lambda: window.model.machine.busy)
        wait(lambda: not window.model.machine.busy)
        window.right_tabs.setCurrentIndex(0)
        field = window.model_bar.rpc
        QtWidgets.QToolTip.showText(field.mapToGlobal(field.rect().bottomLeft()), field.toolTip(), field)
        shots.shoot("rpc-model-on-two-servers", 0.8)
        QtWidgets.QToolTip.hideText()

        window.controls.set_values({"max_tokens": 1500})
        window.input.set_text("Now write a long story about a lighthouse keeper who counts the ships.")
        window.runs.start_run()
        wait(lambda: window.stream.toPlainText().count("lighthouse") >= 2 or len(window.stream.toPlainText()) > 900)
        shots.settle(1.0)
        procs[1].kill()
        wait(lambda: not window.model.machine.busy and "stopped answering" in window.error_label.text())
        wait(lambda: window.model.chat.conversation.messages[-1].state == "interrupted")  # written by the fresh engine
        shots.shoot("rpc-server-lost-mid-answer", 0.8)

    with rpc_servers(2) as procs:
        window.model_bar.rpc.setText(",".join(p.endpoint for p in procs))
        window.models.load_model(model)
        wait(lambda: window.model.models.loaded and not window.model.machine.busy and "RPC" in window.windowTitle())
        window.input.set_text("Write a long story about a sailor who maps the coast, bay by bay.")
        shown = len(window.stream.toPlainText())
        window.runs.start_run()
        wait(lambda: len(window.stream.toPlainText()) > shown + 700)
        os.kill(procs[1].proc.pid, signal.SIGSTOP)
        try:
            wait(lambda: "No word from the RPC servers for 11 s" in window.statusBar().currentMessage())
            shots.shoot("rpc-server-stalled-mid-answer", 0.3)
            window.gate.stop()
            wait(lambda: not window.model.machine.busy and "after Stop" in window.error_label.text())
            wait(lambda: window.model.chat.conversation.messages[-1].state == "interrupted")
            shots.shoot("rpc-stalled-server-stopped", 0.8)
        finally:
            os.kill(procs[1].proc.pid, signal.SIGCONT)
        window.close()


if __name__ == "__main__":
    main()
