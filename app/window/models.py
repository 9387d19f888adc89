"""Opening models and drafts from the window (load, download, RPC servers, the draft menu) and
what the window shows of them. Writes the models slice."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from specdec_studio.app.model.activity import Activity, Trigger
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import DownloadProgress, DraftLoaded, LoadFailed, LoadStarted, ModelLoaded
from specdec_studio.engine.config import MODES
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.models import catalog
from specdec_studio.engine.models.loading import mode_refusal
from specdec_studio.engine.models.rpc import parse_servers

MAX_RECENT = 8  # recent models the model bar lists


class ModelsController(Controller):
    def handlers(self) -> dict[type, Callable]:
        return {DownloadProgress: self._on_download_progress, LoadStarted: self._on_load_started,
                ModelLoaded: self._on_model_loaded, DraftLoaded: self._on_draft_loaded,
                LoadFailed: self._on_load_failed}

    def _recent_models(self) -> list[str]:
        recent = self.window.settings.value("recent_models", [])
        return [recent] if isinstance(recent, str) else list(recent or [])

    def load_model(self, path: str) -> None:
        window, bar = self.window, self.window.model_bar
        profile = window.settings.value("auto_profile", "true") in (True, "true")
        key = _rpc_key(path)
        if key != bar.rpc_of:  # another model: the servers it was last loaded on (a reload keeps what is typed)
            bar.rpc.setText(str(window.settings.value(key, "") or ""))
            bar.rpc_of = key
        try:
            servers = parse_servers(bar.rpc.text())
        except SpecDecError as exc:
            window.error_label.setText(str(exc))
            return
        if window.gate.start_job(Trigger.LOAD, lambda: window.use_engine(rpc=bool(servers)).load_model(
                path, n_ctx=bar.ctx.value(), n_threads=bar.threads.value(), n_gpu_layers=bar.gpu_layers.value(),
                profile=profile, rpc_servers=servers), kind="model"):
            self.model.models.update(loaded=False)

    def fetch_default(self) -> None:
        self.download_model("default")

    def download_model(self, key: str, as_draft: bool = False) -> None:
        """Download a known model from its packages, then load it (as the draft with ``as_draft``);
        Stop ends the download between two parts and keeps nothing."""
        window, bar = self.window, self.window.model_bar
        layers = (bar.draft_gpu_layers if as_draft else bar.gpu_layers).value()
        if window.gate.start_job(Trigger.DOWNLOAD, lambda: window.worker.fetch_and_load(
                key, n_ctx=bar.ctx.value(), n_threads=bar.threads.value(), n_gpu_layers=layers,
                as_draft=as_draft), kind="draft" if as_draft else "model"):
            self.model.models.update(download_key=key)

    def choose_draft(self, path: str | None) -> None:
        window = self.window
        layers = window.model_bar.draft_gpu_layers.value()
        if not window.gate.start_job(Trigger.LOAD, lambda: window.worker.load_draft(path, layers), kind="draft"):
            self.show_draft_in_use()  # the Draft menu shows the draft still loaded, not the entry refused

    def show_draft_in_use(self) -> None:
        """The Draft menu shows the draft loaded (after a refusal, a failure, or a menu action)."""
        draft = self.window.model_bar.draft
        draft.setCurrentIndex(max(draft.findData(self.model.models.draft_path or ""), 0))

    # ------------------------------------------------------------------ the engine's reports
    def _on_download_progress(self, event: DownloadProgress) -> None:
        mb = 1e6
        self.say(f"Downloading {event.key}: {event.done_bytes / mb:,.0f} of {event.total_bytes / mb:,.0f} MB "
                 f"({100 * event.done_bytes / max(1, event.total_bytes):.0f} %) · Stop cancels it")

    def _on_load_started(self, event: LoadStarted) -> None:
        if self.model.activity is Activity.DOWNLOADING and event.what != "download":
            self.window.gate.engine_trigger(Trigger.DOWNLOADED)
        self.say({"download": "Downloading", "draft": "Loading draft"}.get(event.what, "Loading")
                 + f" {Path(event.path).name}…")

    def _on_model_loaded(self, event: ModelLoaded) -> None:
        window, bar, settings = self.window, self.window.model_bar, self.window.settings
        self.model.models.update(loaded=True, path=event.path, draft_path=None,
                                 has_chat_template=event.has_chat_template)
        window.controls.set_draft_loaded(False)
        window.controls.set_refused_modes(_refused_modes(event.info))
        window.kv_map.set_memory_kind(str(event.info.get("memory_kind", "attention")))
        bar.set_mtp_layers(int(event.info.get("n_mtp_layers", 0)))
        recent = [event.path] + [p for p in self._recent_models() if p != event.path]
        settings.setValue("recent_models", recent[:MAX_RECENT])
        settings.setValue("last_model", event.path)
        bar.set_models([str(p) for p in catalog.cached_models()], recent, event.path)
        bar.set_draft_candidates(list(event.draft_candidates), None, suggested_draft(event.path))
        last_draft = str(settings.value("last_draft", "") or "")
        if last_draft and (last_draft, None) in event.draft_candidates:
            self.choose_draft(last_draft)  # a restored speculative mode can run at once
        bar.set_gpu_available(event.gpu_offload)
        bar.set_rpc_devices(event.rpc_devices)
        settings.setValue(_rpc_key(event.path), bar.rpc.text().strip() if event.rpc_devices else "")
        info = event.info
        n_rpc = len(event.rpc_devices)
        where = f" — on {n_rpc} RPC server{'s' if n_rpc > 1 else ''}" if n_rpc else ""
        window.setWindowTitle(f"SpecDec Studio — {Path(event.path).name}{where}")
        if not event.has_chat_template:
            window.input.chat_mode.setChecked(False)
        notice = "" if event.has_chat_template else " — no chat template: completion mode"
        if event.template_problem:
            notice = " — " + event.template_problem
        self.say(f"Loaded {info['arch']} · {info['n_params'] / 1e6:.0f}M params · {info['quant']} · "
                 f"vocab {info['n_vocab']} · context {event.n_ctx} · {event.n_threads} threads{notice}")
        window.error_label.setText("")
        window.input.focus()  # loaded: the user types next

    def _on_draft_loaded(self, event: DraftLoaded) -> None:
        window, draft = self.window, self.window.model_bar.draft
        self.model.models.update(draft_path=event.path)
        window.settings.setValue("last_draft", event.path or "")  # what a Reload of the target loads again
        if event.path and draft.findData(event.path) < 0:  # a draft made here (trained)
            draft.insertItem(1, Path(event.path).name, event.path)
        self.show_draft_in_use()
        window.controls.set_draft_loaded(event.path is not None)
        summary = window.jobs.take_distill_summary()
        self.say(summary or (f"Draft: {Path(event.path).name}" if event.path else "No draft model"))

    def _on_load_failed(self, event: LoadFailed) -> None:
        window = self.window
        window.error_label.setText(event.message)
        if event.what in ("draft", "download"):  # the Draft menu shows the draft still loaded
            self.show_draft_in_use()
        if event.what != "draft":
            models = self.model.models
            models.update(loaded=event.previous_model_kept)
            # the Model menu shows the model still loaded (or none), not the entry that failed
            window.model_bar.set_models([str(p) for p in catalog.cached_models()], self._recent_models(),
                                        models.path if models.loaded else None)
        failed = {"draft": "Could not load the draft", "download": "Not downloaded"}.get(event.what,
                                                                                      "Could not load the model")
        kept = event.previous_model_kept and event.what != "draft"
        self.say(failed + (" — the previous model stays loaded" if kept else ""))


def _rpc_key(model: str) -> str:
    """Where the RPC servers a model was last loaded on are kept (QSettings: one per model file;
    a known name such as "default" is its file)."""
    try:
        model = str(catalog.resolve(model))
    except SpecDecError:
        pass
    return "rpc_servers/" + hashlib.sha256(model.encode()).hexdigest()[:16]


def suggested_draft(target_path: str):
    """(key, its file's path or None if not downloaded, its size) of the draft the catalog pairs
    with this target, if it is a known model with one."""
    key = catalog.known_key_of(target_path)
    draft_key = catalog.KNOWN_MODELS[key].draft if key else None
    if draft_key is None:
        return None
    path = catalog.known_path(draft_key)
    return draft_key, (str(path) if path.exists() else None), catalog.KNOWN_MODELS[draft_key].size_bytes


def _refused_modes(info: dict) -> dict[str, str]:
    """The modes the model just loaded cannot run, each with its reason (engine.models.loading)."""
    found = {mode: mode_refusal(mode, str(info.get("arch", "")), str(info.get("memory_kind", "attention")),
                                bool(info.get("diffusion", False)), int(info.get("n_mtp_layers", 0)))
             for mode in MODES}
    return {mode: why for mode, why in found.items() if why}
