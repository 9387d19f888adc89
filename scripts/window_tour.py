"""Every tab of the real window after an Auto run, shot from the X screen (issue 78's look after
the window became a model and controllers):

    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/window_tour.py /tmp/shots
    xvfb-run -a -s "-screen 0 2560x1440x24" .venv/bin/python scripts/window_tour.py /tmp/shots

An Auto chat turn on the default model, then each tab of the centre (Stream, Race, Batch), the right
panel (Live, Inspect, Tune, Profile) and the left panel (Run, Chats), presentation mode, and the
Batch tab serving two OpenAI clients at once on 127.0.0.1 (mid-answer and when both are done).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from window_shots import open_window, start  # noqa: E402

MESSAGE = ("Here is a function:\n\ndef total(items):\n    result = 0\n    for item in items:\n"
           "        result += item.price * item.quantity\n    return result\n\n"
           "Rewrite it to skip items whose quantity is zero, and show the whole function.")


def main() -> None:
    _, shots, scratch = start(sys.argv[1])
    from specdec_studio.engine.models import catalog

    window = open_window(str(catalog.resolve("default")), scratch, chat=True)
    shots.wait(lambda: window.model.models.loaded and not window.model.machine.busy, 300)
    window.controls.set_values({"mode": "auto", "max_tokens": 160})
    window.input.set_text(MESSAGE)
    window.input.run.click()
    shots.wait(lambda: window.model.machine.busy)
    shots.wait(lambda: not window.model.machine.busy, 300)
    shots.settle(1.0)
    for index in range(window.centre_tabs.count()):
        window.centre_tabs.setCurrentIndex(index)
        for right in range(window.right_tabs.count()):
            if index and right:  # the other centre tabs beside the Live tab only
                break
            window.right_tabs.setCurrentIndex(right)
            name = f"{window.centre_tabs.tabText(index)}-{window.right_tabs.tabText(right)}".lower()
            shots.shoot(name)
    window.centre_tabs.setCurrentIndex(0)
    window.right_tabs.setCurrentIndex(0)
    window.left_tabs.setCurrentIndex(1)
    shots.shoot("chats")
    window.left_tabs.setCurrentIndex(0)
    window.presentation.set_on(True)
    shots.shoot("presentation", 1.0)
    window.presentation.set_on(False)
    shots.shoot("after-presentation", 1.0)
    serve_two_clients(window, shots)
    window.close()


def serve_two_clients(window, shots) -> None:
    """Serve, two clients ask at once (bounded: two requests, 96 tokens each, on 127.0.0.1)."""
    import threading

    import openai

    from tests.rpc_local import free_port

    port = free_port()
    window.jobs.start_serving(port, 2)
    shots.wait(lambda: "Serving" in window.batch_view.summary.text(), 120)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=300)
    questions = ("Write a short poem about the sea.", "List the planets of the solar system, one per line.")

    def ask(text: str) -> None:
        client.chat.completions.create(model="", messages=[{"role": "user", "content": text}], max_tokens=96)

    askers = [threading.Thread(target=ask, args=(q,)) for q in questions]
    for asker in askers:
        asker.start()
    shots.wait(lambda: any(lane.stream.toPlainText() for lane in window.batch_view.lanes), 120)
    shots.shoot("serving-mid-answer", 1.5)
    shots.wait(lambda: window.batch_view.finished.count() == 2, 300)
    for asker in askers:
        asker.join()
    shots.shoot("serving-done", 0.5)
    window.gate.stop()
    shots.wait(lambda: not window.model.running, 60)


if __name__ == "__main__":
    main()
