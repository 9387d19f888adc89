"""The window serves (issue 80, part 3): the Batch tab's Serve starts the OpenAI API on the loaded
model; a real client's request decodes there, drawn live in a slot and listed with its figures; the
window's own Run says it waits for the server; Stop ends the server and the window runs again."""

from __future__ import annotations

import threading

import httpx
import openai

from tests.app.conftest import TIMEOUT_MS
from tests.rpc_local import free_port


def test_the_window_serves_a_real_client_and_stop_ends_it(open_window, qtbot):
    window = open_window()
    window.controls.set_values({"mode": "auto", "max_tokens": 24})
    port = free_port()
    window.jobs.start_serving(port, 2)
    qtbot.waitUntil(lambda: "Serving" in window.batch_view.summary.text(), timeout=TIMEOUT_MS)
    assert window.model.running and window.centre_tabs.currentIndex() == 2
    answers = []
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)

    def ask() -> None:
        answers.append(client.chat.completions.create(
            model="", messages=[{"role": "user", "content": "Name three colours."}], max_tokens=16, temperature=0))

    thread = threading.Thread(target=ask)
    thread.start()
    qtbot.waitUntil(lambda: bool(answers), timeout=TIMEOUT_MS)
    thread.join()
    qtbot.waitUntil(lambda: window.batch_view.finished.count() == 1, timeout=TIMEOUT_MS)
    answer = answers[0]
    assert answer.usage.completion_tokens == 16
    assert "16 tokens" in window.batch_view.finished.item(0).text()
    assert answer.choices[0].message.content in "".join(lane.stream.toPlainText() for lane in window.batch_view.lanes)
    window.input.set_text("Hello")
    window.runs.start_run()  # the engine is the server's: the window says so and waits
    assert "serving requests" in window.statusBar().currentMessage()
    window.gate.stop()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    try:
        httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2)
        still_listening = True
    except httpx.HTTPError:
        still_listening = False
    assert not still_listening
    window.runs.start_run()
    qtbot.waitUntil(lambda: not window.model.running and window.model.run.last_finished is not None,
                    timeout=TIMEOUT_MS)


def test_stop_of_one_request_ends_it_and_the_server_answers_the_other(open_window, qtbot):
    """The slot's own Stop: that client gets its answer so far at once (finish "stop", fewer tokens
    than it asked), the other request runs to its length, and the server still answers."""
    window = open_window()
    window.controls.set_values({"mode": "auto", "max_tokens": 24})
    port = free_port()
    window.jobs.start_serving(port, 2)
    qtbot.waitUntil(lambda: "Serving" in window.batch_view.summary.text(), timeout=TIMEOUT_MS)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=120)
    answers: dict[str, object] = {}

    def ask(question: str, max_tokens: int) -> None:
        answers[question] = client.chat.completions.create(
            model="", messages=[{"role": "user", "content": question}], max_tokens=max_tokens, temperature=0)

    long_one, short_one = "Write a long story about a lighthouse keeper.", "Name three colours."
    askers = [threading.Thread(target=ask, args=(long_one, 400)), threading.Thread(target=ask, args=(short_one, 40))]
    for asker in askers:
        asker.start()
    view = window.batch_view
    # the long request's lane: the one still decoding when the short one is done
    qtbot.waitUntil(lambda: view.finished.count() >= 1, timeout=TIMEOUT_MS)
    running = [lane for lane in view.lanes if not lane.stop_button.isHidden()]
    assert len(running) == 1
    running[0].stop_button.click()
    for asker in askers:
        asker.join(120)
    stopped, finished = answers[long_one], answers[short_one]
    assert stopped.choices[0].finish_reason == "stop" and 0 < stopped.usage.completion_tokens < 400
    assert stopped.choices[0].message.content  # what was decoded reached the client
    assert finished.usage.completion_tokens == 40 or finished.choices[0].finish_reason == "stop"
    qtbot.waitUntil(lambda: view.finished.count() == 2, timeout=TIMEOUT_MS)
    assert "cancelled" in view.finished.item(0).text()  # the newest first
    assert "tokens/step (plain 1)" in view.finished.item(1).text()
    assert window.model.running  # the server goes on
    ask(short_one, 8)
    assert answers[short_one].usage.completion_tokens == 8
    window.gate.stop()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
