"""The window's long jobs beside a run: the race against plain, batch decoding of many prompts and
draft training. A mixin of :class:`app.main_window.MainWindow`."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.model.activity import Trigger, refusal
from specdec_studio.app.worker.messages import BatchKv, DistillDone
from specdec_studio.app.qt import QtWidgets


class JobsMixin:
    def _ready_for(self, trigger: Trigger) -> bool:
        """Whether the activity table allows ``trigger`` now; else the status bar says why (asked
        before a dialog opens or the prompt is read; start_job asks again)."""
        if self.machine.allows(trigger, model_loaded=self.model_loaded):
            return True
        self.statusBar().showMessage(refusal(self.activity, trigger, self.model_loaded))
        return False

    def start_race(self) -> None:
        if not self._ready_for(Trigger.RUN):
            return
        text = self.input.text().strip() or (self.live.user if self.live is not None else "")
        if not text:
            self.error_label.setText("Type a prompt first: the race runs it with plain decoding and the chosen mode.")
            return
        config = self._valid_config()
        if config is None:
            return
        if not config.mode_entry.verifies:
            self.error_label.setText("Choose a mode other than plain to race against plain decoding.")
            return
        chat = self._chat_shown_setting()
        if self.start_job(Trigger.RUN, lambda: self.worker.race(config, text, chat=chat), kind="race"):
            self.centre_tabs.setCurrentIndex(1)  # Race
            self.race.on_progress("plain", 0)

    def start_batch(self, source: str, count: int, parallel: int) -> None:
        if not self._ready_for(Trigger.RUN):
            return
        config = self._valid_config()
        if config is None:
            return
        if config.mode_entry.batch_slot is None:
            self.error_label.setText("Batch decoding gives each prompt one sequence, and lookahead needs W + G + 1: "
                                     "choose plain, speculative, prompt lookup or Auto.")
            return
        chat = self._chat_shown_setting()
        if self.start_job(Trigger.RUN, lambda: self.worker.run_batch(config, source, count, parallel, chat=chat),
                          kind="batch"):
            self.error_label.setText("")
            self.statusBar().showMessage(f"Batch: {count} prompts, {parallel} at a time…")

    def _on_batch_event(self, event) -> bool:
        from specdec_studio.engine import parallel

        view = self.batch_view
        if isinstance(event, parallel.BatchStarted):
            view.on_started(event)
        elif isinstance(event, parallel.JobStarted):
            view.on_job_started(event)
        elif isinstance(event, parallel.JobStep):
            view.on_step(event)
        elif isinstance(event, parallel.JobFinished):
            view.on_job_finished(event)
        elif isinstance(event, BatchKv):
            view.kv_map.set_snapshot(event.snapshot)
        elif isinstance(event, parallel.BatchFinished):
            view.on_finished(event)
            self.statusBar().showMessage("Batch finished: " + view.summary.text())
        else:
            return False
        return True

    def train_draft(self) -> None:
        """The draft menu's "Train a draft for this target…": ask how, then train on the engine thread."""
        from specdec_studio.engine.models import catalog
        from specdec_studio.app.widgets.distill_dialog import DistillDialog

        # the draft menu shows the draft in use again (its "Train…" entry is an action, not a choice)
        self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(self.draft_path or ""), 0))
        if not self._ready_for(Trigger.TRAIN):
            return
        dialog = DistillDialog(self.model_bar.draft_candidates(), self.model_path, catalog.cache_dir(), self)
        if dialog.exec() != QtWidgets.QDialog.Accepted:
            return
        self.start_training(dialog.spec())

    def start_training(self, spec: dict) -> None:
        from specdec_studio.engine.drafts.distill import STEPS_PER_WINDOW

        spec = {**spec, "draft_gpu_layers": self.model_bar.draft_gpu_layers.value()}  # where it loads once trained
        if not self.start_job(Trigger.TRAIN, lambda: self.worker.train_draft(spec)):
            return
        self.training_bar.setRange(0, spec["steps"])
        self.training_bar.setValue(0)
        self.training_bar.setFormat("the target writes the training text…")
        self.training_bar.show()
        self.statusBar().showMessage(f"Training a draft (Stop ends it within {STEPS_PER_WINDOW} steps; "
                                     "what was trained is kept)")

    def _on_distill_event(self, event) -> bool:
        from specdec_studio.engine.drafts.distill import DistillProgress

        if isinstance(event, DistillProgress):
            if event.phase == "train":
                self.training_bar.setValue(event.step)
                self.training_bar.setFormat(f"training the draft: step %v/%m · loss {event.loss:.3f} · "
                                            f"ETA {event.eta_s:.0f} s")
            elif event.phase == "done":
                self.training_bar.setFormat("measuring the draft before and after…")
        elif isinstance(event, DistillDone):
            self.training_bar.hide()
            loss = f"loss {event.loss_first:.3f} → {event.loss_last:.3f}" if event.loss_first is not None else ""
            if event.agreement_before is None or event.agreement_after is None:
                agreement = "the measurement was stopped"
            else:
                agreement = (f"greedy agreement on held-out prompts {100 * event.agreement_before:.0f} % → "
                             f"{100 * event.agreement_after:.0f} %")
            # shown now, and again once the new draft has loaded (its load messages come after)
            self._distill_summary = (
                f"Draft trained{' (stopped early)' if event.stopped else ''}: {event.steps} steps in "
                f"{event.t_train_s:.0f} s, {loss}; {agreement}; loaded as the draft ({Path(event.path).name})")
            self.statusBar().showMessage(self._distill_summary)
        else:
            return False
        return True

    def _chat_shown_setting(self) -> bool:
        return self.input.chat_mode.isChecked() and self.has_chat_template
