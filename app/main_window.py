"""The main window: model bar, run controls, the live token stream and the run's figures."""

from __future__ import annotations

from pathlib import Path

from app.engine_worker import EngineWorker, LoadFailed, LoadStarted, ModelLoaded
from app.qt import QtCore, QtGui, QtWidgets, Qt
from app.widgets.token_stream import TokenStream

PAINT_INTERVAL_MS = 33  # ~30 Hz: the window never repaints per token


class MainWindow(QtWidgets.QMainWindow):
    def __init__(self, model: str = "default", *, autoload: bool = True) -> None:
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.resize(1100, 720)
        self.worker = EngineWorker(self)
        self.worker.start()
        self.model_loaded = False
        self.running = False
        self._build()
        self._paint_timer = QtCore.QTimer(self)
        self._paint_timer.setInterval(PAINT_INTERVAL_MS)
        self._paint_timer.timeout.connect(self.drain_events)
        self._paint_timer.start()
        if autoload:
            self.load_model(model)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        central = QtWidgets.QWidget()
        layout = QtWidgets.QVBoxLayout(central)

        bar = QtWidgets.QHBoxLayout()
        self.model_label = QtWidgets.QLabel("No model loaded")
        self.model_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        open_button = QtWidgets.QPushButton("Open model…")
        open_button.clicked.connect(self.open_model_dialog)
        bar.addWidget(QtWidgets.QLabel("<b>Model</b>"))
        bar.addWidget(self.model_label, 1)
        bar.addWidget(open_button)
        layout.addLayout(bar)

        self.prompt_edit = QtWidgets.QPlainTextEdit()
        self.prompt_edit.setPlaceholderText("Type a prompt, then Run (Ctrl+Enter)")
        self.prompt_edit.setMaximumHeight(110)
        layout.addWidget(self.prompt_edit)

        controls = QtWidgets.QHBoxLayout()
        self.max_tokens = QtWidgets.QSpinBox()
        self.max_tokens.setRange(1, 8192)
        self.max_tokens.setValue(256)
        self.chat_check = QtWidgets.QCheckBox("Chat template")
        self.run_button = QtWidgets.QPushButton("Run")
        self.run_button.setShortcut(QtGui.QKeySequence("Ctrl+Return"))
        self.run_button.clicked.connect(self.start_run)
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.stop_button.setShortcut(QtGui.QKeySequence(Qt.Key_Escape))
        self.stop_button.clicked.connect(self.stop_run)
        self.stop_button.setEnabled(False)
        controls.addWidget(QtWidgets.QLabel("Max tokens"))
        controls.addWidget(self.max_tokens)
        controls.addWidget(self.chat_check)
        controls.addStretch(1)
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        layout.addLayout(controls)

        self.stream = TokenStream()
        layout.addWidget(self.stream, 1)
        self.figures_label = QtWidgets.QLabel("")
        layout.addWidget(self.figures_label)
        self.error_label = QtWidgets.QLabel("")
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.setWordWrap(True)
        layout.addWidget(self.error_label)
        self.setCentralWidget(central)
        self.statusBar().showMessage("Starting…")
        self._update_buttons()

    # ------------------------------------------------------------------ actions
    def load_model(self, path: str) -> None:
        self.model_loaded = False
        self._update_buttons()
        self.worker.load_model(path)

    def open_model_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open a GGUF model", str(Path.home()), "GGUF models (*.gguf)")
        if path:
            self.load_model(path)

    def run_config(self):
        from engine.config import RunConfig

        return RunConfig(mode="plain", max_tokens=self.max_tokens.value())

    def start_run(self) -> None:
        if self.running or not self.model_loaded:
            return
        text = self.prompt_edit.toPlainText()
        self.error_label.setText("")
        self.stream.clear_stream()
        self.running = True
        self._update_buttons()
        self.statusBar().showMessage("Running…")
        self.worker.start_run(self.run_config(), text, chat=self.chat_check.isChecked())

    def stop_run(self) -> None:
        if self.running:
            self.worker.stop()
            self.statusBar().showMessage("Stopping…")

    def _update_buttons(self) -> None:
        self.run_button.setEnabled(self.model_loaded and not self.running)
        self.stop_button.setEnabled(self.running)

    # ------------------------------------------------------------------ events
    def drain_events(self) -> None:
        from engine.events import RunFailed, RunFinished, StepDone

        events = self.worker.drain()
        if not events:
            return
        for event in events:
            if isinstance(event, StepDone):
                for tok in event.tokens:
                    self.stream.append_text(tok.text, tok.source, event.step, tok.id)
            elif isinstance(event, RunFinished):
                self.running = False
                s = event.stats
                self.figures_label.setText(
                    f"{s['n_predict']} tokens · {s['tokens_per_second']:.1f} tok/s · {s['steps']} steps · "
                    f"prompt {s['n_prompt']} tokens in {s['t_encode_s']:.2f} s"
                )
                self.statusBar().showMessage(f"Finished: {event.finish_reason}")
            elif isinstance(event, RunFailed):
                self.running = False
                self.error_label.setText(event.message)
                self.statusBar().showMessage("Run failed")
            elif isinstance(event, LoadStarted):
                self.statusBar().showMessage(f"Loading {event.path}…")
            elif isinstance(event, ModelLoaded):
                self.model_loaded = True
                info = event.info
                self.model_label.setText(
                    f"{Path(event.path).name} — {info['arch']}, {info['n_params'] / 1e6:.0f}M params, "
                    f"{info['quant']}, vocab {info['n_vocab']}, context {event.n_ctx}"
                )
                self.chat_check.setChecked(event.has_chat_template)
                self.chat_check.setEnabled(event.has_chat_template)
                self.statusBar().showMessage("Model loaded" if event.has_chat_template else
                                             "Model loaded — no chat template, completion mode")
            elif isinstance(event, LoadFailed):
                self.error_label.setText(event.message)
                self.model_loaded = event.previous_model_kept
                self.statusBar().showMessage("Could not load the model" +
                                             (" — the previous model stays loaded" if event.previous_model_kept else ""))
        self.stream.scroll_to_end()
        self._update_buttons()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self._paint_timer.stop()
        self.worker.shutdown()
        super().closeEvent(event)
