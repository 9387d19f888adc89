"""The window's widgets, docks, menus and shortcuts, and the settings they persist. A mixin of
:class:`app.main_window.MainWindow`."""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtGui, QtWidgets, Qt
from specdec_studio.app.theme import THEMES, apply_theme
from specdec_studio.app.widgets.batch_view import BatchView
from specdec_studio.app.widgets.chat import ChatInput
from specdec_studio.app.widgets.controls import ControlsPanel
from specdec_studio.app.widgets.conversation_list import ConversationSidebar
from specdec_studio.app.widgets.decision_strip import DecisionStrip
from specdec_studio.app.widgets.kv_map import KvMapView
from specdec_studio.app.widgets.model_picker import ModelBar
from specdec_studio.app.widgets.race_view import RaceView
from specdec_studio.app.widgets.stats_panel import StatsPanel
from specdec_studio.app.widgets.step_inspector import StepInspector
from specdec_studio.app.widgets.sweep_view import ProfilePlot
from specdec_studio.app.widgets.token_stream import SOURCE_COLOURS, TokenStream
from specdec_studio.app.widgets.tune_panel import TunePanel
from specdec_studio.engine.config import DEFAULT_N_CTX, MODES, default_threads
from specdec_studio.engine.records.trace import SPEEDS


class LayoutMixin:
    def _build(self) -> None:
        """The window's widgets, panels and menus; the controls' enabled states last."""
        controls_scroll = self._build_model_bar_and_controls()
        self._build_centre()
        self._build_right_panel()
        self._build_side_panels(controls_scroll)
        self._build_menus()
        self._update_buttons()

    def _build_model_bar_and_controls(self) -> QtWidgets.QScrollArea:
        self.model_bar = ModelBar()
        self.model_bar.load_requested.connect(self.load_model)
        self.model_bar.draft_requested.connect(self.choose_draft)
        self.model_bar.download_requested.connect(self.download_model)
        self.model_bar.fetch_requested.connect(self.fetch_default)
        self.model_bar.demo_requested.connect(self.open_trace)
        self.model_bar.train_draft_requested.connect(self.train_draft)

        self.controls = ControlsPanel()
        self.controls.changed.connect(self._update_buttons)
        controls_scroll = QtWidgets.QScrollArea()
        controls_scroll.setWidget(self.controls)
        controls_scroll.setWidgetResizable(True)
        controls_scroll.setMinimumWidth(250)
        controls_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)  # a narrow panel scrolls, never cuts
        return controls_scroll

    def _build_centre(self) -> None:
        """The stream (legend, replay bar, Auto's decisions, the input) and the Race and Batch tabs."""
        self.stream = TokenStream()
        self.input = ChatInput()
        self.input.submit.connect(self.start_run)
        self.input.stop.clicked.connect(self.stop_run)
        self.input.regenerate.clicked.connect(self.regenerate)
        self.input.edit_last.clicked.connect(self.edit_last)
        self.input.clear.clicked.connect(self.new_conversation)
        self.input.chat_mode.toggled.connect(lambda _on: self._render_all())
        self.input.show_rejected.toggled.connect(self._toggle_rejected)
        self.input.show_tokens.toggled.connect(self._toggle_tokens)
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
        # at the end of a run: every source Auto considered, what it sent, and why one was never sent
        self.auto_sources = QtWidgets.QLabel("")
        self.auto_sources.setObjectName("autoSources")
        self.auto_sources.setStyleSheet("font-size: 9pt;")
        self.auto_sources.setWordWrap(True)
        self.auto_sources.setTextInteractionFlags(QtCore.Qt.TextSelectableByMouse)
        db.addWidget(self.auto_sources)
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
        self.centre_tabs.addTab(self._scrolled(self.race), "Race")
        self.batch_view = BatchView()
        self.batch_view.batch_requested.connect(self.start_batch)
        self.centre_tabs.addTab(self._scrolled(self.batch_view), "Batch")

    def _build_right_panel(self) -> None:
        """The Live (KV map, figures), Inspect, Tune and Profile tabs."""
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
        self.controls.changed.connect(self.update_draft_break_even)  # its sentence is at the controls' k
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
        self.formats_button = QtWidgets.QPushButton("Compare weight formats")
        self.formats_button.setToolTip("Requantise this model to Q4_0, IQ4_NL, Q8_0 and Q4_K_M (once, into the model "
                                       "cache) and measure each copy as this file: one token's decode, every batch "
                                       "size to 16, exactness and agreement with this file (about two minutes)")
        self.formats_button.clicked.connect(lambda: self.compare_formats())
        self.formats_label = QtWidgets.QLabel("Weight formats: not compared on this machine yet.")
        self.formats_label.setWordWrap(True)
        self.formats_label.setTextFormat(Qt.RichText)
        self.copy_choice = QtWidgets.QComboBox()
        self.copy_choice.setToolTip("The copies measured; the recommended one (if any) is chosen first")
        self.load_copy_button = QtWidgets.QPushButton("Load this copy")
        self.load_copy_button.setToolTip("Load the chosen copy as the target (the original stays in the model list)")
        self.load_copy_button.clicked.connect(self.load_chosen_copy)
        self.format_speed_button = QtWidgets.QPushButton("Best mode on each format")
        self.format_speed_button.setToolTip(
            "Run plain, Auto and prompt lookup on this model's original file and on its Q4_0 and IQ4_NL copies "
            "(or the copies compared above), one prompt of each shipped category, and show each mode against plain "
            "on the same file and on the original (about two minutes)")
        self.format_speed_button.clicked.connect(lambda: self.measure_format_speeds())
        self.format_speed_label = QtWidgets.QLabel("")
        self.format_speed_label.setWordWrap(True)
        self.format_speed_label.setTextFormat(Qt.RichText)
        self.format_speed_label.hide()
        profile_page = QtWidgets.QWidget()
        pl = QtWidgets.QVBoxLayout(profile_page)
        pl.addWidget(self.profile_plot, 1)
        pl.addWidget(self.profile_label)
        pl.addWidget(self.remeasure_button)
        pl.addWidget(self.exactness_label)
        pl.addWidget(self.exactness_button)
        pl.addWidget(self.formats_label)
        pl.addWidget(self.formats_button)
        copy_row = QtWidgets.QHBoxLayout()
        copy_row.addWidget(self.copy_choice, 1)
        copy_row.addWidget(self.load_copy_button)
        pl.addLayout(copy_row)
        pl.addWidget(self.format_speed_label)
        pl.addWidget(self.format_speed_button)

        self.inspector = StepInspector()
        for view in (self.inspector.kv_before, self.inspector.kv_after):
            view.set_token_colours(SOURCE_COLOURS)
        self.inspector.set_record(self.record)
        self.inspector.pause_toggled.connect(self.set_paused)
        self.inspector.forward_requested.connect(self._step_engine)
        right = QtWidgets.QTabWidget()
        # each page scrolls: the panel fits a laptop screen however tall or wide its content is
        right.addTab(self._scrolled(live, 300, 420), "Live")
        self.inspector_page = self._scrolled(self.inspector)
        right.addTab(self.inspector_page, "Inspect")
        right.addTab(self._scrolled(self.tune), "Tune")
        right.currentChanged.connect(lambda _i: right.currentWidget() is self.inspector_page
                                     and self.inspector.refresh())
        right.addTab(self._scrolled(profile_page), "Profile")
        self.right_tabs = right

    def _build_side_panels(self, controls_scroll: QtWidgets.QScrollArea) -> None:
        """The Run and Chats tabs, and the splitter that holds the three panels."""
        self.sidebar = ConversationSidebar()
        self.sidebar.new_requested.connect(self.new_conversation)
        self.sidebar.open_requested.connect(lambda conv_id: self._conversation_action("open", conv_id))
        self.sidebar.rename_requested.connect(lambda conv_id, title: self.worker.conversation("rename", conv_id, title))
        self.sidebar.delete_requested.connect(lambda conv_id: self._conversation_action("delete", conv_id))
        self.sidebar.search_changed.connect(lambda text: self.worker.conversation("list", text=text))
        self.sidebar.export_requested.connect(self.export_conversation)
        left = QtWidgets.QTabWidget()
        left.addTab(controls_scroll, "Run")
        left.addTab(self._scrolled(self.sidebar), "Chats")
        self.left_tabs = left

        self.splitter = QtWidgets.QSplitter(Qt.Horizontal)
        self.splitter.addWidget(left)
        self.splitter.addWidget(self.centre_tabs)
        self.splitter.addWidget(self.right_tabs)
        self.splitter.setCollapsible(1, False)  # the conversation never disappears; the side panels may
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([300, 620, 480])

        root = QtWidgets.QWidget()
        rl = QtWidgets.QVBoxLayout(root)
        rl.addWidget(self.model_bar)
        rl.addWidget(self.splitter, 1)
        self.setCentralWidget(root)

    def _build_menus(self) -> None:
        """The menus, the window-wide shortcuts and the status bar."""
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
        self.open_trace_action = file_menu.addAction(
            "Open trace…", self.open_trace_dialog, QtGui.QKeySequence("Ctrl+O")
        )
        self.demo_menu = file_menu.addMenu("Demo traces")
        self._fill_demo_menu()
        file_menu.addAction("Save run trace…", self.save_trace_dialog, QtGui.QKeySequence("Ctrl+S"))
        export_menu = file_menu.addMenu("Export run")
        export_menu.addAction("Report (one HTML file)…", lambda: self.export_dialog("report"))
        export_menu.addAction("Transcript as HTML…", lambda: self.export_dialog("transcript"))
        export_menu.addAction("Figures as JSON…", lambda: self.export_dialog("figures"))
        export_menu.addAction("KV map as PNG…", lambda: self.export_dialog("kv_png"))
        export_menu.addAction("Plots as PNG…", lambda: self.export_dialog("plots_png"))
        export_menu.addAction("Video (MP4 or GIF)…", self.export_video_dialog)
        edit_menu = self.menuBar().addMenu("&Edit")
        edit_menu.addAction("Copy conversation as text", self.copy_text)
        edit_menu.addAction("Copy conversation as HTML (with colours)", self.copy_html)
        view_menu = self.menuBar().addMenu("&View")
        self.presentation_action = view_menu.addAction("Presentation mode", self.toggle_presentation,
                                                       QtGui.QKeySequence(Qt.Key_F11))
        self.presentation_action.setCheckable(True)
        self.presentation_action.setShortcutContext(Qt.ApplicationShortcut)
        tokens_action = view_menu.addAction("Show tokens", lambda: self.input.show_tokens.toggle(),
                                            QtGui.QKeySequence("Ctrl+T"))
        tokens_action.setToolTip(self.input.show_tokens.toolTip())
        # a token's tooltip explains it (the target's top 8, the proposal, the verdict) at 0.2-0.4 ms
        # of host time a token: where steps take a millisecond (a GPU) that is worth turning off
        self.explain_action = view_menu.addAction("Explain tokens in tooltips")
        self.explain_action.setCheckable(True)
        self.explain_action.setChecked(True)
        self.explain_action.setToolTip("Record why each token was chosen (the target's top 8, the proposal, the "
                                       "verdict in numbers): 0.2-0.4 ms of host time a token, applied to the next run")
        self.side_panel_actions = []
        for name, index, key in (("Run and chats panel", 0, "Ctrl+1"), ("Live panel", 2, "Ctrl+2")):
            action = view_menu.addAction(name, lambda on, i=index: self.show_side_panel(i, on),
                                         QtGui.QKeySequence(key))
            action.setCheckable(True)
            action.setChecked(True)
            self.side_panel_actions.append(action)
        self.splitter.splitterMoved.connect(lambda *_: self._sync_side_panel_actions())
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
        self.statusBar().showMessage("Starting…")

    @staticmethod
    def _scrolled(widget: QtWidgets.QWidget, min_width: int = 0, min_height: int = 0) -> QtWidgets.QScrollArea:
        """``widget`` in a scroll area that resizes it: it fills the panel when there is room and
        scrolls when there is not, so its own minimum never sets the window's."""
        area = QtWidgets.QScrollArea()
        area.setWidget(widget)
        area.setWidgetResizable(True)
        area.setFrameShape(QtWidgets.QFrame.NoFrame)
        widget.setMinimumSize(min_width, min_height)
        return area

    def show_side_panel(self, index: int, on: bool) -> None:
        """Show or hide a side panel (View menu): a small screen gives the conversation the room."""
        sizes = self.splitter.sizes()
        widget = self.splitter.widget(index)
        if on and sizes[index] == 0:
            widget.show()
            sizes[index] = max(240, widget.minimumSizeHint().width())
            sizes[1] = max(300, sizes[1] - sizes[index])
            self.splitter.setSizes(sizes)
        elif not on:
            widget.hide()
        widget.setVisible(on)
        self._sync_side_panel_actions()

    def _sync_side_panel_actions(self) -> None:
        sizes = self.splitter.sizes()
        for action, index in zip(self.side_panel_actions, (0, 2)):
            action.setChecked(self.splitter.widget(index).isVisible() and sizes[index] > 0)

    def fit_to_screen(self, available: QtCore.QRect | None = None) -> None:
        """Never larger than the screen's available area (a restored size from a larger screen
        is shrunk to it), and on it."""
        if available is None:
            screen = self.screen() or QtGui.QGuiApplication.primaryScreen()
            available = screen.availableGeometry()
        frame = self.frameGeometry().size() - self.geometry().size()  # the window manager's decoration
        width = min(self.width(), available.width() - frame.width())
        height = min(self.height(), available.height() - frame.height())
        self.resize(max(width, self.minimumSizeHint().width()), max(height, self.minimumSizeHint().height()))
        x = min(max(self.x(), available.left()), available.right() - self.frameGeometry().width() + 1)
        y = min(max(self.y(), available.top()), available.bottom() - self.frameGeometry().height() + 1)
        self.move(max(x, available.left()), max(y, available.top()))

    @staticmethod
    def _titled(title: str, widget: QtWidgets.QWidget) -> QtWidgets.QWidget:
        box = QtWidgets.QGroupBox(title)
        layout = QtWidgets.QVBoxLayout(box)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(widget)
        return box

    def _restore_settings(self) -> None:
        geometry = self.settings.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1480, 900)
        self.fit_to_screen()
        splitter = self.settings.value("splitter")
        if splitter is not None:
            self.splitter.restoreState(splitter)
            for index in (0, 2):
                self.splitter.widget(index).setVisible(self.splitter.sizes()[index] > 0)
            self._sync_side_panel_actions()
        params = self.settings.value("params")
        if isinstance(params, dict):
            self.controls.set_values(params)
        self.model_bar.threads.setValue(int(self.settings.value("threads", default_threads())))
        self.model_bar.ctx.setValue(int(self.settings.value("n_ctx", DEFAULT_N_CTX)))
        self.model_bar.gpu_layers.setValue(int(self.settings.value("gpu_layers", 0)))
        self.model_bar.draft_gpu_layers.setValue(int(self.settings.value("draft_gpu_layers", 0)))
        self.input.chat_mode.setChecked(self.settings.value("chat", "true") in (True, "true"))
        self.input.show_tokens.setChecked(self.settings.value("show_tokens", "false") in (True, "true"))
        self.explain_action.setChecked(self.settings.value("explain_tokens", "true") in (True, "true"))
        self.set_theme(str(self.settings.value("theme", "system")))

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("geometry", self.saveGeometry())
        s.setValue("splitter", self.splitter.saveState())
        s.setValue("params", self.controls.values())
        s.setValue("threads", self.model_bar.threads.value())
        s.setValue("n_ctx", self.model_bar.ctx.value())
        s.setValue("gpu_layers", self.model_bar.gpu_layers.value())
        s.setValue("draft_gpu_layers", self.model_bar.draft_gpu_layers.value())
        s.setValue("chat", self.input.chat_mode.isChecked())
        s.setValue("show_tokens", self.input.show_tokens.isChecked())
        s.setValue("explain_tokens", self.explain_action.isChecked())
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
