"""The desktop app, offscreen, on the real default model: every mode, colours, KV map, pending
parameters, Stop, bad files, chat."""

from __future__ import annotations

import time

import pytest

from specdec_studio.app.window.main_window import MainWindow
from specdec_studio.app.qt import QtCore, QtGui
from specdec_studio.app.widgets.token_stream import SOURCE_COLOURS, SOURCE_PROPERTY
from specdec_studio.engine.strategies.explain import proposer_name
from specdec_studio.engine.models import catalog
from tests.conftest import CODE_PROMPT

TIMEOUT_MS = 120_000


@pytest.fixture
def window(open_window):
    return open_window()  # chat mode, as the app starts


def run(window, qtbot, text: str, **values) -> None:
    window.controls.set_values(values)
    window.input.set_text(text)
    window.runs.start_run()
    assert window.model.running
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()


def colours_by_source(window) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    block = window.stream.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            source = fmt.property(SOURCE_PROPERTY)
            out.setdefault(source, set()).add(fmt.foreground().color().name() if fmt.hasProperty(
                QtGui.QTextFormat.ForegroundBrush) else "default")
            it += 1
        block = block.next()
    return out


def test_plain_run_streams_the_engine_output(window, qtbot):
    window.input.chat_mode.setChecked(False)
    run(window, qtbot, "The capital of France is", mode="plain", max_tokens=24)
    final = window.model.run.last_finished
    assert final.finish_reason == "length" and len(final.token_ids) == 24
    assert window.stream.generated_text() == final.text
    assert window.stats.values["tokens"].text() == "24"
    explained = lambda: [m[7] for m in window.stream._token_meta if m[2] == "sampled"]  # noqa: E731
    assert len(explained()) == 24 and all(why is not None for why in explained())
    # View > Explain tokens off: the next run records no explanations (and pays nothing for them)
    window.explain_action.setChecked(False)
    run(window, qtbot, "The capital of France is", mode="plain", max_tokens=4)
    assert len(explained()) == 4 and all(why is None for why in explained())
    last_token = [m for m in window.stream._token_meta if m[2] == "sampled"][-1]
    assert "did not record why" in window.stream.tooltip_of(last_token)


def test_lookahead_colours_accepted_tokens_and_draws_every_sequence(window, qtbot):
    shapes, images = set(), []
    original = window.kv_map.set_snapshot

    def record(snapshot):
        shapes.add(snapshot.seq_of_cell.shape[0])
        images.append(snapshot.seq_of_cell.sum())
        original(snapshot)

    window.kv_map.set_snapshot = record
    window.input.chat_mode.setChecked(False)
    run(window, qtbot, CODE_PROMPT, mode="lookahead", W=4, N=3, G=4, max_tokens=80)
    assert window.stream.generated_text() == window.model.run.last_finished.text
    colours = colours_by_source(window)
    assert colours["accepted_ngram"] == {SOURCE_COLOURS["accepted_ngram"]}
    assert shapes == {4 + 4 + 1}
    assert len(set(images)) > 1  # the map changed during the run
    assert window.kv_map.image.image.shape[0] == 9


def test_speculative_and_lookup_colour_drafts(window, qtbot, smollm_drafts):
    window.models.choose_draft(str(smollm_drafts["default-q3_k_m"]))
    qtbot.waitUntil(lambda: window.model.models.draft_path is not None and not window.model.machine.busy,
                    timeout=TIMEOUT_MS)
    window.input.chat_mode.setChecked(False)
    window.input.show_rejected.setChecked(True)
    run(window, qtbot, CODE_PROMPT, mode="speculative", k=4, max_tokens=60)
    assert window.stream.generated_text() == window.model.run.last_finished.text
    colours = colours_by_source(window)
    assert colours["accepted_draft"] == {SOURCE_COLOURS["accepted_draft"]}
    assert "rejected" in colours  # ghosts shown where drafts were tried
    # every token explains itself: the draft's accepted tokens and its rejected proposals
    tips = {source: [window.stream.tooltip_of(m) for m in window.stream._token_meta if m[2] == source]
            for source in ("accepted_draft", "rejected", "sampled")}
    assert all("target p" in tip and "the draft model q" in tip and "Greedy: the target&#x27;s argmax was" in tip
               and ": accepted." in tip for tip in tips["accepted_draft"])
    first_ghosts = [tip for tip in tips["rejected"] if "Never compared" not in tip]
    assert first_ghosts and all("rejected;" in tip and "took its place" not in tip for tip in first_ghosts)
    assert any("replaced it" in tip for tip in tips["sampled"])  # the token that replaced a rejected draft
    for lookup in ("cache", "latest"):
        run(window, qtbot, CODE_PROMPT, mode="lookup", lookup=lookup, k=4, ngram=3, max_tokens=60)
        assert not window.controls.lookup.isHidden()  # the policy combo shows in lookup mode only
        assert window.model.run.last_finished.stats["n_drafted"] > 0
        assert window.stream.generated_text() == window.model.run.last_finished.text
    assert window.controls.config().speculative.lookup == "latest"
    window.controls.set_values({"mode": "speculative"})
    assert window.controls.lookup.isHidden()


def test_auto_shows_its_decisions_proposers_and_calibration(window, qtbot, monkeypatch):
    from specdec_studio.engine.session import Session
    from tests.engine.test_auto import FLAT

    from specdec_studio.engine.config import DEFAULT_MODE

    assert window.controls.config().mode == DEFAULT_MODE  # the mode a new user starts in
    # price steps as on a machine where verifying is nearly free, so that Auto drafts here too
    monkeypatch.setattr(Session, "cost_curve", lambda self: FLAT)
    window.input.chat_mode.setChecked(False)
    run(window, qtbot, CODE_PROMPT, mode="auto", max_tokens=64)
    assert window.stream.generated_text() == window.model.run.last_finished.text
    assert not window.decisions_box.isHidden() and len(window.decisions.steps) > 10
    decisions = {record.decision for _step, record, _n in window.decisions.steps}
    assert "plain" in decisions or len(decisions) > 1
    proposers = {meta[6] for meta in window.stream._token_meta if meta[2] == "accepted_ngram"}
    # every accepted token names its source, joined by the others that proposed it too
    assert proposers and {p for joined in proposers for p in joined.split("+")} <= {"ngram", "ngram_alt", "suffix"}
    assert any("+" in p for p in proposers)  # the code prompt repeats itself: both sources saw the same tokens
    assert proposer_name("ngram+suffix") == "the context n-gram cache and the suffix match, which agreed"
    assert not window.stats.calibration_plot.isHidden()
    # the sources' account, and how long a step could be (the flat curve's price allows 64)
    assert window.auto_sources.text().startswith("Sources, accepted/sent: ")
    assert window.auto_sources.toolTip().splitlines()[-1].startswith("steps of at most 64 proposed tokens")
    run(window, qtbot, "Hello", mode="plain", max_tokens=4)
    assert window.decisions_box.isHidden() and window.stats.calibration_plot.isHidden()


def test_pending_parameters_apply_to_the_next_run_only(window, qtbot):
    window.input.chat_mode.setChecked(False)
    window.controls.set_values({"mode": "plain", "max_tokens": 40})
    window.input.set_text("Once upon a time")
    window.runs.start_run()
    qtbot.waitUntil(lambda: window.controls.pending() == [], timeout=TIMEOUT_MS)  # applied at start
    window.controls.set_values({"max_tokens": 12})
    assert window.controls.pending() == ["max_tokens"]
    assert "Pending" in window.controls.pending_label.text()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    assert len(window.model.run.last_finished.token_ids) == 40
    run(window, qtbot, "Once upon a time")
    assert len(window.model.run.last_finished.token_ids) == 12
    assert window.controls.pending() == []


def test_invalid_combination_is_explained_and_blocks_run(window):
    window.controls.set_values({"mode": "lookahead", "W": 64, "N": 10, "G": 64})
    assert "batch holds 512" in window.controls.error_label.text()
    assert not window.input.run.isEnabled()
    window.controls.set_values({"mode": "speculative", "W": 4, "N": 3, "G": 4})
    assert "draft model" in window.controls.error_label.text()


def test_stop_ends_within_one_step_and_the_app_runs_again(window, qtbot):
    emitted: list[tuple[float, object]] = []
    original_emit = window.worker._emit

    def record(event):
        emitted.append((time.perf_counter(), event))
        original_emit(event)

    window.worker._emit = record
    window.input.chat_mode.setChecked(False)
    window.controls.set_values({"mode": "plain", "max_tokens": 2000})
    window.input.set_text(CODE_PROMPT)
    window.runs.start_run()
    qtbot.waitUntil(lambda: len(window.stats.steps) >= 3 or not window.model.running, timeout=TIMEOUT_MS)
    assert window.model.running
    stop_time = time.perf_counter()
    window.gate.stop()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    from specdec_studio.engine.events import StepDone

    assert window.model.run.last_finished.finish_reason == "cancelled"
    steps_after_stop = [e for t, e in emitted if t > stop_time and isinstance(e, StepDone)]
    # at most the step in flight when Stop came, and the one before it: the window's runs make their
    # explanations while the next step decodes, so a step's event leaves after that decode
    assert len(steps_after_stop) <= 2
    assert "cancelled" in window.statusBar().currentMessage()
    run(window, qtbot, "Hello", max_tokens=8)
    assert window.model.run.last_finished.finish_reason == "length"


def _recording(window) -> list:
    """Every event the worker emits from now on, in order (the window still gets each one)."""
    emitted: list = []
    original_emit = window.worker._emit

    def record(event):
        emitted.append(event)
        original_emit(event)

    window.worker._emit = record
    return emitted


def test_stop_during_a_model_load_skips_its_profile_and_keeps_the_app_usable(window, qtbot, tmp_path, monkeypatch,
                                                                             smollm_drafts):
    """Nothing is cached, so the load would measure a batch-cost profile. Stop pressed during the
    load skips it, and the draft the window restores right after the load (a job of its own) does
    not measure it either: the Stop is not lost between jobs."""
    from specdec_studio.app.worker.messages import DraftLoaded, JobEnded, JobTaken, ProfileReady, ProfileStarted
    from specdec_studio.engine.tuning.profile import profile_dir

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    window.settings.setValue("auto_profile", "true")
    window.settings.setValue("last_draft", str(smollm_drafts["default-q3_k_m"]))
    emitted = _recording(window)
    window.models.load_model("default")
    assert window.model.loading and window.input.stop.isEnabled()
    window.gate.stop()
    qtbot.waitUntil(lambda: any(isinstance(e, DraftLoaded) for e in emitted) and not window.model.machine.busy,
                    timeout=TIMEOUT_MS)
    reports = [e for e in emitted if not isinstance(e, (JobTaken, JobEnded))]
    assert isinstance(reports[-1], ProfileReady)
    assert window.model.models.loaded and not window.model.loading
    stopped = [e for e in emitted if isinstance(e, ProfileReady) and e.message]
    assert stopped and all("stopped" in e.message for e in stopped)
    # every measurement that started (the fixture's first load may still have been measuring) was stopped
    assert len([e for e in emitted if isinstance(e, ProfileStarted) and e.measuring]) == len(stopped)
    assert not list(profile_dir().glob("*.json"))  # nothing was measured to the end
    window.input.chat_mode.setChecked(False)
    run(window, qtbot, "Hello", mode="plain", max_tokens=8)
    assert window.model.run.last_finished.finish_reason == "length"


def test_an_error_in_the_middle_of_a_chat_turn_ends_the_answer_as_interrupted(window, qtbot, monkeypatch):
    from specdec_studio.engine import runner

    original = runner.kv_snapshot  # the run takes each step's KV picture (the window's step_snapshots)
    calls: list[int] = []

    def failing(target, step, n_seq):
        calls.append(step)
        if len(calls) == 4:
            raise RuntimeError("a fault in the middle of a run")
        return original(target, step, n_seq)

    with monkeypatch.context() as patched:
        patched.setattr(runner, "kv_snapshot", failing)
        window.input.chat_mode.setChecked(True)
        run(window, qtbot, "Count from one to twenty, please.", mode="plain", max_tokens=64)
    assert "a fault in the middle of a run" in window.error_label.text()
    answer = window.model.chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.state == "interrupted" and answer.content
    assert "[interrupted" in window.stream.toPlainText()
    from specdec_studio.engine.chat.turns import ConversationChanged

    # a note about the chat as it stands (as an engine process that died leaves one) ...
    kept = "the answer that was cut short is kept"
    window.chat._on_conversation(ConversationChanged(window.model.chat.conversation, kept))
    assert window.conversation_note.text() == "The answer that was cut short is kept"
    run(window, qtbot, "Thanks.", mode="plain", max_tokens=8)  # the chat goes on
    assert window.model.chat.conversation.messages[-1].state == "done"
    assert window.conversation_note.text() == ""  # ... was news until the next run


def test_bad_model_file_shows_the_error_and_keeps_the_app_usable(window, qtbot, tmp_path):
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    window.models.load_model(str(bogus))
    qtbot.waitUntil(lambda: "broken.gguf" in window.error_label.text(), timeout=TIMEOUT_MS)
    assert window.model.models.loaded  # the previous model stays loaded
    window.input.chat_mode.setChecked(False)
    run(window, qtbot, "Hello", mode="plain", max_tokens=8)
    assert window.model.run.last_finished.finish_reason == "length"


def test_two_turn_chat_keeps_turns_and_regenerate_replaces_only_the_last(window, qtbot):
    window.input.chat_mode.setChecked(True)
    run(window, qtbot, "Name one colour.", mode="plain", max_tokens=24)
    run(window, qtbot, "Name one animal.", max_tokens=24)
    messages = window.model.chat.conversation.messages
    assert [m.content for m in messages if m.role == "user"] == ["Name one colour.", "Name one animal."]
    assert all(m.figure("n_predict") for m in messages if m.role == "assistant")
    assert messages[3].figure("n_prompt_reused") > 0  # the second turn reused the first one's cells
    first_answer = messages[1].content
    text_before = window.stream.toPlainText()
    assert "Name one colour." in text_before and "Name one animal." in text_before
    window.controls.set_values({"temperature": 0.9, "seed": 7})
    window.chat.regenerate()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    messages = window.model.chat.conversation.messages
    assert len(messages) == 4
    assert messages[1].content == first_answer
    assert messages[2].content == "Name one animal." and messages[3].figure("n_predict")
    assert window.stream.toPlainText().count("You: ") == 2
    # what the window shows is the engine's record, after a reload of the model too
    window.models.load_model("default")
    qtbot.waitUntil(lambda: window.model.models.loaded and not window.model.machine.busy, timeout=TIMEOUT_MS)
    window.chat.regenerate()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    assert window.model.run.last_finished.finish_reason in ("stop", "length")
    assert [m.role for m in window.model.chat.conversation.messages] == ["user", "assistant", "user", "assistant"]
    assert window.worker._state.conversation.view() == window.model.chat.conversation


def test_the_conversation_is_saved_and_reopens_on_start(window, qtbot, tmp_path):
    window.input.chat_mode.setChecked(True)
    run(window, qtbot, "Name one colour.", mode="plain", max_tokens=16)
    conv_id = window.model.chat.conversation.id
    qtbot.waitUntil(lambda: window.sidebar.list.count() == 1, timeout=TIMEOUT_MS)
    out = tmp_path / "chat.html"
    window.chat.write_export("html", str(out))
    assert "Name one colour." in out.read_text() and "accepted from an n-gram" in out.read_text()
    window.close()
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.IniFormat)
    again = MainWindow("default", settings=settings)
    qtbot.addWidget(again)
    qtbot.waitUntil(lambda: again.model.chat.conversation is not None and bool(again.model.chat.conversation.messages),
                    timeout=TIMEOUT_MS)
    assert again.model.chat.conversation.id == conv_id
    again.chat.new_conversation()
    qtbot.waitUntil(lambda: not again.model.chat.conversation.messages, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: again.model.models.loaded and not again.model.machine.busy, timeout=TIMEOUT_MS)
    again.close()


def test_settings_persist(qtbot, tmp_path, smollm_drafts):
    path = str(tmp_path / "persist.ini")
    settings = QtCore.QSettings(path, QtCore.QSettings.IniFormat)
    settings.setValue("auto_profile", "false")
    win = MainWindow("default", settings=settings)
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win.model.models.loaded and not win.model.machine.busy, timeout=TIMEOUT_MS)
    win.controls.set_values({"mode": "lookahead", "W": 7, "N": 4, "G": 2})
    win.preferences.set_theme("dark")
    win.explain_action.setChecked(False)
    win.close()
    again = MainWindow(autoload=False, settings=QtCore.QSettings(path, QtCore.QSettings.IniFormat))
    qtbot.addWidget(again)
    values = again.controls.values()
    assert (values["mode"], values["W"], values["N"], values["G"]) == ("lookahead", 7, 4, 2)
    assert again.settings.value("theme") == "dark"
    assert not again.explain_action.isChecked()
    assert again.settings.value("last_model") == str(catalog.known_path("default"))
    again.preferences.set_theme("system")
    again.close()


def test_the_last_draft_model_is_restored(qtbot, tmp_path, smollm_drafts):
    settings = QtCore.QSettings(str(tmp_path / "draft.ini"), QtCore.QSettings.IniFormat)
    settings.setValue("threads", 2)
    settings.setValue("params", {"mode": "speculative"})
    settings.setValue("last_draft", str(smollm_drafts["default-q3_k_m"]))
    settings.setValue("auto_profile", "false")
    win = MainWindow("default", settings=settings)
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win.model.models.draft_path is not None and not win.model.machine.busy, timeout=TIMEOUT_MS)
    assert win.model.models.draft_path == str(smollm_drafts["default-q3_k_m"])
    assert win.controls.error is None  # a restored speculative mode can run at once
    win.close()


def test_the_baseline_repeats_the_last_run_and_a_stopped_one_is_not_kept(window, qtbot):
    window.input.chat_mode.setChecked(False)
    run(window, qtbot, "The capital of France is", mode="lookup", k=3, max_tokens=24)
    window.controls.set_values({"max_tokens": 200})  # pending: must not change the baseline
    emitted = []
    original_emit = window.worker._emit
    window.worker._emit = lambda event: (emitted.append(event), original_emit(event))
    window.tuning.measure_baseline()
    window.gate.stop()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    assert window.model.run.baselines == {}
    assert "baseline was not measured" in window.error_label.text()
    window.tuning.measure_baseline()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    assert list(window.model.run.baselines) == [window.model.run.last_run_key]
    from specdec_studio.app.worker.messages import BaselineDone

    done = [e for e in emitted if isinstance(e, BaselineDone)]
    assert len(done) == 1 and done[0].key == window.model.run.last_run_key
    assert not window.stats.values["speed-up"].text().startswith("≈")


def test_the_chats_list_shows_cli_chats_and_names_a_damaged_file(window, qtbot, tmp_path):
    import os
    import subprocess
    import sys

    from specdec_studio.app.widgets.conversation_list import ID_ROLE

    data = tmp_path / "data"  # the window's own data folder (its fixture's)
    done = subprocess.run(
        [sys.executable, "-m", "specdec_studio.engine.cli", "chat", "-n", "8", "-t", "2", "-c", "1024"],
        input="Name a colour.\n",
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "SPECDEC_DATA": str(data)},
    )
    conv_id = done.stderr.split("[conversation ")[1].split(":")[0]
    (data / "conversations" / "broken.json").write_text('[{"not": "a conversation"}]')
    window.worker.conversation("list")

    def listed() -> list[str]:
        return [window.sidebar.list.item(i).data(ID_ROLE) for i in range(window.sidebar.list.count())]

    qtbot.waitUntil(lambda: conv_id in listed(), timeout=TIMEOUT_MS)
    assert listed() == [conv_id]
    assert "broken.json" in window.statusBar().currentMessage()


@pytest.mark.slow
def test_the_profile_tab_compares_weight_formats_and_loads_the_chosen_copy(window, qtbot):
    window.tuning.compare_formats(("Q8_0",))
    assert window.model.running and not window.formats_button.isEnabled()
    qtbot.waitUntil(lambda: not window.model.running, timeout=600_000)
    text = window.formats_label.text()
    assert "Q4_1" in text and "Q8_0" in text and "original" in text and "%" in text
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in text  # every figure says which file it was measured on
    assert window.copy_choice.count() == 1 and window.load_copy_button.isEnabled()
    copy = window.copy_choice.currentData()
    assert copy.endswith(".draft-Q8_0.gguf")
    assert window.model.models.path != copy  # nothing changes until the user picks the copy
    window.load_copy_button.click()
    qtbot.waitUntil(
        lambda: window.model.models.loaded and window.model.models.path == copy and not window.model.machine.busy,
        timeout=TIMEOUT_MS
    )
    run(window, qtbot, "Hello", mode="auto", max_tokens=8)
    assert window.model.run.last_finished.token_ids
    # with the copy loaded, each mode on each file is measured against plain on the original, not the copy
    window.format_speed_button.click()
    assert window.model.running and not window.format_speed_button.isEnabled()
    qtbot.waitUntil(lambda: not window.model.running, timeout=600_000)
    text = window.format_speed_label.text()
    assert not window.format_speed_label.isHidden() and "SmolLM2-135M-Instruct.Q4_1.gguf" in text
    assert "<td>Q4_1</td>" in text and "<td>Q8_0</td>" in text and "× orig. plain" in text
    assert "plain on the Q4_1 original" in window.statusBar().currentMessage()


def test_run_pressed_during_remeasure_skips_the_profile_and_keeps_the_run(window, qtbot, tmp_path, monkeypatch):
    """Defect 4 of issue 47: the stopped profile was reported as the run's failure and the window
    dropped the run it had just started (and a second Run click sent the message twice)."""
    from specdec_studio.app.worker.messages import JobEnded, ProfileProgress, RunRequest
    from specdec_studio.engine.events import RunFinished

    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))  # nothing cached: a real measurement
    emitted = _recording(window)
    submitted = []
    real_submit = window.worker._submit
    window.worker._submit = lambda job: submitted.append(job) or real_submit(job)
    window.input.chat_mode.setChecked(False)
    window.tuning.remeasure_profile()
    qtbot.waitUntil(lambda: any(isinstance(e, ProfileProgress) for e in emitted), timeout=TIMEOUT_MS)
    assert window.model.profiling and window.input.run.isEnabled()
    window.controls.set_values({"mode": "plain", "max_tokens": 12})
    window.input.set_text("Name a colour.")
    window.runs.start_run()
    window.runs.start_run()  # a second click while it runs: refused, not sent again
    assert window.model.running
    qtbot.waitUntil(lambda: not window.model.machine.busy, timeout=TIMEOUT_MS)
    window.drain_events()
    assert [type(job) for job in submitted].count(RunRequest) == 1
    assert window.error_label.text() == ""
    finished = [e for e in emitted if isinstance(e, RunFinished)]
    assert len(finished) == 1 and window.model.run.last_finished is finished[0]
    assert finished[0].finish_reason == "length"
    assert window.stream.generated_text() == finished[0].text  # the run is shown, not dropped
    ends = [e for e in emitted if isinstance(e, JobEnded)]
    assert [e.outcome for e in ends] == ["stopped", "done"]  # the profile, then the run
    assert window.statusBar().currentMessage().startswith("Finished: length")


def test_a_conversation_file_with_odd_pieces_costs_only_itself(open_window, qtbot, tmp_path):
    """Defect 8 of issue 47: a saved answer whose pieces were not [text, source, step, id,
    acceptance] raised on the GUI thread when shown, left the window "Running…" and broke its
    export. Now the file is named as damaged in one line and the window works on."""
    import json

    data = tmp_path / "data"
    folder = data / "conversations"
    folder.mkdir(parents=True)
    odd = {"id": "odd", "title": "Odd", "updated": 1.0,
           "messages": [{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "hello", "pieces": [["hel", "sampled", "x", 3], ["lo"]]}]}
    (folder / "odd.json").write_text(json.dumps(odd))
    (data / "state.json").write_text(json.dumps({"last": "odd"}))  # the app reopens it on start
    win = open_window()  # the start's listing named it (the load's line has replaced it since)
    assert not win.model.machine.busy and win.input.run.isEnabled()
    conversation = win.model.chat.conversation
    assert conversation is not None and not conversation.messages  # a fresh chat, not the damaged one
    win.chat.act("list")
    qtbot.waitUntil(lambda: "damaged" in win.statusBar().currentMessage(), timeout=TIMEOUT_MS)
    assert "odd.json" in win.statusBar().currentMessage() and "\n" not in win.statusBar().currentMessage()
    run(win, qtbot, "Name a colour.", mode="plain", max_tokens=8)  # the chat works on
    out = tmp_path / "chat.md"
    win.chat.write_export("markdown", str(out))
    assert "Name a colour." in out.read_text()
