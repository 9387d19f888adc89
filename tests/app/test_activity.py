"""The window's activity table (app/model/activity.py): every transition in it, every request it refuses,
and, in the real window offscreen, every pair "job A holds the window, the user asks for B": the
controls are the table's, an allowed request reaches the engine once, a refused one never and says
why in one sentence.

The window's engine worker is replaced by a recorder: these checks are about which requests the
window sends and what it shows, and the reports of each job (JobTaken, JobEnded, Paused) are fed
to the window as the engine thread would send them. The real worker's reports are checked on the
real model in test_main_window.py and test_downloads.py."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from specdec_studio.app.model.activity import (BUSY, STARTS, TRANSITIONS, Activity, ActivityMachine, Facts, Trigger,
                                         allowed_controls, refusal)

A, T = Activity, Trigger
USER_STARTS = list(STARTS)


# ---------------------------------------------------------------------------- the table alone
@pytest.mark.parametrize(("source", "trigger"), sorted(TRANSITIONS, key=lambda k: (k[0].value, k[1].value)),
                         ids=lambda v: v.value)
def test_every_transition_in_the_table_is_taken(source, trigger):
    machine = ActivityMachine()
    machine.activity, machine.job = source, 7
    assert machine.apply(trigger, job=8)
    assert machine.activity is TRANSITIONS[source, trigger]
    if trigger in STARTS:
        assert machine.job == 8 and not machine.stopping
    elif machine.activity is A.IDLE:
        assert machine.job is None
    else:
        assert machine.job == 7  # a step of the job in hand keeps its id
    assert machine.stopping == (trigger is T.STOP and machine.activity is not A.IDLE)


@pytest.mark.parametrize(("source", "trigger"), [pair for pair in itertools.product(Activity, Trigger)
                                                 if pair not in TRANSITIONS], ids=lambda v: v.value)
def test_a_transition_not_in_the_table_changes_nothing(source, trigger):
    machine = ActivityMachine()
    machine.activity, machine.job = source, 3
    assert not machine.apply(trigger, job=4)
    assert (machine.activity, machine.job, machine.history) == (source, 3, [])
    sentence = refusal(source, trigger, model_loaded=True)
    assert sentence.startswith(("Cannot", "Nothing")) and sentence.endswith(".") and sentence.count(". ") == 0


def test_every_activity_is_reached_and_left():
    reached = {target for target in TRANSITIONS.values()}
    assert reached == set(Activity)
    for activity in BUSY:
        assert TRANSITIONS[activity, T.ENDED] is A.IDLE and (activity, T.STOP) in TRANSITIONS


def test_a_report_of_an_older_job_is_not_the_activitys():
    machine = ActivityMachine()
    machine.apply(T.REMEASURE, job=1)
    machine.apply(T.RUN, job=2)  # Run skips the profile
    assert not machine.owns(1) and machine.owns(2)


def test_without_a_model_only_loads_downloads_and_replays_start():
    machine = ActivityMachine()
    assert [t for t in USER_STARTS if machine.allows(t, model_loaded=False)] == [T.LOAD, T.DOWNLOAD, T.REPLAY]
    assert "no model is loaded" in refusal(A.IDLE, T.RUN, model_loaded=False)


def test_a_stopping_job_cannot_be_stopped_twice():
    for activity in BUSY:
        assert allowed_controls(activity, Facts(model_loaded=True))["stop"]
        assert not allowed_controls(activity, Facts(model_loaded=True), stopping=True)["stop"]


# ---------------------------------------------------------------------------- the real window
class RecordingWorker:
    """Stands in for app.engine_worker.EngineWorker: records every request and Stop, gives ids."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []
        self.arguments: list[tuple[tuple, dict]] = []  # each request's, as the window passed them
        self.stops = 0
        self._next = 100

    def _submit(self, name: str, *args, **kwargs) -> int:
        self._next += 1
        self.sent.append((name, self._next))
        self.arguments.append((args, kwargs))
        return self._next

    def __getattr__(self, name: str):
        if name in ("load_model", "measure_profile", "start_sweep", "probe_exactness", "compare_formats",
                    "measure_format_speeds", "load_draft", "fetch_and_load", "start_run", "run_baseline",
                    "conversation", "run_batch", "train_draft", "race"):
            return lambda *args, **kwargs: self._submit(name, *args, **kwargs)
        if name in ("pause", "resume", "step_once"):
            return lambda: None
        raise AttributeError(name)

    def stop(self) -> None:
        self.stops += 1

    def drain(self) -> list:
        return []

    def shutdown(self, timeout_s: float = 0) -> bool:
        return True


# the request each user start sends (a replay sends none: it needs no engine)
REQUEST_OF = {T.LOAD: "load_model", T.DOWNLOAD: "fetch_and_load", T.RUN: "start_run", T.REMEASURE: "measure_profile",
              T.SWEEP: "start_sweep", T.COMPARE: "compare_formats", T.PROBE: "probe_exactness", T.TRAIN: "train_draft",
              T.REPLAY: None}


def _ask(win, trigger: Trigger, trace) -> None:
    """What the user does in the window to ask for ``trigger``."""
    if trigger is T.LOAD:
        win.models.load_model(win.model.models.path)
    elif trigger is T.DOWNLOAD:
        win.models.download_model("default")
    elif trigger is T.RUN:
        win.input.set_text("Hello")
        win.runs.start_run()
    elif trigger is T.REMEASURE:
        win.tuning.remeasure_profile()
    elif trigger is T.SWEEP:
        win.tuning.start_sweep(SimpleNamespace(mode="lookup"))
    elif trigger is T.COMPARE:
        win.tuning.compare_formats()
    elif trigger is T.PROBE:
        win.tuning.check_exactness()
    elif trigger is T.TRAIN:
        win.jobs.start_training({"steps": 4})
    elif trigger is T.REPLAY:
        win.demo.play_trace(trace)


def _controls_match_the_table(win) -> None:
    allowed = allowed_controls(win.model.activity, win.controls_state.facts(), stopping=win.model.machine.stopping)
    widgets = {"run": win.input.run, "stop": win.input.stop, "regenerate": win.input.regenerate,
               "edit_last": win.input.edit_last, "clear": win.input.clear, "baseline": win.stats.baseline_button,
               "model_bar": win.model_bar, "remeasure": win.remeasure_button, "exactness": win.exactness_button,
               "formats": win.formats_button, "format_speeds": win.format_speed_button,
               "load_copy": win.load_copy_button, "race": win.race.start_button, "batch": win.batch_view.run_button,
               "tune_run": win.tune.run_button, "tune_stop": win.tune.stop_button, "tune_mode": win.tune.mode,
               "replay": win.open_trace_action, "sliders": win.controls}
    shown = {name: widget.isEnabled() for name, widget in widgets.items()}
    assert shown == {name: allowed[name] for name in widgets}, win.model.activity
    assert win.run_action.isEnabled() == allowed["run"] and win.stop_action.isEnabled() == allowed["stop"]


def _end(win, job: int | None) -> None:
    from specdec_studio.app.worker.messages import JobEnded

    if win.model.activity is A.REPLAYING:
        win.demo.close_replay()
    else:
        win.handle_events([JobEnded(job, "Request", "done")])
    assert win.model.activity is A.IDLE
    if not win.model.models.loaded:  # a load asked for in the walk: the model loads again, as the engine says
        win.handle_events(win.loaded_reports)
        assert win.model.models.loaded and win.model.activity is A.IDLE


@pytest.fixture
def recorded_window(qtbot, tmp_path, monkeypatch, smollm_path):
    """The window with a loaded model as the engine reports one, on a recording worker."""
    from specdec_studio.app.window.main_window import MainWindow
    from specdec_studio.app.qt import QtCore
    from specdec_studio.app.worker.messages import JobEnded, JobTaken, LoadStarted, ModelLoaded
    from specdec_studio.engine.records import demo_traces
    from specdec_studio.engine.records.trace import load

    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path / "data"))
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.IniFormat)
    win = MainWindow(autoload=False, settings=settings)
    qtbot.addWidget(win)
    win._paint_timer.stop()
    win.worker.shutdown()
    win.worker = RecordingWorker()
    info = {"arch": "llama", "n_params": 135e6, "quant": "Q4_1", "n_vocab": 49152}
    win.loaded_reports = [JobTaken(1, "LoadRequest"), LoadStarted(str(smollm_path)),
                          ModelLoaded(str(smollm_path), info, True, 2048, 2, False), JobEnded(1, "LoadRequest", "done")]
    win.handle_events(win.loaded_reports)
    assert win.model.models.loaded and win.model.activity is A.IDLE
    trace = load(demo_traces.shipped()[0])
    yield win, trace
    win.demo.player.stop()
    win.close()


def _enter(win, activity: Activity, trace) -> int | None:
    """Put the window in ``activity`` the way a user and the engine would; the job's id."""
    from specdec_studio.app.worker.messages import JobTaken, Paused

    starter = next(t for t, a in STARTS.items() if a is activity) if activity is not A.PAUSED else T.RUN
    _ask(win, starter, trace)
    job = win.model.machine.job
    if activity is A.PAUSED:
        win.demo.set_paused(True)
        win.handle_events([JobTaken(job, "RunRequest"), Paused(1, True)])
    assert win.model.activity is activity
    return job


@pytest.mark.parametrize("activity", [a for a in Activity if a is not A.IDLE], ids=lambda a: a.value)
def test_each_activity_against_every_request(recorded_window, activity):
    win, trace = recorded_window
    worker = win.worker
    for trigger in USER_STARTS:
        job = _enter(win, activity, trace)
        _controls_match_the_table(win)
        sent, stops = list(worker.sent), worker.stops
        allowed = win.model.machine.allows(trigger, model_loaded=True)
        win.statusBar().clearMessage()
        _ask(win, trigger, trace)
        new = worker.sent[len(sent):]
        wanted = REQUEST_OF[trigger]
        if allowed:
            assert [name for name, _ in new] == ([wanted] if wanted else []), (activity, trigger)
            assert win.model.activity is TRANSITIONS[activity, trigger]
            # a profile the request skips is stopped once; nothing else is
            assert worker.stops - stops == (1 if activity is A.PROFILING else 0)
            if new:
                assert win.model.machine.owns(new[0][1])
            job = win.model.machine.job
        else:
            assert new == [] and worker.stops == stops, (activity, trigger)
            assert win.model.activity is activity
            assert win.statusBar().currentMessage() == refusal(activity, trigger, True)
        _controls_match_the_table(win)
        _end(win, job)
        _controls_match_the_table(win)


@pytest.mark.parametrize("activity", sorted(BUSY, key=lambda a: a.value), ids=lambda a: a.value)
def test_stop_in_each_activity_is_sent_once_and_the_end_is_the_jobs(recorded_window, activity):
    from specdec_studio.app.worker.messages import JobEnded

    win, trace = recorded_window
    job = _enter(win, activity, trace)
    win.gate.stop()
    assert win.worker.stops == 1 and win.model.machine.stopping and not win.input.stop.isEnabled()
    win.gate.stop()  # a second press sends nothing more
    assert win.worker.stops == 1
    _controls_match_the_table(win)
    win.handle_events([JobEnded(job - 1, "Request", "stopped")])  # an older job's end changes nothing
    assert win.model.activity is activity
    win.handle_events([JobEnded(job, "Request", "stopped")])
    assert win.model.activity is A.IDLE and not win.model.machine.stopping
    _controls_match_the_table(win)


def test_the_run_that_skipped_a_profile_keeps_its_failure_and_its_text(recorded_window):
    """Run pressed during Re-measure: the profile's stopped end is not the run's failure; the run's
    own failure is said once and its text comes back to edit."""
    from specdec_studio.app.worker.messages import JobEnded

    win, trace = recorded_window
    win.input.chat_mode.setChecked(False)
    profile = _enter(win, A.PROFILING, trace)
    win.input.set_text("Hello there")
    win.runs.start_run()
    run = win.model.machine.job
    assert win.model.activity is A.RUNNING and run != profile
    win.handle_events([JobEnded(profile, "ProfileRequest", "stopped",
                                 "the batch-cost profile was stopped before it finished")])
    assert win.model.activity is A.RUNNING and win.error_label.text() == "" and win.model.run.live is not None
    win.handle_events([JobEnded(run, "RunRequest", "failed", "the context is full")])
    assert win.model.activity is A.IDLE and win.error_label.text() == "the context is full"
    assert win.input.text() == "Hello there"


def test_the_documented_table_is_the_table():
    from pathlib import Path

    from specdec_studio.app.model.activity import markdown_page

    page = Path(__file__).resolve().parents[2] / "docs" / "window_states.md"
    command = "python -m specdec_studio.app.model.activity > docs/window_states.md"
    assert page.read_text() == markdown_page(), f"run: {command}"


def test_the_replay_banner_shows_the_trace_s_words_as_text(recorded_window):
    """Defect 9 of issue 47: the trace's model name reached the banner as rich text."""
    import dataclasses

    win, trace = recorded_window
    crafted = dataclasses.replace(trace, header={**trace.header, "model": {"name": "<b>bold</b> & <i>x</i>"}})
    win.demo.play_trace(crafted)
    label = win.replay_label.text()
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;i&gt;x&lt;/i&gt;" in label and "<i>" not in label


def test_the_draft_has_its_own_gpu_layers_and_the_window_keeps_both(recorded_window, tmp_path, smollm_path):
    """Defect 6 of issue 47: drafts always loaded on the CPU. The model bar has the draft's own
    GPU layers beside the target's (on a build with a GPU backend); every load of a draft (chosen,
    downloaded, trained) takes them, every load of a target its own, and both are kept."""
    from specdec_studio.app.window.main_window import MainWindow
    from specdec_studio.app.qt import QtCore

    win, _ = recorded_window
    bar, worker = win.model_bar, win.worker
    bar.set_gpu_available(True)
    assert bar.draft_gpu_layers.isVisibleTo(win) and bar.gpu_layers.isVisibleTo(win)
    bar.gpu_layers.setValue(12)
    bar.draft_gpu_layers.setValue(99)

    def last(name: str):
        assert worker.sent[-1][0] == name
        args, kwargs = worker.arguments[-1]
        _end(win, worker.sent[-1][1])
        return args, kwargs

    win.models.choose_draft(str(smollm_path))
    assert last("load_draft")[0] == (str(smollm_path), 99)
    win.models.download_model("default", as_draft=True)
    assert last("fetch_and_load")[1]["n_gpu_layers"] == 99
    win.models.download_model("default")
    assert last("fetch_and_load")[1]["n_gpu_layers"] == 12
    win.models.load_model(str(smollm_path))
    assert last("load_model")[1]["n_gpu_layers"] == 12
    win.jobs.start_training({"steps": 4})
    assert last("train_draft")[0][0]["draft_gpu_layers"] == 99
    win.preferences.save()
    again = MainWindow(
        autoload=False, settings=QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.IniFormat)
    )
    try:
        assert (again.model_bar.gpu_layers.value(), again.model_bar.draft_gpu_layers.value()) == (12, 99)
    finally:
        again.worker.shutdown()
        again.close()


def test_a_mode_the_loaded_model_cannot_run_is_disabled_with_its_reason(recorded_window, smollm_path):
    """A hybrid model (its memory kind as the engine reports it) cannot run lookahead: the mode
    menu disables it with the engine's sentence as its tooltip, and a restored lookahead setting
    says so instead of running; a plain transformer loaded next has every mode again."""
    from specdec_studio.app.qt import QtCore
    from specdec_studio.app.worker.messages import JobEnded, JobTaken, ModelLoaded
    from specdec_studio.engine.models.loading import mode_refusal

    win, _ = recorded_window
    mode = win.controls.mode
    hybrid = {"arch": "lfm2", "n_params": 6e6, "quant": "F32", "n_vocab": 32000, "memory_kind": "hybrid"}
    win.handle_events([JobTaken(7, "LoadRequest"), ModelLoaded(str(smollm_path), hybrid, True, 2048, 2, False),
                        JobEnded(7, "LoadRequest", "done")])
    index = mode.findData("lookahead")
    why = mode_refusal("lookahead", "lfm2", "hybrid")
    assert why and "lfm2 is a hybrid model" in why
    assert not mode.model().item(index).isEnabled()
    assert mode.itemData(index, QtCore.Qt.ToolTipRole) == why[0].upper() + why[1:] + "."
    mtp = mode.findData("mtp")  # the file has no MTP layers either: that mode says so too
    assert not mode.model().item(mtp).isEnabled()
    assert mode.itemData(mtp, QtCore.Qt.ToolTipRole).startswith("MTP drafting needs a model whose file has MTP layers")
    assert all(mode.model().item(i).isEnabled() for i in range(mode.count()) if i not in (index, mtp))
    win.controls.set_values({"mode": "lookahead"})  # a setting restored from an earlier model
    assert win.controls.error.startswith("Lookahead needs KV cells") and not win.input.run.isEnabled()
    win.handle_events(win.loaded_reports)  # a plain transformer again
    assert mode.model().item(index).isEnabled() and win.controls.error is None
