"""Opening models and drafts from the window, and what it shows of them. A mixin of
:class:`app.main_window.MainWindow`."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.model.activity import Activity, Trigger
from specdec_studio.app.worker.messages import DownloadProgress, DraftLoaded, LoadFailed, LoadStarted, ModelLoaded

MAX_RECENT = 8  # recent models the model bar lists


class ModelsMixin:
    def _recent_models(self) -> list[str]:
        recent = self.settings.value("recent_models", [])
        return [recent] if isinstance(recent, str) else list(recent or [])

    def load_model(self, path: str) -> None:
        from specdec_studio.engine.errors import SpecDecError
        from specdec_studio.engine.models.rpc import parse_servers

        bar = self.model_bar
        profile = self.settings.value("auto_profile", "true") in (True, "true")
        key = _rpc_key(path)
        if key != bar.rpc_of:  # another model: the servers it was last loaded on (a reload keeps what is typed)
            bar.rpc.setText(str(self.settings.value(key, "") or ""))
            bar.rpc_of = key
        try:
            servers = parse_servers(bar.rpc.text())
        except SpecDecError as exc:
            self.error_label.setText(str(exc))
            return
        if self.start_job(Trigger.LOAD, lambda: self._worker_for(servers).load_model(
                path, n_ctx=bar.ctx.value(), n_threads=bar.threads.value(), n_gpu_layers=bar.gpu_layers.value(),
                profile=profile, rpc_servers=servers), kind="model"):
            self.model_loaded = False
            self._update_buttons()

    def _worker_for(self, rpc_servers: tuple[str, ...]):
        """The engine that loads a model: this process's engine thread, or, for a model on RPC
        servers, an engine process (app/worker/engine_process.py), which a lost server cannot take the
        window down with. Switching closes the other one and its model."""
        from specdec_studio.app.worker.engine_process import EngineProcess
        from specdec_studio.app.worker.engine_worker import EngineWorker

        in_process = isinstance(self.worker, EngineProcess)
        if bool(rpc_servers) != in_process:
            self.worker.shutdown()
            self.worker = EngineProcess(self) if rpc_servers else EngineWorker(self)
            self.worker.start()
            self.worker.conversation("start")  # the conversation on screen, in the new engine
        return self.worker

    def fetch_default(self) -> None:
        self.download_model("default")

    def download_model(self, key: str, as_draft: bool = False) -> None:
        """Download a known model from its packages, then load it (as the draft with ``as_draft``);
        Stop ends the download between two parts and keeps nothing."""
        bar = self.model_bar
        layers = (bar.draft_gpu_layers if as_draft else bar.gpu_layers).value()
        if self.start_job(Trigger.DOWNLOAD, lambda: self.worker.fetch_and_load(
                key, n_ctx=bar.ctx.value(), n_threads=bar.threads.value(), n_gpu_layers=layers,
                as_draft=as_draft), kind="draft" if as_draft else "model"):
            self.download_key = key
            self._update_buttons()

    def choose_draft(self, path: str | None) -> None:
        layers = self.model_bar.draft_gpu_layers.value()
        if not self.start_job(Trigger.LOAD, lambda: self.worker.load_draft(path, layers), kind="draft"):
            # the Draft menu shows the draft still loaded, not the entry refused
            self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(self.draft_path or ""), 0))

    def _on_model_event(self, event) -> None:
        from specdec_studio.engine.models import catalog

        if isinstance(event, DownloadProgress):
            mb = 1e6
            self.statusBar().showMessage(
                f"Downloading {event.key}: {event.done_bytes / mb:,.0f} of {event.total_bytes / mb:,.0f} MB "
                f"({100 * event.done_bytes / max(1, event.total_bytes):.0f} %) · Stop cancels it")
        elif isinstance(event, LoadStarted):
            if self.activity is Activity.DOWNLOADING and event.what != "download":
                self._engine_trigger(Trigger.DOWNLOADED)
            self.statusBar().showMessage(
                {"download": "Downloading", "draft": "Loading draft"}.get(event.what, "Loading")
                + f" {Path(event.path).name}…"
            )
        elif isinstance(event, ModelLoaded):
            self.model_loaded = True
            self.model_path = event.path
            self.draft_path = None
            self.has_chat_template = event.has_chat_template
            self.controls.set_draft_loaded(False)
            self.controls.set_refused_modes(_refused_modes(event.info))
            self.kv_map.set_memory_kind(str(event.info.get("memory_kind", "attention")))
            self.model_bar.set_mtp_layers(int(event.info.get("n_mtp_layers", 0)))
            recent = [event.path] + [p for p in self._recent_models() if p != event.path]
            self.settings.setValue("recent_models", recent[:MAX_RECENT])
            self.settings.setValue("last_model", event.path)
            self.model_bar.set_models([str(p) for p in catalog.cached_models()], recent, event.path)
            self.model_bar.set_draft_candidates(list(event.draft_candidates), None, _suggested_draft(event.path))
            last_draft = str(self.settings.value("last_draft", "") or "")
            if last_draft and (last_draft, None) in event.draft_candidates:
                self.choose_draft(last_draft)  # a restored speculative mode can run at once
            self.model_bar.set_gpu_available(event.gpu_offload)
            self.model_bar.set_rpc_devices(event.rpc_devices)
            self.settings.setValue(_rpc_key(event.path), self.model_bar.rpc.text().strip() if event.rpc_devices else "")
            info = event.info
            where = f" — on {len(event.rpc_devices)} RPC server{'s' if len(event.rpc_devices) > 1 else ''}" \
                if event.rpc_devices else ""
            self.setWindowTitle(f"SpecDec Studio — {Path(event.path).name}{where}")
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
            self.settings.setValue("last_draft", event.path or "")  # what a Reload of the target loads again
            if event.path and self.model_bar.draft.findData(event.path) < 0:  # a draft made here (trained)
                self.model_bar.draft.insertItem(1, Path(event.path).name, event.path)
            self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(event.path or ""), 0))
            self.controls.set_draft_loaded(event.path is not None)
            summary, self._distill_summary = self._distill_summary, None
            self.statusBar().showMessage(summary or (f"Draft: {Path(event.path).name}" if event.path
                                                     else "No draft model"))
        elif isinstance(event, LoadFailed):
            self.error_label.setText(event.message)
            if event.what in ("draft", "download"):  # the Draft menu shows the draft still loaded
                self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(self.draft_path or ""), 0))
            if event.what != "draft":
                self.model_loaded = event.previous_model_kept
                # the Model menu shows the model still loaded (or none), not the entry that failed
                self.model_bar.set_models([str(p) for p in catalog.cached_models()], self._recent_models(),
                                          self.model_path if self.model_loaded else None)
            failed = {"draft": "Could not load the draft", "download": "Not downloaded"}.get(event.what,
                                                                                          "Could not load the model")
            self.statusBar().showMessage(failed + (" — the previous model stays loaded" if event.previous_model_kept
                                                   and event.what != "draft" else ""))


def _rpc_key(model: str) -> str:
    """Where the RPC servers a model was last loaded on are kept (QSettings: one per model file;
    a known name such as "default" is its file)."""
    import hashlib

    from specdec_studio.engine.errors import SpecDecError
    from specdec_studio.engine.models import catalog

    try:
        model = str(catalog.resolve(model))
    except SpecDecError:
        pass
    return "rpc_servers/" + hashlib.sha256(model.encode()).hexdigest()[:16]


def _suggested_draft(target_path: str):
    """(key, its file's path or None if not downloaded, its size) of the draft the catalog pairs
    with this target, if it is a known model with one."""
    from specdec_studio.engine.models import catalog

    key = catalog.known_key_of(target_path)
    draft_key = catalog.KNOWN_MODELS[key].draft if key else None
    if draft_key is None:
        return None
    path = catalog.known_path(draft_key)
    return draft_key, (str(path) if path.exists() else None), catalog.KNOWN_MODELS[draft_key].size_bytes


def _refused_modes(info: dict) -> dict[str, str]:
    """The modes the model just loaded cannot run, each with its reason (engine.models.loading)."""
    from specdec_studio.engine.config import MODES
    from specdec_studio.engine.models.loading import mode_refusal

    found = {mode: mode_refusal(mode, str(info.get("arch", "")), str(info.get("memory_kind", "attention")),
                                bool(info.get("diffusion", False)), int(info.get("n_mtp_layers", 0)))
             for mode in MODES}
    return {mode: why for mode, why in found.items() if why}
