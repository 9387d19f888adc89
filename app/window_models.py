"""Opening models and drafts from the window, and what it shows of them. A mixin of
:class:`app.main_window.MainWindow`."""

from __future__ import annotations

from pathlib import Path
from specdec_studio.app.worker_messages import DraftLoaded, LoadFailed, LoadStarted, ModelLoaded

MAX_RECENT = 8  # recent models the model bar lists


class ModelsMixin:
    def _recent_models(self) -> list[str]:
        recent = self.settings.value("recent_models", [])
        return [recent] if isinstance(recent, str) else list(recent or [])

    def load_model(self, path: str) -> None:
        self.model_loaded = False
        self.loading = True
        self._update_buttons()
        self.worker.load_model(path, n_ctx=self.model_bar.ctx.value(), n_threads=self.model_bar.threads.value(),
                               n_gpu_layers=self.model_bar.gpu_layers.value(),
                               profile=self.settings.value("auto_profile", "true") in (True, "true"))

    def fetch_default(self) -> None:
        self.loading = True
        self.worker.fetch_and_load("default", n_ctx=self.model_bar.ctx.value(),
                                   n_threads=self.model_bar.threads.value())

    def choose_draft(self, path: str | None) -> None:
        self.worker.load_draft(path)

    def _on_model_event(self, event) -> None:
        from specdec_studio.engine.models import catalog

        if isinstance(event, LoadStarted):
            self.statusBar().showMessage({"download": "Downloading", "draft": "Loading draft"}.get(event.what, "Loading")
                                         + f" {Path(event.path).name}…")
        elif isinstance(event, ModelLoaded):
            self.model_loaded = True
            self.loading = False
            self.model_path = event.path
            self.draft_path = None
            self.has_chat_template = event.has_chat_template
            self.controls.set_draft_loaded(False)
            recent = [event.path] + [p for p in self._recent_models() if p != event.path]
            self.settings.setValue("recent_models", recent[:MAX_RECENT])
            self.settings.setValue("last_model", event.path)
            self.model_bar.set_models([str(p) for p in catalog.cached_models()], recent, event.path)
            self.model_bar.set_draft_candidates(list(event.draft_candidates), None)
            last_draft = str(self.settings.value("last_draft", "") or "")
            if last_draft and (last_draft, None) in event.draft_candidates:
                self.choose_draft(last_draft)  # a restored speculative mode can run at once
            self.model_bar.set_gpu_available(event.gpu_offload)
            info = event.info
            self.setWindowTitle(f"SpecDec Studio — {Path(event.path).name}")
            self.input.chat_mode.setEnabled(event.has_chat_template)
            if not event.has_chat_template:
                self.input.chat_mode.setChecked(False)
            notice = "" if event.has_chat_template else " — no chat template: completion mode"
            if event.template_problem:
                notice = " — " + event.template_problem
            self.statusBar().showMessage(
                f"Loaded {info['arch']} · {info['n_params'] / 1e6:.0f}M params · {info['quant']} · "
                f"vocab {info['n_vocab']} · context {event.n_ctx} · {event.n_threads} threads{notice}"
            )
            self.error_label.setText("")
            self.input.focus()  # loaded: the user types next
        elif isinstance(event, DraftLoaded):
            self.draft_path = event.path
            if event.path and self.model_bar.draft.findData(event.path) < 0:  # a draft made here (trained)
                self.model_bar.draft.insertItem(1, Path(event.path).name, event.path)
            self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(event.path or ""), 0))
            self.controls.set_draft_loaded(event.path is not None)
            summary, self._distill_summary = self._distill_summary, None
            self.statusBar().showMessage(summary or (f"Draft: {Path(event.path).name}" if event.path
                                                     else "No draft model"))
        elif isinstance(event, LoadFailed):
            self.loading = self.loading and event.what == "draft"
            self.error_label.setText(event.message)
            if event.what == "draft":
                self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(self.draft_path or ""), 0))
            else:
                self.model_loaded = event.previous_model_kept
                if not self.model_loaded:
                    self.model_bar.set_models([str(p) for p in catalog.cached_models()], self._recent_models(), None)
            self.statusBar().showMessage("Could not load the " + ("draft" if event.what == "draft" else "model")
                                         + (" — the previous model stays loaded" if event.previous_model_kept else ""))
