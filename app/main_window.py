"""The main window: model bar, run controls, the live token stream, the KV-cache map and figures.

The engine runs on :class:`app.engine_worker.EngineWorker`; this window only drains its events
from a QTimer (~30 Hz) and paints the newest state, so the engine's speed never depends on the
window. Settings (geometry, models, parameters, theme) persist with QSettings. The demo behaviour
(pause and steps, replays, exports, presentation mode) is in :mod:`app.window_demo`, the jobs
beside a run (race, batch, draft training) in :mod:`app.window_jobs`.
"""

from __future__ import annotations

import time
from pathlib import Path

from app.engine_worker import (BaselineDone, ConversationList, DraftLoaded, EngineWorker, ExactnessReady, LoadFailed,
                               LoadStarted, ModelLoaded, Paused, ProfileProgress, ProfileReady, ProfileStarted,
                               RaceProgress, RaceReady, RunRequested, SavedSweeps, TraceReady)
from app.replay import TracePlayer
from app.qt import QtCore, QtGui, QtWidgets, Qt
from app.theme import THEMES, apply_theme
from app.transcript import Turn, figures_line, render_completion, render_conversation, render_run
from app.window_demo import DemoMixin
from app.window_jobs import JobsMixin
from app.widgets.batch_view import BatchView
from app.widgets.chat import ChatInput
from app.widgets.controls import ControlsPanel
from app.widgets.conversation_list import ConversationSidebar
from app.widgets.decision_strip import DecisionStrip
from app.widgets.kv_map import KvMapView
from app.widgets.model_picker import ModelBar
from app.widgets.race_view import RaceView
from app.widgets.stats_panel import StatsPanel
from app.widgets.step_inspector import RunRecord, StepInspector
from app.widgets.sweep_view import ProfilePlot
from app.widgets.token_stream import SOURCE_COLOURS, TokenStream
from app.widgets.tune_panel import TunePanel
from engine.config import DEFAULT_N_CTX, MODES, default_threads
from engine.trace import SPEEDS

PAINT_INTERVAL_MS = 33  # ~30 Hz: the window never repaints per token
# The plots and the KV map cost far more to paint than text, and on a 2-core machine every
# millisecond the GUI paints is taken from llama.cpp's threads: they refresh at ~8 Hz.
FIGURES_INTERVAL_S = 0.125
MAX_RECENT = 8


class MainWindow(DemoMixin, JobsMixin, QtWidgets.QMainWindow):
    def __init__(self, model: str | None = None, *, autoload: bool = True,
                 settings: QtCore.QSettings | None = None) -> None:
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.settings = settings or QtCore.QSettings()
        self.worker = EngineWorker(self)
        self.worker.start()
        self.model_loaded = False
        self.loading = False  # a model (or a download) is on its way; Stop skips what follows it
        self.model_path: str | None = None
        self.draft_path: str | None = None
        self.has_chat_template = False
        self.running = False
        # What the stream shows: the engine's conversation (sent as views; the window keeps no
        # history of its own), the run streaming now, and the last completion.
        self.conversation = None  # engine.conversation.ConversationView
        self.live: Turn | None = None
        self.completion: Turn | None = None
        self.editing_index: int | None = None  # the user message the next Run replaces
        self.baselines: dict[tuple, float] = {}
        self.last_run_key: tuple | None = None
        self.last_run_config = None  # the config the last run used: its baseline repeats it
        self.last_finished = None
        self.last_run_mode = "plain"
        self.sweeping = False
        self.profiling = False  # a batch-cost profile is being measured (Stop skips it)
        self.checking_exactness = False
        self.profiles: dict[str, dict | None] = {"target": None, "draft": None}
        self._pending_rejected: dict[int, tuple] = {}
        self._latest_snapshot = None
        self._figures_painted_at = 0.0
        self._run_started_at = 0.0
        self.record = RunRecord()  # the shown run's steps, for the step inspector
        self.last_trace = None  # engine.trace.Trace of the last run (live or loaded)
        self.replaying = False  # a recorded trace is playing into the window
        self.paused = False  # the live run (or replay) holds after its current step
        self.presenting = False
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
        if autoload:
            wanted = model or self.settings.value("last_model", "default")
            self.load_model(wanted)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.model_bar = ModelBar()
        self.model_bar.load_requested.connect(self.load_model)
        self.model_bar.draft_requested.connect(self.choose_draft)
        self.model_bar.fetch_requested.connect(self.fetch_default)
        self.model_bar.demo_requested.connect(self.open_trace)
        self.model_bar.train_draft_requested.connect(self.train_draft)

        self.controls = ControlsPanel()
        self.controls.changed.connect(self._update_buttons)
        controls_scroll = QtWidgets.QScrollArea()
        controls_scroll.setWidget(self.controls)
        controls_scroll.setWidgetResizable(True)
        controls_scroll.setMinimumWidth(340)
        controls_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)

        self.stream = TokenStream()
        self.input = ChatInput()
        self.input.submit.connect(self.start_run)
        self.input.stop.clicked.connect(self.stop_run)
        self.input.regenerate.clicked.connect(self.regenerate)
        self.input.edit_last.clicked.connect(self.edit_last)
        self.input.clear.clicked.connect(self.new_conversation)
        self.input.chat_mode.toggled.connect(lambda _on: self._render_all())
        self.input.show_rejected.toggled.connect(self._toggle_rejected)
        self.input.mark_steps.toggled.connect(self._toggle_steps)
        self.error_label = QtWidgets.QLabel("")
        self.error_label.setStyleSheet("color: #c0392b; font-weight: 600;")
        self.error_label.setWordWrap(True)

        self.legend = QtWidgets.QLabel()  # one wrapping label: it never widens the window
        self.legend.setWordWrap(True)
        self._style_legend(SOURCE_COLOURS)

        self.replay_bar = QtWidgets.QWidget()
        rb = QtWidgets.QHBoxLayout(self.replay_bar)
        rb.setContentsMargins(0, 0, 0, 0)
        self.replay_label = QtWidgets.QLabel("")
        self.replay_label.setWordWrap(True)
        self.replay_label.setTextFormat(Qt.RichText)  # bold through markup: a style sheet would pin its font
        self.replay_speed = QtWidgets.QComboBox()
        for speed in SPEEDS:
            self.replay_speed.addItem(f"{speed:g}×", speed)
        self.replay_speed.setCurrentIndex(SPEEDS.index(1.0))
        self.replay_speed.currentIndexChanged.connect(lambda _i: self.player.set_speed(self.replay_speed.currentData()))
        self.replay_restart = QtWidgets.QPushButton("Restart")
        self.replay_restart.clicked.connect(lambda: self.last_trace is not None and self.play_trace(self.last_trace))
        self.replay_close = QtWidgets.QPushButton("Close replay")
        self.replay_close.clicked.connect(self.close_replay)
        rb.addWidget(self.replay_label, 1)
        rb.addWidget(QtWidgets.QLabel("speed"))
        rb.addWidget(self.replay_speed)
        rb.addWidget(self.replay_restart)
        rb.addWidget(self.replay_close)
        self.replay_bar.setVisible(False)

        centre = QtWidgets.QWidget()
        cl = QtWidgets.QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addWidget(self.replay_bar)
        cl.addWidget(self.legend)
        cl.addWidget(self.stream, 1)
        self.decisions = DecisionStrip()
        self.decisions_box = QtWidgets.QWidget()
        db = QtWidgets.QVBoxLayout(self.decisions_box)
        db.setContentsMargins(0, 0, 0, 0)
        decisions_legend = QtWidgets.QLabel("Auto's steps: " + self.decisions.legend_html()
                                            + " — height: tokens emitted; hover for the step")
        decisions_legend.setStyleSheet("font-size: 9pt;")
        decisions_legend.setWordWrap(True)
        db.addWidget(decisions_legend)
        db.addWidget(self.decisions)
        self.decisions_box.setVisible(False)
        cl.addWidget(self.decisions_box)
        self.conversation_note = QtWidgets.QLabel("")
        self.conversation_note.setWordWrap(True)
        self.conversation_note.setStyleSheet("color: #8a6d00;")
        cl.addWidget(self.conversation_note)
        cl.addWidget(self.error_label)
        cl.addWidget(self.input)
        self.race = RaceView()
        self.race.race_requested.connect(self.start_race)
        self.centre_tabs = QtWidgets.QTabWidget()
        self.centre_tabs.addTab(centre, "Stream")
        self.centre_tabs.addTab(self.race, "Race")
        self.batch_view = BatchView()
        self.batch_view.batch_requested.connect(self.start_batch)
        self.centre_tabs.addTab(self.batch_view, "Batch")

        self.kv_map = KvMapView()
        self.kv_map.set_token_colours(SOURCE_COLOURS)
        self.stats = StatsPanel()
        self.stats.baseline_button.clicked.connect(self.measure_baseline)
        live = QtWidgets.QSplitter(Qt.Vertical)
        live.addWidget(self._titled("KV cache cells", self.kv_map))
        live.addWidget(self._titled("Figures", self.stats))
        live.setSizes([360, 360])

        self.tune = TunePanel()
        self.tune.sweep_requested.connect(self.start_sweep)
        self.tune.stop_requested.connect(self.stop_run)
        self.tune.setting_chosen.connect(self.apply_setting)
        self.profile_plot = ProfilePlot()
        self.profile_label = QtWidgets.QLabel("No batch-cost profile yet: it is measured once per model, "
                                              "context size and thread count.")
        self.profile_label.setWordWrap(True)
        self.remeasure_button = QtWidgets.QPushButton("Re-measure profile")
        self.remeasure_button.setToolTip("Time one decode of 1 to 128 tokens again on this machine (about 20 s)")
        self.remeasure_button.clicked.connect(self.remeasure_profile)
        self.exactness_label = QtWidgets.QLabel("Exactness: not checked on this machine yet.")
        self.exactness_label.setWordWrap(True)
        self.exactness_button = QtWidgets.QPushButton("Check exactness")
        self.exactness_button.setToolTip("Decode a text alone and in batches, in a short and a long context "
                                         "(past 512 cells), and compare the logits (about 10 s)")
        self.exactness_button.clicked.connect(self.check_exactness)
        profile_page = QtWidgets.QWidget()
        pl = QtWidgets.QVBoxLayout(profile_page)
        pl.addWidget(self.profile_plot, 1)
        pl.addWidget(self.profile_label)
        pl.addWidget(self.remeasure_button)
        pl.addWidget(self.exactness_label)
        pl.addWidget(self.exactness_button)

        self.inspector = StepInspector()
        for view in (self.inspector.kv_before, self.inspector.kv_after):
            view.set_token_colours(SOURCE_COLOURS)
        self.inspector.set_record(self.record)
        self.inspector.pause_toggled.connect(self.set_paused)
        self.inspector.forward_requested.connect(self._step_engine)
        right = QtWidgets.QTabWidget()
        right.addTab(live, "Live")
        right.addTab(self.inspector, "Inspect")
        right.addTab(self.tune, "Tune")
        right.currentChanged.connect(lambda _i: right.currentWidget() is self.inspector and self.inspector.refresh())
        right.addTab(profile_page, "Profile")
        self.right_tabs = right

        self.sidebar = ConversationSidebar()
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.open_requested.connect(lambda conv_id: self._conversation_action("open", conv_id))
        self.sidebar.rename_requested.connect(lambda conv_id, title: self.worker.conversation("rename", conv_id, title))
        self.sidebar.delete_requested.connect(lambda conv_id: self._conversation_action("delete", conv_id))
        self.sidebar.search_changed.connect(lambda text: self.worker.conversation("list", text=text))
        self.sidebar.export_requested.connect(self.export_conversation)
        left = QtWidgets.QTabWidget()
        left.addTab(controls_scroll, "Run")
        left.addTab(self.sidebar, "Chats")
        self.left_tabs = left

        self.splitter = QtWidgets.QSplitter(Qt.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.centre_tabs)
        self.splitter.addWidget(right)
        self.splitter.setSizes([340, 620, 520])

        root = QtWidgets.QWidget()
        rl = QtWidgets.QVBoxLayout(root)
        rl.addWidget(self.model_bar)
        rl.addWidget(self.splitter, 1)
        self.setCentralWidget(root)

        self.run_action = QtGui.QAction("Run", self, shortcut=QtGui.QKeySequence("Ctrl+Return"),
                                        triggered=self.start_run)
        self.stop_action = QtGui.QAction("Stop", self, shortcut=QtGui.QKeySequence(Qt.Key_Escape),
                                         triggered=self.stop_run)
        for action in (self.run_action, self.stop_action):
            action.setShortcutContext(Qt.ApplicationShortcut)
            self.addAction(action)
        file_menu = self.menuBar().addMenu("&File")
        file_menu.addAction("New conversation", self.new_conversation, QtGui.QKeySequence("Ctrl+N"))
        file_menu.addAction("Export conversation as Markdown…", lambda: self.export_conversation("markdown"))
        file_menu.addAction("Export conversation as HTML…", lambda: self.export_conversation("html"))
        file_menu.addAction("System message…", self.edit_system_message)
        file_menu.addSeparator()
        file_menu.addAction("Open trace…", self.open_trace_dialog, QtGui.QKeySequence("Ctrl+O"))
        self.demo_menu = file_menu.addMenu("Demo traces")
        self._fill_demo_menu()
        file_menu.addAction("Save run trace…", self.save_trace_dialog, QtGui.QKeySequence("Ctrl+S"))
        export_menu = file_menu.addMenu("Export run")
        export_menu.addAction("Report (one HTML file)…", lambda: self.export_dialog("report"))
        export_menu.addAction("Transcript as HTML…", lambda: self.export_dialog("transcript"))
        export_menu.addAction("Figures as JSON…", lambda: self.export_dialog("figures"))
        export_menu.addAction("KV map as PNG…", lambda: self.export_dialog("kv_png"))
        export_menu.addAction("Plots as PNG…", lambda: self.export_dialog("plots_png"))
        edit_menu = self.menuBar().addMenu("&Edit")
        edit_menu.addAction("Copy conversation as text", self.copy_text)
        edit_menu.addAction("Copy conversation as HTML (with colours)", self.copy_html)
        view_menu = self.menuBar().addMenu("&View")
        self.presentation_action = view_menu.addAction("Presentation mode", self.toggle_presentation,
                                                       QtGui.QKeySequence(Qt.Key_F11))
        self.presentation_action.setCheckable(True)
        self.presentation_action.setShortcutContext(Qt.ApplicationShortcut)
        kv_menu = view_menu.addMenu("KV map colouring")
        for name in ("sequence", "writer", "age"):
            kv_menu.addAction(f"By {name}", lambda n=name: self.kv_map.set_colouring(n))
        run_menu = self.menuBar().addMenu("&Run")
        self.pause_action = run_menu.addAction("Pause / resume", self.toggle_pause)
        self.step_action = run_menu.addAction("Step forward", self.step_forward)
        self.back_action = run_menu.addAction("Step back", self.step_back)
        self.reset_action = run_menu.addAction("Reset", self.reset_demo)
        run_menu.addAction("Race against plain", self.start_race)
        # Presentation keys: active in presentation mode only (elsewhere they are typing)
        self.presentation_keys = [(self.pause_action, Qt.Key_Space), (self.step_action, Qt.Key_Right),
                                  (self.back_action, Qt.Key_Left), (self.reset_action, Qt.Key_R)]
        self.mode_actions = []
        for i, mode in enumerate(MODES[:5]):
            action = QtGui.QAction(f"Mode: {mode}", self, triggered=lambda _c=False, m=mode: self.choose_mode(m))
            action.setShortcut(QtGui.QKeySequence(str(i + 1)))
            action.setEnabled(False)
            self.addAction(action)
            self.mode_actions.append(action)
        theme_menu = view_menu.addMenu("Theme")
        self._theme_group = QtGui.QActionGroup(self)
        for theme in THEMES:
            action = theme_menu.addAction(theme.capitalize(), lambda t=theme: self.set_theme(t))
            action.setCheckable(True)
            action.setData(theme)
            self._theme_group.addAction(action)
        self.training_bar = QtWidgets.QProgressBar()
        self.training_bar.setMaximumWidth(420)
        self.training_bar.setTextVisible(True)
        self.training_bar.hide()
        self.statusBar().addPermanentWidget(self.training_bar)
        self.training = False
        self._distill_summary: str | None = None
        self.statusBar().showMessage("Starting…")
        self._update_buttons()

    @staticmethod
    def _titled(title: str, widget: QtWidgets.QWidget) -> QtWidgets.QWidget:
        box = QtWidgets.QGroupBox(title)
        layout = QtWidgets.QVBoxLayout(box)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(widget)
        return box

    # ------------------------------------------------------------------ settings
    def _restore_settings(self) -> None:
        geometry = self.settings.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1480, 900)
        params = self.settings.value("params")
        if isinstance(params, dict):
            self.controls.set_values(params)
        self.model_bar.threads.setValue(int(self.settings.value("threads", default_threads())))
        self.model_bar.ctx.setValue(int(self.settings.value("n_ctx", DEFAULT_N_CTX)))
        self.input.chat_mode.setChecked(self.settings.value("chat", "true") in (True, "true"))
        self.set_theme(str(self.settings.value("theme", "system")))

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("geometry", self.saveGeometry())
        s.setValue("params", self.controls.values())
        s.setValue("threads", self.model_bar.threads.value())
        s.setValue("n_ctx", self.model_bar.ctx.value())
        s.setValue("chat", self.input.chat_mode.isChecked())
        if self.model_path:
            s.setValue("last_model", self.model_path)
        s.setValue("last_draft", self.draft_path or "")
        s.sync()

    def set_theme(self, theme: str) -> None:
        if theme not in THEMES:
            theme = "system"
        app = QtWidgets.QApplication.instance()
        apply_theme(app, theme)
        for action in self._theme_group.actions():
            action.setChecked(action.data() == theme)
        base = QtWidgets.QApplication.palette().color(QtGui.QPalette.Base)  # the window's follows by event
        self.kv_map.set_background(base)
        self.inspector.set_background(base)
        self.stats.set_background(base)
        self.tune.set_background(base)
        self.profile_plot.setBackground(base)
        self.settings.setValue("theme", theme)
        self._render_all()

    def _recent_models(self) -> list[str]:
        recent = self.settings.value("recent_models", [])
        return [recent] if isinstance(recent, str) else list(recent or [])

    # ------------------------------------------------------------------ models
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

    # ------------------------------------------------------------------ runs
    def run_key(self, text: str, config) -> tuple:
        return (self.model_path, text, bool(self.input.chat_mode.isChecked()), config.max_tokens,
                config.sampling.temperature, config.sampling.seed)

    def _valid_config(self):
        """The next run's config, or None (with the reason shown) if the controls are invalid."""
        error = self.controls.error
        if error:
            self.error_label.setText(error)
            return None
        self.error_label.setText("")
        return self.controls.config()

    def _launch(self, turn: Turn, config, text: str, *, regenerate: bool = False,
                edit_index: int | None = None) -> None:
        self.live = turn
        if not turn.chat:
            self.completion = turn
        self.last_run_key = self.run_key(turn.user, config)
        self.last_run_config = config
        self._begin_run()
        self._render_all()
        self.worker.start_run(config, text, chat=turn.chat, regenerate=regenerate, edit_index=edit_index)

    def _chat_shown(self) -> bool:
        """The stream shows the conversation (not a completion, nor a replayed trace)."""
        return self.input.chat_mode.isChecked() and self.has_chat_template and not self.replaying

    def start_run(self, reuse_last_prompt: bool = False) -> None:
        if self.running or not self.model_loaded or self.player.active:
            return
        if self.replaying:
            self.close_replay()
        text = self.input.text()
        if not text.strip() and reuse_last_prompt and self.live is not None:
            text = self.live.user  # presentation: space runs the last prompt again
        if not text.strip():
            self.error_label.setText("Type a message or a prompt first.")
            return
        config = self._valid_config()
        if config is None:
            return
        chat = self._chat_shown()
        if chat:
            self.input.set_text("")
        edit_index, self.editing_index = (self.editing_index if chat else None), None
        self._launch(Turn(user=text, chat=chat, mode=config.mode), config, text, edit_index=edit_index)

    def _last_user_index(self) -> int | None:
        if self.conversation is None:
            return None
        return max((i for i, m in enumerate(self.conversation.messages) if m.role == "user"), default=None)

    def regenerate(self) -> None:
        index = self._last_user_index()
        if self.running or index is None or not self._chat_shown():
            return
        config = self._valid_config()
        if config is None:
            return
        user = self.conversation.messages[index].content
        self._launch(Turn(user=user, chat=True, mode=config.mode), config, "", regenerate=True)

    def edit_last(self) -> None:
        """Put the last message back in the box: Run replaces it (and the answers after it)."""
        index = self._last_user_index()
        if self.running or index is None:
            return
        self.editing_index = index
        self.input.set_text(self.conversation.messages[index].content)
        self.statusBar().showMessage("Editing your last message: Run replaces it and the answer after it")
        self._update_buttons()

    def new_conversation(self) -> None:
        self._conversation_action("new")
        self.stats.reset()

    def _conversation_action(self, action: str, conv_id: str = "") -> None:
        if self.running:
            return
        self.editing_index = None
        self.worker.conversation(action, conv_id)

    def edit_system_message(self) -> None:
        current = ""
        if self.conversation is not None and self.conversation.messages and \
                self.conversation.messages[0].role == "system":
            current = self.conversation.messages[0].content
        text, ok = QtWidgets.QInputDialog.getMultiLineText(
            self, "System message", "Instructions the model sees before the conversation (empty: none):", current)
        if ok and not self.running:
            self.worker.conversation("system", text=text)

    def export_conversation(self, kind: str) -> None:
        if self.conversation is None or not self.conversation.messages:
            self.statusBar().showMessage("Nothing to export yet")
            return
        suffix = {"markdown": "md", "html": "html"}[kind]
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in self.conversation.title).strip() or "chat"
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export conversation", f"{name}.{suffix}",
                                                        f"{kind.capitalize()} (*.{suffix})")
        if path:
            self.write_export(kind, path)

    def write_export(self, kind: str, path: str) -> None:
        from engine import transcript

        text = transcript.to_markdown(self.conversation) if kind == "markdown" else transcript.to_html(self.conversation)
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            self.error_label.setText(f"Could not write {path}: {exc.strerror or exc}")
            return
        self.statusBar().showMessage(f"Exported to {path}")

    def _begin_run(self) -> None:
        self.controls.mark_applied()  # the config just built from these values is the run's
        self.running = True
        self._pending_rejected.clear()
        self.stats.reset()
        self._run_started_at = time.perf_counter()
        self.statusBar().showMessage("Running…")
        self._update_buttons()

    def stop_run(self) -> None:
        if self.running or self.profiling:
            self.worker.stop()
            self.statusBar().showMessage("Stopping…")
        elif self.loading:  # llama.cpp's load cannot be interrupted: what would follow it is skipped
            self.worker.stop()
            self.statusBar().showMessage("Stopping: the model finishes loading, its profile is skipped…")

    # ------------------------------------------------------------------ tuning
    def start_sweep(self, spec) -> None:
        if self.running or not self.model_loaded:
            return
        if spec.mode == "speculative" and not self.draft_path:
            self.tune.error.setText("A draft-model sweep needs a draft model: choose one in the model bar.")
            return
        self.running = self.sweeping = True
        self.tune.on_requested()
        self.statusBar().showMessage("Sweeping… (Stop ends it after the current run)")
        self._update_buttons()
        self.worker.start_sweep(spec)

    def apply_setting(self, mode: str, setting: dict) -> None:
        """Put a sweep's setting into the run controls; they mark what changed as pending."""
        values = {"mode": mode, **{k: v for k, v in setting.items() if k in ("W", "N", "G", "lookup", "adaptive")}}
        if "k" in setting:
            if int(setting["k"]) == 0:
                values = {"mode": "plain"}
            else:
                values["k"] = int(setting["k"])
        self.controls.set_values(values)
        self.statusBar().showMessage("Run controls set to " + ", ".join(f"{k} {v}" for k, v in values.items())
                                     + " — applies to the next run")

    def remeasure_profile(self) -> None:
        if self.running or self.profiling or not self.model_loaded:
            return
        self.profiling = True
        self._update_buttons()
        self.worker.measure_profile(remeasure=True)

    def check_exactness(self) -> None:
        if self.running or not self.model_loaded:
            return
        self.running = self.checking_exactness = True
        self._update_buttons()
        self.statusBar().showMessage("Checking whether batching changes this model's logits…")
        self.worker.probe_exactness()

    def predicted_speedup(self, stats: dict, mode: str) -> float | None:
        """The cost model's speed-up for a finished run, from the profile and the run's counters."""
        from engine.tuning import cost_model
        from engine.tuning.profile import BatchCostProfile

        if self.profiles["target"] is None:
            return None
        curve = BatchCostProfile.from_dict(self.profiles["target"]).curve
        draft = self.profiles["draft"]
        draft_curve = BatchCostProfile.from_dict(draft).curve if draft is not None else None
        if mode == "speculative" and draft_curve is None:
            return None
        return cost_model.predict_from_stats(stats, curve, mode=mode, draft_curve=draft_curve)

    def measure_baseline(self) -> None:
        if self.running or self.last_run_key is None or not self.model_loaded:
            return
        from engine.config import RunConfig

        # the baseline of the last run: its token budget and sampling, whatever the controls say now,
        # so that it is stored under the key of the run it measures
        config = self.last_run_config
        self.running = True
        self._update_buttons()
        self.statusBar().showMessage("Measuring the plain baseline…")
        self.worker.run_baseline(RunConfig(mode="plain", max_tokens=config.max_tokens, sampling=config.sampling),
                                 self.last_run_key)

    # ------------------------------------------------------------------ rendering
    def _toggle_rejected(self, on: bool) -> None:
        self.stream.show_rejected = on
        self._render_all()

    def _toggle_steps(self, on: bool) -> None:
        self.stream.mark_steps = on
        self._render_all()

    def _render_all(self) -> None:
        if not hasattr(self, "stream"):
            return
        self.stream.clear_stream()
        self.conversation_note.setVisible(self._chat_shown())  # a note about the chat, not a completion
        if self._chat_shown():
            if self.conversation is not None:
                render_conversation(self.stream, self.conversation, self.live if self.running else None)
        elif self.completion is not None:
            render_completion(self.stream, self.completion)
        self.stream.scroll_to_end()

    # ------------------------------------------------------------------ events
    def drain_events(self) -> None:
        events = self.worker.drain()
        if events:
            self._handle_events(events)

    def _handle_events(self, events: list) -> None:
        """Events from the engine thread, or from a replayed trace: drawn the same way."""
        from engine.chat import ConversationChanged
        from engine.events import (KvSnapshot, RejectedDraft, RunFailed, RunFinished, RunStarted, RunWarning,
                                   StepBatch, StepDone)

        for event in events:
            if isinstance(event, (StepDone, StepBatch, KvSnapshot, RunStarted, RunFinished)):
                self.record.add(event)
            if isinstance(event, StepDone):
                self._on_step(event)
            elif isinstance(event, StepBatch):
                pass
            elif isinstance(event, RejectedDraft):
                self._pending_rejected[event.step] = event.texts
            elif isinstance(event, KvSnapshot):
                self._latest_snapshot = event
            elif isinstance(event, RunStarted):
                self._on_started(event)
            elif isinstance(event, RunRequested):
                self.last_run_mode = event.config.mode
            elif isinstance(event, TraceReady):
                self.last_trace = event.trace
            elif isinstance(event, Paused):
                self.inspector.paused_run = True
                self.inspector.refresh()
                self.statusBar().showMessage(f"Paused after step {event.step}: Step decodes one more, "
                                             "Resume runs on")
            elif self._on_batch_event(event):
                pass
            elif self._on_distill_event(event):
                pass
            elif isinstance(event, RaceProgress):
                self.race.on_progress(event.which, event.n_tokens)
            elif isinstance(event, RaceReady):
                self.running = False
                self.race.start(event.plain, event.strategy)
                self.statusBar().showMessage("Race measured: replaying both runs on a common clock")
            elif isinstance(event, RunFinished):
                self._on_finished(event)
            elif isinstance(event, RunWarning):
                self.kv_map.figures.setText("KV map stopped for this run: " + event.message)
                self.statusBar().showMessage("Warning: " + event.message)
            elif isinstance(event, ConversationChanged):
                self._on_conversation(event)
            elif isinstance(event, ConversationList):
                self.sidebar.set_items(event.items, event.current)
                if event.damaged:
                    self.statusBar().showMessage(
                        f"Skipped {len(event.damaged)} damaged conversation file{'s' if len(event.damaged) > 1 else ''}"
                        f" in the data folder: {', '.join(event.damaged[:3])}" + ("…" if len(event.damaged) > 3 else ""))
            elif isinstance(event, RunFailed):
                self.training = False
                self.training_bar.hide()
                self.tune.on_failed()
                self.sweeping = self.profiling = self.checking_exactness = False
                self._on_failed(event.message)
            elif self._on_tuning_event(event):
                pass
            elif isinstance(event, BaselineDone):
                self.running = False
                self.baselines[event.key] = event.tokens_per_second
                if self.last_finished is not None and event.key == self.last_run_key:
                    self.stats.set_speedup(self.last_finished.stats["tokens_per_second"], event.tokens_per_second)
                self.statusBar().showMessage(f"Plain baseline: {event.tokens_per_second:.1f} tok/s")
            else:
                self._on_model_event(event)
        now = time.perf_counter()
        if not self.running or now - self._figures_painted_at >= FIGURES_INTERVAL_S:
            self._figures_painted_at = now
            if self._latest_snapshot is not None:  # only the newest picture is painted
                self.kv_map.set_snapshot(self._latest_snapshot)
                self._latest_snapshot = None
            self.stats.refresh()
            self.decisions.update()
            if self.right_tabs.currentWidget() is self.inspector:  # its pictures cost GUI time the engine needs
                self.inspector.refresh()
        self.stream.scroll_to_end()
        self._update_buttons()

    def _on_started(self, event) -> None:
        """A run (live or replayed) starts: the views learn its shape."""
        config = event.config
        self.last_run_mode = config.get("mode", "plain")
        window = int(config.get("W", 0)) if self.last_run_mode == "lookahead" else 0
        self.kv_map.begin_run(window, event.n_prompt)
        self.decisions.clear()
        self.decisions_box.setVisible(self.last_run_mode == "auto")
        self.inspector.paused_run = False
        self.inspector.set_record(self.record)

    def _on_step(self, event) -> None:
        turn = self.live
        if turn is None:
            return
        acceptance = event.n_accepted / event.n_drafted if event.n_drafted else 0.0
        rejected = self._pending_rejected.pop(event.step, ())
        auto = event.extra.get("auto")
        proposers = auto["proposers"] if auto else ("",) * len(event.tokens)
        runs = [(t.text, t.source, event.step, t.id, acceptance, p if p != "target" else "")
                for t, p in zip(event.tokens, proposers)]
        if auto:
            self.decisions.add(event.step, auto, len(event.tokens))
        self.kv_map.add_tokens(t.source for t in event.tokens)
        if rejected:  # the drafts were tried where the target's own token now stands
            ghosts = [(text, "rejected", event.step, -1, acceptance, "") for text in rejected]
            runs = runs[:-1] + ghosts + runs[-1:]
        for run in runs:
            turn.runs.append(run)
            render_run(self.stream, *run)
        elapsed = self.player.clock if self.replaying else time.perf_counter() - self._run_started_at
        self.stats.add_step(event, elapsed)

    def _on_finished(self, event) -> None:
        self.running = False
        self.inspector.paused_run = False
        self.last_finished = event
        turn = self.live
        if turn is not None:
            turn.stats, turn.finish, turn.text = event.stats, event.finish_reason, event.text
            if turn.chat:
                self._render_all()  # the engine's record of the turn (sent just before) replaces the live one
            else:
                self.stream.append_text("\n" + figures_line(turn.mode, event.stats, event.finish_reason), "meta", 0)
        self.stats.refresh()
        self.stats.finish(event.stats, self.baselines.get(self.last_run_key),
                          self.predicted_speedup(event.stats, self.last_run_mode))
        s = event.stats
        reuse = f" · prompt {s['n_prompt']} tokens, {s['n_prompt_reused']} reused" if s.get("n_prompt_reused") else ""
        self.statusBar().showMessage(
            f"Finished: {event.finish_reason} · {s['n_predict']} tokens at {s['tokens_per_second']:.1f} tok/s{reuse}")

    def _on_conversation(self, event) -> None:
        """The engine's conversation changed: it is what the stream shows."""
        self.conversation = event.view
        if event.note:
            self.statusBar().showMessage(event.note[0].upper() + event.note[1:])
            self.conversation_note.setText(event.note[0].upper() + event.note[1:])
        elif not self.running:
            self.conversation_note.setText("")
        if self._chat_shown() and not (self.running and self.live is not None and self.live.runs):
            self._render_all()  # mid-run the streamed tokens stay; the final view redraws them

    def _on_failed(self, message: str) -> None:
        self.running = False
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

    def _on_tuning_event(self, event) -> bool:
        """Profile and sweep events; False if ``event`` is neither."""
        from engine.tuning import sweep

        if isinstance(event, ProfileStarted):
            self.profiling = self.profiling or event.measuring
            if event.measuring:
                self.statusBar().showMessage(f"Measuring the {event.what}'s batch-cost profile (once for this "
                                             "model, context and thread count; Stop skips it)…")
        elif isinstance(event, ProfileProgress):
            self.statusBar().showMessage(f"Measuring the {event.what}'s batch-cost profile… "
                                         f"{100 * event.fraction:.0f}%")
        elif isinstance(event, ProfileReady):
            self.profiles = {"target": event.target, "draft": event.draft}
            self.profile_plot.set_profiles(event.target, event.draft)
            if event.target is not None:
                c = event.target
                self.profile_label.setText(
                    f"{c['model_name']}: one decode of B tokens costs T(B)/T(1) = "
                    + ", ".join(f"{r:.1f} (B={b})" for b, r in zip(c["sizes"], c["relative_all_logits"])
                                if b in (2, 4, 8, 16, 32, 128))
                    + f". Measured in {c['t_measure_s']:.0f} s; a step wins when it emits more tokens than it costs.")
            self.profiling = False
            self.statusBar().showMessage(event.message or "Batch-cost profile ready")
            if self.last_finished is not None and self.live is not None and self.live.stats is not None:
                self.stats.finish(self.last_finished.stats, self.baselines.get(self.last_run_key),
                                  self.predicted_speedup(self.last_finished.stats, self.last_run_mode))
        elif isinstance(event, SavedSweeps):
            self.tune.set_saved(event.results)
        elif isinstance(event, ExactnessReady):
            self.exactness_label.setText("Exactness: " + event.note)
            self.exactness_label.setToolTip(
                "Largest logit difference, batched against one token at a time: "
                + ", ".join(f"B={b}: {v:.3f}" for b, v in event.result["max_abs_diff_by_batch"].items())
                + f"; past {event.result['long_context']['n_cells']} cells: "
                + ", ".join(f"B={b}: {v:.3f}" for b, v in event.result["long_context"]["max_abs_diff_by_batch"].items()))
            if self.checking_exactness:
                self.running = self.checking_exactness = False
                self.statusBar().showMessage("Exactness checked")
        elif isinstance(event, sweep.SweepStarted):
            self.tune.on_started(event)
        elif isinstance(event, sweep.SweepProgress):
            self.tune.on_progress(event)
        elif isinstance(event, sweep.SweepCell):
            self.tune.on_cell(event)
        elif isinstance(event, sweep.SweepFinished):
            self.tune.on_finished(event)
            self.running = self.sweeping = False
            best = sweep.best_cell(event.result["cells"])
            self.statusBar().showMessage(
                ("Sweep stopped" if event.cancelled else "Sweep done")
                + (f": best {sweep.setting_label(best['setting'])} at {best['measured']:.2f}× plain" if best else ""))
        else:
            return False
        return True

    def _on_model_event(self, event) -> None:
        from engine import catalog

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

    def _update_buttons(self) -> None:
        idle = self.model_loaded and not self.running and not self.player.active
        valid = self.controls.error is None
        self.input.run.setEnabled(idle and valid)
        self.run_action.setEnabled(idle and valid)
        self.input.stop.setEnabled(self.running or self.profiling or self.loading)
        has_message = self._last_user_index() is not None and self._chat_shown()
        self.input.regenerate.setEnabled(idle and has_message)
        self.input.edit_last.setEnabled(idle and has_message)
        self.input.clear.setEnabled(not self.running and self.conversation is not None
                                    and bool(self.conversation.messages))
        self.sidebar.set_busy(self.running)
        self.stats.baseline_button.setEnabled(idle and self.last_finished is not None)
        # a model picked while a profile is measured would queue behind it: the bar waits, and Stop skips it
        self.model_bar.setEnabled(not self.running and not self.profiling)
        self.tune.set_model_ready(idle)
        self.remeasure_button.setEnabled(idle and not self.profiling)
        self.exactness_button.setEnabled(idle)
        self.race.start_button.setEnabled(idle)
        self.batch_view.run_button.setEnabled(idle)

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
