"""The window's long jobs beside a run: the race against plain, batch decoding of many prompts and
draft training. Writes the jobs slice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specdec_studio.app.model.activity import Trigger
from specdec_studio.app.qt import QtWidgets
from specdec_studio.app.widgets.distill_dialog import DistillDialog
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import BatchKv, DistillDone, RaceProgress, RaceReady, ServeStarted
from specdec_studio.engine import parallel
from specdec_studio.engine.drafts.distill import STEPS_PER_WINDOW, DistillProgress
from specdec_studio.engine.models import catalog


class JobsController(Controller):
    def handlers(self) -> dict[type, Callable]:
        view = self.window.batch_view
        return {
            RaceProgress: lambda event: self.window.race.on_progress(event.which, event.n_tokens),
            RaceReady: self._on_race_ready,
            parallel.BatchStarted: view.on_started, parallel.JobStarted: view.on_job_started,
            parallel.JobStep: view.on_step, parallel.JobFinished: view.on_job_finished,
            BatchKv: lambda event: view.kv_map.set_snapshot(event.snapshot),
            parallel.BatchFinished: self._on_batch_finished, ServeStarted: self._on_serving,
            DistillProgress: self._on_distill_progress, DistillDone: self._on_distill_done,
        }

    # ------------------------------------------------------------------ race and batch
    def start_race(self) -> None:
        window = self.window
        if not window.gate.ready_for(Trigger.RUN):
            return
        live = self.model.run.live
        text = window.input.text().strip() or (live.user if live is not None else "")
        if not text:
            window.error_label.setText("Type a prompt first: the race runs it with plain decoding and the chosen mode.")
            return
        config = window.runs.valid_config()
        if config is None:
            return
        if not config.mode_entry.verifies:
            window.error_label.setText("Choose a mode other than plain to race against plain decoding.")
            return
        chat = window.chat.can_chat()
        if window.gate.start_job(Trigger.RUN, lambda: window.worker.race(config, text, chat=chat), kind="race"):
            window.centre_tabs.setCurrentIndex(1)  # Race
            window.race.on_progress("plain", 0)

    def start_batch(self, source: str, count: int, n_parallel: int) -> None:
        window = self.window
        if not window.gate.ready_for(Trigger.RUN):
            return
        config = window.runs.valid_config()
        if config is None:
            return
        if config.mode_entry.batch_slot is None:
            window.error_label.setText("Batch decoding gives each prompt one sequence, and lookahead needs W + G + 1: "
                                       "choose plain, speculative, prompt lookup or Auto.")
            return
        chat = window.chat.can_chat()
        if window.gate.start_job(
                Trigger.RUN, lambda: window.worker.run_batch(config, source, count, n_parallel, chat=chat),
                kind="batch"):
            window.error_label.setText("")
            self.say(f"Batch: {count} prompts, {n_parallel} at a time…")

    def start_serving(self, port: int, n_parallel: int) -> None:
        """Serve the loaded model on 127.0.0.1:``port`` with the run controls' settings (Auto unless
        they say otherwise), ``n_parallel`` requests at once, until Stop; the window's own runs wait."""
        window = self.window
        if not window.gate.ready_for(Trigger.RUN):
            return
        config = window.runs.valid_config()
        if config is None:
            return
        if config.mode_entry.batch_slot is None:
            window.error_label.setText("The server decodes its requests in batch slots: choose plain, speculative, "
                                       "prompt lookup or Auto.")
            return
        if window.gate.start_job(Trigger.RUN, lambda: window.worker.serve(config, port, n_parallel, 4 * n_parallel),
                                 kind="serve"):
            window.error_label.setText("")
            window.centre_tabs.setCurrentIndex(2)  # Batch: where the requests show
            self.say(f"Starting the server on 127.0.0.1:{port}…")

    def stop_request(self, job_id: str) -> None:
        """End one served request (its client gets the answer so far); the server goes on."""
        self.window.worker.stop_request(job_id)
        self.say(f"Stopping {job_id}; the server goes on (Stop ends it)")

    def _on_serving(self, event: ServeStarted) -> None:
        self.window.batch_view.on_serving(event)
        self.say(f"Serving {event.model} at {event.url} (OpenAI API) — Stop ends the server")

    def _on_race_ready(self, event: RaceReady) -> None:
        self.window.race.start(event.plain, event.strategy)
        self.say("Race measured: replaying both runs on a common clock")

    def _on_batch_finished(self, event: parallel.BatchFinished) -> None:
        view = self.window.batch_view
        view.on_finished(event)
        self.say("Batch finished: " + view.summary.text())

    # ------------------------------------------------------------------ draft training
    def train_draft(self) -> None:
        """The draft menu's "Train a draft for this target…": ask how, then train on the engine thread."""
        window = self.window
        window.models.show_draft_in_use()  # its "Train…" entry is an action, not a choice
        if not window.gate.ready_for(Trigger.TRAIN):
            return
        dialog = DistillDialog(window.model_bar.draft_candidates(), self.model.models.path, catalog.cache_dir(),
                               window)
        if dialog.exec() != QtWidgets.QDialog.Accepted:
            return
        self.start_training(dialog.spec())

    def start_training(self, spec: dict) -> None:
        window = self.window
        spec = {**spec, "draft_gpu_layers": window.model_bar.draft_gpu_layers.value()}  # where it loads once trained
        if not window.gate.start_job(Trigger.TRAIN, lambda: window.worker.train_draft(spec)):
            return
        bar = window.training_bar
        bar.setRange(0, spec["steps"])
        bar.setValue(0)
        bar.setFormat("the target writes the training text…")
        bar.show()
        self.say(f"Training a draft (Stop ends it within {STEPS_PER_WINDOW} steps; what was trained is kept)")

    def training_ended(self) -> None:
        """Training failed: its progress goes (the failure is said by the runs)."""
        self.window.training_bar.hide()

    def take_distill_summary(self) -> str | None:
        """What the training just made, said once more when its draft has loaded; then forgotten."""
        summary = self.model.jobs.distill_summary
        self.model.jobs.update(distill_summary=None)
        return summary

    def _on_distill_progress(self, event: DistillProgress) -> None:
        bar = self.window.training_bar
        if event.phase == "train":
            bar.setValue(event.step)
            bar.setFormat(f"training the draft: step %v/%m · loss {event.loss:.3f} · ETA {event.eta_s:.0f} s")
        elif event.phase == "done":
            bar.setFormat("measuring the draft before and after…")

    def _on_distill_done(self, event: DistillDone) -> None:
        self.window.training_bar.hide()
        loss = f"loss {event.loss_first:.3f} → {event.loss_last:.3f}" if event.loss_first is not None else ""
        if event.agreement_before is None or event.agreement_after is None:
            agreement = "the measurement was stopped"
        else:
            agreement = (f"greedy agreement on held-out prompts {100 * event.agreement_before:.0f} % → "
                         f"{100 * event.agreement_after:.0f} %")
        # shown now, and again once the new draft has loaded (its load messages come after)
        summary = (f"Draft trained{' (stopped early)' if event.stopped else ''}: {event.steps} steps in "
                   f"{event.t_train_s:.0f} s, {loss}; {agreement}; loaded as the draft ({Path(event.path).name})")
        self.model.jobs.update(distill_summary=summary)
        self.say(summary)
