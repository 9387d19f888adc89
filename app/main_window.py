"""The main window: model bar, run controls, the live token stream, the KV-cache map and figures.

The engine runs on :class:`app.engine_worker.EngineWorker`; this window only drains its events
from a QTimer (~30 Hz) and paints the newest state, so the engine's speed never depends on the
window. Settings (geometry, models, parameters, theme) persist with QSettings. The demo behaviour
(pause and steps, replays, exports, presentation mode) is in :mod:`app.window_demo`, the jobs
beside a run (race, batch, draft training) in :mod:`app.window_jobs`.
"""

from __future__ import annotations

import dataclasses
import time

from specdec_studio.app.model.activity import Activity, Facts, Trigger, allowed_controls, refusal
from specdec_studio.app.worker.engine_worker import EngineWorker
from specdec_studio.app.worker.messages import (
    BaselineDone,
    BatchKv,
    ConversationList,
    DistillDone,
    DownloadProgress,
    DraftLoaded,
    LOAD_REQUESTS,
    EngineQuiet,
    ExactnessReady,
    FormatsCompared,
    FormatSpeedsMeasured,
    FormatsProgress,
    JobEnded,
    JobTaken,
    LoadFailed,
    LoadStarted,
    ModelLoaded,
    Paused,
    ProfileProgress,
    ProfileReady,
    ProfileStarted,
    RaceProgress,
    RaceReady,
    RunRequested,
    SavedSweeps,
    TraceReady,
)
from specdec_studio.app.replay import TracePlayer
from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
from specdec_studio.app.transcript import Turn, figures_line, render_completion, render_conversation, render_run
from specdec_studio.app.window_chat import ChatMixin
from specdec_studio.app.window_demo import DemoMixin
from specdec_studio.app.window_layout import LayoutMixin
from specdec_studio.app.window_models import ModelsMixin
from specdec_studio.app.window_state import WindowState
from specdec_studio.app.window_tuning import TuningMixin
from specdec_studio.app.window_jobs import JobsMixin
from specdec_studio.engine.events import KvSnapshot, RejectedDraft, RunFinished, RunStarted, StepBatch, StepDone
from specdec_studio.engine.strategies.auto.report import source_counts, source_lines, step_limit_line
from specdec_studio.engine.strategies import registry

# On a 2-core machine every millisecond the GUI thread works is taken from llama.cpp's threads (and
# one of them preempted stalls the other at the next barrier): the window drains the engine's events
# at 20 Hz, text streams at that rate, and the plots and the KV map, far dearer to paint, at 4 Hz.
# (tests/bench/gui_overhead.py --chat -n 512: 0.92 of headless speed at 30 and 8 Hz, 0.98 at 20 and 4.)
PAINT_INTERVAL_MS = 50
FIGURES_INTERVAL_S = 0.25
RECORDED = (StepDone, StepBatch, KvSnapshot, RunStarted, RunFinished)  # what the step inspector's record keeps
# events that change nothing but the stream and the figures: no button changes state with them
STEP_EVENTS = (StepDone, StepBatch, KvSnapshot, RejectedDraft)


class MainWindow(
    WindowState, LayoutMixin, ModelsMixin, ChatMixin, TuningMixin, DemoMixin, JobsMixin, QtWidgets.QMainWindow
):
    _drawn = None  # what the stream shows of the conversation (transcript.Drawn), to redraw only changes

    def __init__(self, model: str | None = None, *, autoload: bool = True,
                 settings: QtCore.QSettings | None = None) -> None:
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.settings = settings or QtCore.QSettings()
        self.worker = EngineWorker(self)
        self.worker.start()
        self._init_state()
        self.player = TracePlayer(self)
        self.player.events.connect(lambda _lane, events: self._handle_events(events))
        self.player.finished.connect(self._replay_finished)
        self._build()
        self._restore_settings()
        self._paint_timer = QtCore.QTimer(self)
        self._paint_timer.setInterval(PAINT_INTERVAL_MS)
        self._paint_timer.timeout.connect(self.drain_events)
        self._paint_timer.start()
        self.worker.conversation("start")  # the last conversation reopens
        self.input.focus()  # typing at once goes into the message box
        if autoload:
            wanted = model or self.settings.value("last_model", "default")
            self.load_model(wanted)

    # ------------------------------------------------------------------ the activity
    def start_job(self, trigger: Trigger, submit, *, kind: str = "") -> bool:
        """Start a job if the activity table allows ``trigger`` now: ``submit`` queues it on the
        engine worker and returns its id (None for a replay, which needs no engine). A request the
        table refuses changes nothing and says why in one sentence."""
        machine = self.machine
        if not machine.allows(trigger, model_loaded=self.model_loaded):
            self.statusBar().showMessage(refusal(machine.activity, trigger, self.model_loaded))
            return False
        skipped_profile = machine.activity is Activity.PROFILING
        if skipped_profile:  # the user's request comes first: the profile is stopped, not waited for
            self.worker.stop()
        if machine.activity is Activity.REPLAYING and trigger is not Trigger.REPLAY:
            self.close_replay()
        machine.apply(trigger, job=submit(), kind=kind)
        if skipped_profile:
            self.statusBar().showMessage("The batch-cost profile was skipped for this "
                                         + ("run" if trigger is Trigger.RUN else "request")
                                         + " (Profile → Re-measure measures it)")
        self._update_buttons()
        return True

    def _engine_trigger(self, trigger: Trigger) -> None:
        """A step of the job in hand that the engine thread reports (downloaded, measuring, held):
        taken only if the reports come from the job the activity belongs to."""
        if self.machine.owns(self.stream_job):
            self.machine.apply(trigger)

    def _on_job_taken(self, event: JobTaken) -> None:
        self.stream_job = event.job

    def _on_engine_quiet(self, event: EngineQuiet) -> None:
        """A job on RPC servers has gone silent: say so, and what Stop will do, on the status bar."""
        if event.stopping:
            self.statusBar().showMessage(
                f"Stopping… no word from the RPC servers for {event.seconds} s: the engine process is ended "
                f"{event.grace_s:.0f} s after Stop if they stay silent (the chat is kept).")
        else:
            self.statusBar().showMessage(
                f"No word from the RPC servers for {event.seconds} s: they are still on this step, or one stopped "
                f"answering. Stop ends the engine process if they stay silent; the chat is kept.")

    def _on_job_ended(self, event: JobEnded) -> None:
        """The end of a job: the activity ends if it was the job it belongs to. A failure is said
        once: by the model bar for a load, else here; a stopped job that was already left behind
        (a profile skipped by Run) says nothing."""
        current = self.machine.owns(event.job)
        kind = self.machine.kind
        if current:
            self.machine.apply(Trigger.ENDED)
            if kind == "run" and self._chat_shown():
                self._render_all()  # the conversation as the engine kept it
        if event.outcome == "stopped" and not current:
            return
        if event.message and event.request not in LOAD_REQUESTS:
            if current:
                self._on_job_failed(kind, event.message)
            else:
                self.statusBar().showMessage(event.message[0].upper() + event.message[1:])

    def _on_job_failed(self, kind: str, message: str) -> None:
        if kind == "train":
            self.training_bar.hide()
        if kind == "sweep":
            self.tune.on_failed()
        self._on_failed(message)

    # ------------------------------------------------------------------ runs
    def run_key(self, text: str, config) -> tuple:
        return (self.model_path, text, bool(self.input.chat_mode.isChecked()), config.max_tokens,
                config.sampling.temperature, config.sampling.seed)

    def _valid_config(self, explain: bool = False):
        """The next run's config, or None (with the reason shown) if the controls are invalid.

        ``explain``: the run explains its tokens (the stream's tooltips, a saved trace's) unless
        View → Explain tokens is off. A run the window shows token by token does; a race or a
        batch, which are timed against plain decoding or show no tokens, does not pay the
        0.2-0.4 ms a token."""
        explain = explain and self.explain_action.isChecked()
        error = self.controls.error
        if error:
            self.error_label.setText(error)
            return None
        self.error_label.setText("")
        config = self.controls.config()
        return dataclasses.replace(config, explain=True) if explain else config

    def _launch(self, turn: Turn, config, text: str, *, regenerate: bool = False,
                edit_index: int | None = None) -> None:
        if not self.start_job(Trigger.RUN, lambda: self.worker.start_run(
                config, text, chat=turn.chat, regenerate=regenerate, edit_index=edit_index), kind="run"):
            return
        self.live = turn
        if not turn.chat:
            self.completion = turn
        self.last_run_key = self.run_key(turn.user, config)
        self.last_run_config = config
        self._begin_run()
        self._render_all()

    def start_run(self, reuse_last_prompt: bool = False) -> None:
        if not self._ready_for(Trigger.RUN):
            return
        text = self.input.text()
        if not text.strip() and reuse_last_prompt and self.live is not None:
            text = self.live.user  # presentation: space runs the last prompt again
        if not text.strip():
            self.error_label.setText("Type a message or a prompt first.")
            return
        config = self._valid_config(explain=True)
        if config is None:
            return
        chat = self._chat_shown()
        if chat:
            self.input.set_text("")
        edit_index, self.editing_index = (self.editing_index if chat else None), None
        self._launch(Turn(user=text, chat=chat, mode=config.mode), config, text, edit_index=edit_index)

    def _begin_run(self) -> None:
        self.controls.mark_applied()  # the config just built from these values is the run's
        self._pending_rejected.clear()
        self.stats.reset()
        self._generation_s = 0.0
        # a note about the chat as it stood (an answer kept after a lost engine, turns about to be
        # dropped) is news until the next run: that run's own notes, if any, come with its events
        self.conversation_note.setText("")
        if not self.statusBar().currentMessage().startswith("The batch-cost profile was skipped"):
            self.statusBar().showMessage("Running…")

    def stop_run(self) -> None:
        activity = self.activity
        if not self.machine.allows(Trigger.STOP) or self.machine.stopping:
            self.statusBar().showMessage("Nothing to stop." if not self.machine.stopping else "Stopping already…")
            return
        if activity is Activity.REPLAYING:
            self.player.stop()
            self.machine.apply(Trigger.STOP)
            self.statusBar().showMessage("Replay stopped: Restart plays it again")
            self._update_buttons()
            return
        self.worker.stop()  # wakes a run held at the step gate too (the demo's hold stays for the next run)
        self.machine.apply(Trigger.STOP)
        if activity is Activity.DOWNLOADING:  # ends within a second, keeping nothing
            self.statusBar().showMessage(f"Stopping the download of {self.download_key}…")
        elif activity is Activity.LOADING:  # llama.cpp's load cannot be interrupted: what follows it is skipped
            self.statusBar().showMessage("Stopping: the model finishes loading, its profile is skipped…")
        else:
            self.statusBar().showMessage("Stopping…")
        self._update_buttons()

    # ------------------------------------------------------------------ tuning

    # ------------------------------------------------------------------ rendering
    def _toggle_tokens(self, on: bool) -> None:
        self.stream.show_tokens = on
        self._render_all()

    def _toggle_rejected(self, on: bool) -> None:
        self.stream.show_rejected = on
        self._render_all()

    def _toggle_steps(self, on: bool) -> None:
        self.stream.mark_steps = on
        self._render_all()

    def _render_all(self) -> None:
        """Show the conversation (or the completion) as the engine keeps it. A conversation drawn
        before is drawn again only from its first changed message (transcript.Drawn)."""
        if not hasattr(self, "stream"):
            return
        self.conversation_note.setVisible(self._chat_shown())  # a note about the chat, not a completion
        drawn, self._drawn = self._drawn, None
        if self._chat_shown() and self.conversation is not None:
            live = self.live if self.running and self.live is not None and self.live.finish is None else None
            self._drawn = render_conversation(self.stream, self.conversation, live, drawn)
        else:
            self.stream.clear_stream()
            if not self._chat_shown() and self.completion is not None:
                render_completion(self.stream, self.completion)
        self.stream.scroll_to_end()

    # ------------------------------------------------------------------ events
    def drain_events(self) -> None:
        events = self.worker.drain()
        if events:
            self._handle_events(events)

    def _event_handlers(self) -> dict[type, object]:
        """Which method draws which event, for every event the engine thread or a replay sends."""
        from specdec_studio.engine import parallel
        from specdec_studio.engine.chat.turns import ConversationChanged
        from specdec_studio.engine.drafts.distill import DistillProgress
        from specdec_studio.engine.events import RejectedDraft, RunFailed, RunWarning
        from specdec_studio.engine.tuning import sweep

        handlers = {
            StepDone: self._on_step, StepBatch: lambda _event: None, RejectedDraft: self._on_rejected,
            KvSnapshot: self._on_snapshot, RunStarted: self._on_started, RunRequested: self._on_requested,
            TraceReady: self._on_trace, Paused: self._on_paused, RaceProgress: self._on_race_progress,
            RaceReady: self._on_race_ready, RunFinished: self._on_finished, RunWarning: self._on_warning,
            ConversationChanged: self._on_conversation, ConversationList: self._on_conversation_list,
            RunFailed: self._on_run_failed, BaselineDone: self._on_baseline,
            JobTaken: self._on_job_taken, JobEnded: self._on_job_ended, EngineQuiet: self._on_engine_quiet,
        }
        handlers.update(dict.fromkeys((ProfileStarted, ProfileProgress, ProfileReady, SavedSweeps, ExactnessReady,
                                       FormatsProgress, FormatsCompared, FormatSpeedsMeasured,
                                       sweep.SweepStarted, sweep.SweepProgress, sweep.SweepCell, sweep.SweepFinished),
                                      self._on_tuning_event))
        handlers.update(dict.fromkeys((LoadStarted, DownloadProgress, ModelLoaded, DraftLoaded, LoadFailed),
                                      self._on_model_event))
        handlers.update(dict.fromkeys((parallel.BatchStarted, parallel.JobStarted, parallel.JobStep,
                                       parallel.JobFinished, BatchKv, parallel.BatchFinished), self._on_batch_event))
        handlers.update(dict.fromkeys((DistillProgress, DistillDone), self._on_distill_event))
        return handlers

    def _handle_events(self, events: list) -> None:
        """Events from the engine thread, or from a replayed trace: drawn the same way."""
        if self._handlers is None:
            self._handlers = self._event_handlers()
        only_steps = True
        try:
            for event in events:
                steps = isinstance(event, STEP_EVENTS)
                only_steps = only_steps and steps
                # a run of step events appends to the stream in one edit (laid out once, not per
                # token); any other event may redraw the stream, so the edit closes before it is handled
                if steps:
                    self.stream.begin_appending()
                else:
                    self.stream.end_appending()
                if isinstance(event, RECORDED):
                    self.record.add(event)
                handler = self._handlers.get(type(event))
                if handler is not None:
                    handler(event)
        finally:
            self.stream.end_appending()
        now = time.perf_counter()
        if not self.running or now - self._figures_painted_at >= FIGURES_INTERVAL_S:
            self._figures_painted_at = now
            if self._latest_snapshot is not None:  # only the newest picture is painted
                self.kv_map.set_snapshot(self._latest_snapshot)
                self._latest_snapshot = None
            self.stats.refresh()
            self.tune.speedup_plot.set_point(self.stats.speedup_plot.run_point)  # a no-op when unchanged
            self.decisions.update()
            if self.right_tabs.currentWidget() is self.inspector_page:  # its pictures cost GUI time the engine needs
                self.inspector.refresh()
        self.stream.scroll_to_end()
        if not only_steps:
            self._update_buttons()

    # ------------------------------------------------------------------ one handler per event
    def _on_rejected(self, event) -> None:
        self._pending_rejected[event.step] = event.texts

    def _on_snapshot(self, event) -> None:
        self._latest_snapshot = event  # painted at the figures' rate
        if event.states:  # a rollback between two paints is still told (the latest, per sequence)
            self.kv_map.state_slots.note_rollbacks(event.states, event.step)

    def _on_requested(self, event: RunRequested) -> None:
        self.last_run_mode = event.config.mode

    def _on_trace(self, event: TraceReady) -> None:
        self.last_trace = event.trace

    def _on_paused(self, event: Paused) -> None:
        self._engine_trigger(Trigger.HELD)
        self.inspector.paused_run = True
        self.inspector.refresh()
        self.statusBar().showMessage(f"Paused after step {event.step}: Step decodes one more, Resume runs on")

    def _on_race_progress(self, event: RaceProgress) -> None:
        self.race.on_progress(event.which, event.n_tokens)

    def _on_race_ready(self, event: RaceReady) -> None:
        self.race.start(event.plain, event.strategy)
        self.statusBar().showMessage("Race measured: replaying both runs on a common clock")

    def _on_warning(self, event) -> None:
        self.kv_map.figures.setText("KV map stopped for this run: " + event.message)
        self.statusBar().showMessage("Warning: " + event.message)

    def _on_conversation_list(self, event: ConversationList) -> None:
        self.sidebar.set_items(event.items, event.current)
        if event.damaged:
            self.statusBar().showMessage(
                f"Skipped {len(event.damaged)} damaged conversation file{'s' if len(event.damaged) > 1 else ''}"
                f" in the data folder: {', '.join(event.damaged[:3])}" + ("…" if len(event.damaged) > 3 else ""))

    def _on_run_failed(self, event) -> None:
        """A run that ended in failure inside a race or a replayed trace (a job's own failure
        comes with its JobEnded)."""
        self._on_failed(event.message)

    def _on_baseline(self, event: BaselineDone) -> None:
        self.baselines[event.key] = event.tokens_per_second
        if self.last_finished is not None and event.key == self.last_run_key:
            self.stats.set_speedup(self.last_finished.stats["tokens_per_second"], event.tokens_per_second)
            self.tune.speedup_plot.set_point(self.stats.speedup_plot.run_point)
        self.statusBar().showMessage(f"Plain baseline: {event.tokens_per_second:.1f} tok/s")

    def _on_started(self, event) -> None:
        """A run (live or replayed) starts: the views learn its shape."""
        config = event.config
        self.last_run_mode = config.get("mode", "plain")
        mode = registry.mode(self.last_run_mode)
        window = int(config.get("W", 0)) if mode.settings == "lookahead" else 0
        self.kv_map.begin_run(window, event.n_prompt)
        # a replayed trace's model may not be the one loaded: its own memory decides the map's look
        self.kv_map.set_memory_kind(str(event.model.get("memory_kind", "attention")))
        self.decisions.clear()
        self.auto_sources.clear()
        self.auto_sources.setToolTip("")
        self.decisions_box.setVisible(mode.plans)
        self.inspector.paused_run = False
        self.inspector.set_record(self.record)

    def _on_step(self, event) -> None:
        turn = self.live
        if turn is None:
            return
        acceptance = event.n_accepted / event.n_drafted if event.n_drafted else 0.0
        rejected = self._pending_rejected.pop(event.step, ())
        auto = event.auto
        proposers = auto.proposers if auto else ("",) * len(event.tokens)
        runs = [(t.text, t.source, event.step, t.id, acceptance, p if p != "target" else "", t.why)
                for t, p in zip(event.tokens, proposers)]
        if auto:
            self.decisions.add(event.step, auto, len(event.tokens))
        self.kv_map.add_tokens(t.source for t in event.tokens)
        if rejected:  # the drafts were tried where the target's own token now stands, which explains them
            replaced_by = event.tokens[-1].why
            ghosts = [(text, "rejected", event.step, -1, acceptance, "", replaced_by) for text in rejected]
            runs = runs[:-1] + ghosts + runs[-1:]
        for run in runs:
            turn.runs.append(run)
            render_run(self.stream, *run)
        # a live run's time is the engine's own step times: a demo's pause is not in them
        self._generation_s += event.t_step_s
        self.stats.add_step(event, self.player.clock if self.replaying else self._generation_s)

    def _on_finished(self, event) -> None:
        self.inspector.paused_run = False
        self.last_finished = event
        turn = self.live
        if turn is not None:
            turn.stats, turn.finish, turn.text = event.stats, event.finish_reason, event.text
            if turn.chat:
                self._render_all()  # the engine's record of the turn (sent just before) replaces the live one
            else:
                self.stream.append_text("\n" + figures_line(turn.mode, event.stats, event.finish_reason), "meta", 0)
        if "auto" in event.stats:  # a line of counts; hover for each source's whole account
            auto = event.stats["auto"]
            self.auto_sources.setText("Sources, accepted/sent: " + source_counts(auto) + " — hover for why")
            self.auto_sources.setToolTip(
                "\n".join(line for line in [*source_lines(auto), step_limit_line(auto)] if line)
            )
        self.stats.refresh()
        self.stats.finish(event.stats, self.baselines.get(self.last_run_key),
                          self.predicted_speedup(event.stats, self.last_run_mode))
        self.tune.speedup_plot.set_point(self.stats.speedup_plot.run_point)
        config = self.last_run_config if not self.replaying else None
        self.stats.set_break_even(self.break_even_words(config) if config is not None else None)
        s = event.stats
        reuse = f" · prompt {s['n_prompt']} tokens, {s['n_prompt_reused']} reused" if s.get("n_prompt_reused") else ""
        self.statusBar().showMessage(
            f"Finished: {event.finish_reason} · {s['n_predict']} tokens at {s['tokens_per_second']:.1f} tok/s{reuse}")
        if not self.replaying:
            self.input.focus()  # the next message is typed straight away

    def _on_failed(self, message: str) -> None:
        self.error_label.setText(message)
        self.statusBar().showMessage("Run failed — " + message)
        turn = self.live
        if turn is not None and not turn.runs and turn.finish is None:
            if turn.user and not self.input.text().strip():
                self.input.set_text(turn.user)  # nothing was generated: give the text back to edit
            self.live = None
            if not turn.chat:
                self.completion = None
        self._render_all()

    def _facts(self) -> Facts:
        return Facts(model_loaded=self.model_loaded, controls_valid=self.controls.error is None,
                     chat_has_message=self._last_user_index() is not None and self._chat_shown(),
                     conversation_has_messages=self.conversation is not None and bool(self.conversation.messages),
                     has_finished_run=self.last_finished is not None, has_copies=self.copy_choice.count() > 0,
                     has_chat_template=self.has_chat_template, presenting=self.presenting)

    def _update_buttons(self) -> None:
        """Every control's enabled state, from the activity table (app/model/activity.py) alone."""
        allowed = allowed_controls(self.activity, self._facts(), stopping=self.machine.stopping)
        for widget in (self.input.run, self.run_action):
            widget.setEnabled(allowed["run"])
        for widget in (self.input.stop, self.stop_action):
            widget.setEnabled(allowed["stop"])
        self.input.regenerate.setEnabled(allowed["regenerate"])
        self.input.edit_last.setEnabled(allowed["edit_last"])
        self.input.clear.setEnabled(allowed["clear"])
        self.input.chat_mode.setEnabled(allowed["chat_mode"])
        self.sidebar.set_busy(not allowed["conversations"])
        self.stats.baseline_button.setEnabled(allowed["baseline"])
        self.model_bar.setEnabled(allowed["model_bar"])
        self.controls.setEnabled(allowed["sliders"])
        self.tune.set_allowed(run=allowed["tune_run"], stop=allowed["tune_stop"], mode=allowed["tune_mode"])
        self.remeasure_button.setEnabled(allowed["remeasure"])
        self.exactness_button.setEnabled(allowed["exactness"])
        self.formats_button.setEnabled(allowed["formats"])
        self.format_speed_button.setEnabled(allowed["format_speeds"])
        self.load_copy_button.setEnabled(allowed["load_copy"])
        self.race.start_button.setEnabled(allowed["race"])
        self.batch_view.run_button.setEnabled(allowed["batch"])
        self.demo_menu.setEnabled(allowed["replay"] and bool(self.demo_menu.actions()))
        self.open_trace_action.setEnabled(allowed["replay"])
        for action in self.mode_actions:
            action.setEnabled(allowed["mode_keys"])

    # ------------------------------------------------------------------ clipboard
    def copy_text(self) -> None:
        QtWidgets.QApplication.clipboard().setText(self.stream.toPlainText())

    def copy_html(self) -> None:
        mime = QtCore.QMimeData()
        mime.setHtml(self.stream.toHtml())
        mime.setText(self.stream.toPlainText())
        QtWidgets.QApplication.clipboard().setMimeData(mime)

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.save_settings()
        self._paint_timer.stop()
        self.worker.shutdown()
        super().closeEvent(event)
