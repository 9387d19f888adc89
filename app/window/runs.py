"""Runs from the window: the next run's config, Run, what the stream shows, and the run's events
(started, each step, rejected drafts, KV pictures, finished, failed). Writes the run slice."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from types import MappingProxyType

from specdec_studio.app.model.activity import Trigger
from specdec_studio.app.model.run_record import RunRecord
from specdec_studio.app.model.turn import Turn, figures_line
from specdec_studio.app.widgets.transcript import Drawn, render_completion, render_conversation, render_run
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import BaselineDone, RunRequested, TraceReady
from specdec_studio.engine.events import (KvSnapshot, RejectedDraft, RunFailed, RunFinished, RunStarted, RunWarning,
                                          StepBatch, StepDone)
from specdec_studio.engine.strategies import registry
from specdec_studio.engine.strategies.auto.report import source_counts, source_lines, step_limit_line

# The plots and the KV map, far dearer to paint than text, are painted at 4 Hz while a job runs
# (tests/bench/gui_overhead.py: the window's drain rate is in main_window.py).
FIGURES_INTERVAL_S = 0.25


class RunsController(Controller):
    def __init__(self, window) -> None:
        super().__init__(window)
        self.record = RunRecord()  # the shown run's steps, for the step inspector and the exports
        self._pending_rejected: dict[int, tuple] = {}  # step -> the texts of its rejected drafts
        self._latest_snapshot: KvSnapshot | None = None  # painted at the figures' rate
        self._figures_painted_at = 0.0
        self._generation_s = 0.0  # the live run's step times so far (its clock for the figures)
        self._drawn: Drawn | None = None  # what the stream shows of the conversation, to redraw only changes

    def handlers(self) -> dict[type, Callable]:
        return {
            StepDone: self._on_step, StepBatch: lambda _event: None, RejectedDraft: self._on_rejected,
            KvSnapshot: self._on_snapshot, RunStarted: self._on_started, RunRequested: self._on_requested,
            TraceReady: self._on_trace, RunFinished: self._on_finished, RunWarning: self._on_warning,
            RunFailed: self._on_run_failed, BaselineDone: self._on_baseline,
        }

    # ------------------------------------------------------------------ the next run
    def run_key(self, text: str, config) -> tuple:
        return (self.model.models.path, text, bool(self.window.input.chat_mode.isChecked()), config.max_tokens,
                config.sampling.temperature, config.sampling.seed)

    def valid_config(self, explain: bool = False):
        """The next run's config, or None (with the reason shown) if the controls are invalid.

        ``explain``: the run explains its tokens (the stream's tooltips, a saved trace's) unless
        View → Explain tokens is off. A run the window shows token by token does; a race or a
        batch, which are timed against plain decoding or show no tokens, does not pay the
        0.2-0.4 ms a token."""
        window = self.window
        explain = explain and window.explain_action.isChecked()
        error = window.controls.error
        if error:
            window.error_label.setText(error)
            return None
        window.error_label.setText("")
        config = window.controls.config()
        return dataclasses.replace(config, explain=True) if explain else config

    def start_run(self, reuse_last_prompt: bool = False) -> None:
        window = self.window
        if not window.gate.ready_for(Trigger.RUN):
            return
        text = window.input.text()
        live = self.model.run.live
        if not text.strip() and reuse_last_prompt and live is not None:
            text = live.user  # presentation: space runs the last prompt again
        if not text.strip():
            window.error_label.setText("Type a message or a prompt first.")
            return
        config = self.valid_config(explain=True)
        if config is None:
            return
        chat = window.chat.shown()
        if chat:
            window.input.set_text("")
        edit_index = window.chat.take_editing_index() if chat else None
        self.launch(Turn(user=text, chat=chat, mode=config.mode), config, text, edit_index=edit_index)

    def launch(self, turn: Turn, config, text: str, *, regenerate: bool = False,
               edit_index: int | None = None) -> None:
        """Start ``turn`` as a run of ``config`` (a new message, a regenerated or an edited one)."""
        window = self.window
        if not window.gate.start_job(Trigger.RUN, lambda: window.worker.start_run(
                config, text, chat=turn.chat, regenerate=regenerate, edit_index=edit_index), kind="run"):
            return
        self.model.run.update(live=turn, completion=self.model.run.completion if turn.chat else turn,
                              last_run_key=self.run_key(turn.user, config), last_run_config=config)
        window.controls.mark_applied()  # the config just built from these values is the run's
        self._begin_showing()
        # a note about the chat as it stood (an answer kept after a lost engine, turns about to be
        # dropped) is news until the next run: that run's own notes, if any, come with its events
        window.conversation_note.setText("")
        if not window.statusBar().currentMessage().startswith("The batch-cost profile was skipped"):
            self.say("Running…")
        self.render()

    def _begin_showing(self) -> None:
        self._pending_rejected.clear()
        self.window.stats.reset()
        self._generation_s = 0.0

    def show_replay(self, trace, turn: Turn) -> None:
        """A recorded trace takes the stream (the demo plays it)."""
        self.model.run.update(live=turn, completion=turn, last_trace=trace)
        self._begin_showing()
        self.render()

    def clear_shown(self) -> None:
        """Reset: nothing on show, no steps to inspect."""
        self.model.run.update(live=None, completion=None)
        self.record.clear()
        self.window.inspector.set_record(self.record)
        self.window.stats.reset()
        self.window.decisions.clear()

    # ------------------------------------------------------------------ the stream
    def set_show_tokens(self, on: bool) -> None:
        self.window.stream.show_tokens = on
        self.render()

    def set_show_rejected(self, on: bool) -> None:
        self.window.stream.show_rejected = on
        self.render()

    def set_mark_steps(self, on: bool) -> None:
        self.window.stream.mark_steps = on
        self.render()

    def render(self) -> None:
        """Show the conversation (or the completion) as the engine keeps it. A conversation drawn
        before is drawn again only from its first changed message (widgets/transcript.Drawn)."""
        window = self.window
        chat_shown = window.chat.shown()
        window.conversation_note.setVisible(chat_shown)  # a note about the chat, not a completion
        drawn, self._drawn = self._drawn, None
        run, conversation = self.model.run, self.model.chat.conversation
        if chat_shown and conversation is not None:
            live = run.live if self.model.running and run.live is not None and run.live.finish is None else None
            self._drawn = render_conversation(window.stream, conversation, live, drawn)
        else:
            window.stream.clear_stream()
            if not chat_shown and run.completion is not None:
                render_completion(window.stream, run.completion)
        window.stream.scroll_to_end()

    def show_engine_record(self) -> None:
        """A run's job ended: a chat shows the conversation as the engine kept it."""
        if self.window.chat.shown():
            self.render()

    def paint_figures(self) -> None:
        """The KV map, figures and plots: at most every FIGURES_INTERVAL_S while a job runs, the
        newest picture only."""
        now = time.perf_counter()
        if self.model.running and now - self._figures_painted_at < FIGURES_INTERVAL_S:
            return
        window = self.window
        self._figures_painted_at = now
        if self._latest_snapshot is not None:
            window.kv_map.set_snapshot(self._latest_snapshot)
            self._latest_snapshot = None
        window.stats.refresh()
        window.tune.speedup_plot.set_point(window.stats.speedup_plot.run_point)  # a no-op when unchanged
        window.decisions.update()
        if window.right_tabs.currentWidget() is window.inspector_page:  # its pictures cost GUI time the engine needs
            window.inspector.refresh()

    # ------------------------------------------------------------------ one handler per event
    def _on_rejected(self, event: RejectedDraft) -> None:
        self._pending_rejected[event.step] = event.texts

    def _on_snapshot(self, event: KvSnapshot) -> None:
        self._latest_snapshot = event
        if event.states:  # a rollback between two paints is still told (the latest, per sequence)
            self.window.kv_map.state_slots.note_rollbacks(event.states, event.step)

    def _on_requested(self, event: RunRequested) -> None:
        self.model.run.update(last_run_mode=event.config.mode)

    def _on_trace(self, event: TraceReady) -> None:
        self.model.run.update(last_trace=event.trace)

    def _on_warning(self, event: RunWarning) -> None:
        self.window.kv_map.figures.setText("KV map stopped for this run: " + event.message)
        self.say("Warning: " + event.message)

    def _on_run_failed(self, event: RunFailed) -> None:
        """A run that ended in failure inside a race or a replayed trace (a job's own failure
        comes with its JobEnded)."""
        self.failed(event.message)

    def _on_baseline(self, event: BaselineDone) -> None:
        run = self.model.run
        run.update(baselines=MappingProxyType({**run.baselines, event.key: event.tokens_per_second}))
        stats = self.window.stats
        if run.last_finished is not None and event.key == run.last_run_key:
            stats.set_speedup(run.last_finished.stats["tokens_per_second"], event.tokens_per_second)
            self.window.tune.speedup_plot.set_point(stats.speedup_plot.run_point)
        self.say(f"Plain baseline: {event.tokens_per_second:.1f} tok/s")

    def _on_started(self, event: RunStarted) -> None:
        """A run (live or replayed) starts: the views learn its shape."""
        window, config = self.window, event.config
        self.model.run.update(last_run_mode=config.get("mode", "plain"))
        mode = registry.mode(self.model.run.last_run_mode)
        lookahead_window = int(config.get("W", 0)) if mode.settings == "lookahead" else 0
        window.kv_map.begin_run(lookahead_window, event.n_prompt)
        # a replayed trace's model may not be the one loaded: its own memory decides the map's look
        window.kv_map.set_memory_kind(str(event.model.get("memory_kind", "attention")))
        window.decisions.clear()
        window.auto_sources.clear()
        window.auto_sources.setToolTip("")
        window.decisions_box.setVisible(mode.plans)
        window.inspector.paused_run = False
        window.inspector.set_record(self.record)

    def _on_step(self, event: StepDone) -> None:
        turn, window = self.model.run.live, self.window
        if turn is None:
            return
        acceptance = event.n_accepted / event.n_drafted if event.n_drafted else 0.0
        rejected = self._pending_rejected.pop(event.step, ())
        auto = event.auto
        proposers = auto.proposers if auto else ("",) * len(event.tokens)
        runs = [(t.text, t.source, event.step, t.id, acceptance, p if p != "target" else "", t.why)
                for t, p in zip(event.tokens, proposers)]
        if auto:
            window.decisions.add(event.step, auto, len(event.tokens))
        window.kv_map.add_tokens(t.source for t in event.tokens)
        if rejected:  # the drafts were tried where the target's own token now stands, which explains them
            replaced_by = event.tokens[-1].why
            ghosts = [(text, "rejected", event.step, -1, acceptance, "", replaced_by) for text in rejected]
            runs = runs[:-1] + ghosts + runs[-1:]
        for run in runs:
            turn.runs.append(run)
            render_run(window.stream, *run)
        # a live run's time is the engine's own step times: a demo's pause is not in them
        self._generation_s += event.t_step_s
        replay = self.model.demo.replay_shown
        window.stats.add_step(event, window.demo.player.clock if replay else self._generation_s)

    def _on_finished(self, event: RunFinished) -> None:
        window, run = self.window, self.model.run
        window.inspector.paused_run = False
        run.update(last_finished=event)
        turn = run.live
        if turn is not None:
            turn.stats, turn.finish, turn.text = event.stats, event.finish_reason, event.text
            if turn.chat:
                self.render()  # the engine's record of the turn (sent just before) replaces the live one
            else:
                window.stream.append_text("\n" + figures_line(turn.mode, event.stats, event.finish_reason), "meta", 0)
        if "auto" in event.stats:  # a line of counts; hover for each source's whole account
            auto = event.stats["auto"]
            window.auto_sources.setText("Sources, accepted/sent: " + source_counts(auto) + " — hover for why")
            window.auto_sources.setToolTip(
                "\n".join(line for line in [*source_lines(auto), step_limit_line(auto)] if line))
        stats = window.stats
        stats.refresh()
        stats.finish(event.stats, run.baselines.get(run.last_run_key),
                     window.tuning.predicted_speedup(event.stats, run.last_run_mode))
        window.tune.speedup_plot.set_point(stats.speedup_plot.run_point)
        replay = self.model.demo.replay_shown
        config = run.last_run_config if not replay else None
        stats.set_break_even(window.tuning.break_even_words(config) if config is not None else None)
        s = event.stats
        reuse = f" · prompt {s['n_prompt']} tokens, {s['n_prompt_reused']} reused" if s.get("n_prompt_reused") else ""
        self.say(f"Finished: {event.finish_reason} · {s['n_predict']} tokens at {s['tokens_per_second']:.1f} tok/s"
                 + reuse)
        if not replay:
            window.input.focus()  # the next message is typed straight away

    def failed(self, message: str) -> None:
        """A run or job failed: one sentence, and a message that made nothing goes back in the box."""
        window, run = self.window, self.model.run
        window.error_label.setText(message)
        self.say("Run failed — " + message)
        turn = run.live
        if turn is not None and not turn.runs and turn.finish is None:
            if turn.user and not window.input.text().strip():
                window.input.set_text(turn.user)  # nothing was generated: give the text back to edit
            run.update(live=None, completion=run.completion if turn.chat else None)
        self.render()
