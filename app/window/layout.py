"""The window's widgets and panels, and which part of the window each one's signals reach. The
views are the window's attributes (``window.stream``, ``window.kv_map``, …); the parts that drive
them are its controllers (app/window/*.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_studio.app.qt import QtCore, QtWidgets, Qt
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
from specdec_studio.engine.records.trace import SPEEDS

if TYPE_CHECKING:
    from specdec_studio.app.window.main_window import MainWindow


def build(window: MainWindow) -> None:
    """The model bar, the Run and Chats tabs, the stream with its Race and Batch tabs, and the
    Live, Inspect, Tune and Profile tabs, in one splitter."""
    controls_scroll = _model_bar_and_controls(window)
    _centre(window)
    _right_panel(window)
    _side_panels(window, controls_scroll)


def _model_bar_and_controls(window: MainWindow) -> QtWidgets.QScrollArea:
    window.model_bar = ModelBar()
    window.model_bar.load_requested.connect(window.models.load_model)
    window.model_bar.draft_requested.connect(window.models.choose_draft)
    window.model_bar.download_requested.connect(window.models.download_model)
    window.model_bar.fetch_requested.connect(window.models.fetch_default)
    window.model_bar.demo_requested.connect(window.demo.open_trace)
    window.model_bar.train_draft_requested.connect(window.jobs.train_draft)

    window.controls = ControlsPanel()
    controls_scroll = QtWidgets.QScrollArea()
    controls_scroll.setWidget(window.controls)
    controls_scroll.setWidgetResizable(True)
    controls_scroll.setMinimumWidth(250)
    controls_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAsNeeded)  # a narrow panel scrolls, never cuts
    return controls_scroll


def _centre(window: MainWindow) -> None:
    """The stream (legend, replay bar, Auto's decisions, the input) and the Race and Batch tabs."""
    window.stream = TokenStream()
    window.input = ChatInput()
    window.input.submit.connect(window.runs.start_run)
    window.input.stop.clicked.connect(window.gate.stop)
    window.input.regenerate.clicked.connect(window.chat.regenerate)
    window.input.edit_last.clicked.connect(window.chat.edit_last)
    window.input.clear.clicked.connect(window.chat.new_conversation)
    window.input.chat_mode.toggled.connect(lambda _on: window.runs.render())
    window.input.show_rejected.toggled.connect(window.runs.set_show_rejected)
    window.input.show_tokens.toggled.connect(window.runs.set_show_tokens)
    window.input.mark_steps.toggled.connect(window.runs.set_mark_steps)
    window.error_label = QtWidgets.QLabel("")
    window.error_label.setStyleSheet("color: #c0392b; font-weight: 600;")
    window.error_label.setWordWrap(True)

    window.legend = QtWidgets.QLabel()  # one wrapping label: it never widens the window
    window.legend.setWordWrap(True)
    window.presentation.style_legend(SOURCE_COLOURS)

    window.replay_bar = QtWidgets.QWidget()
    rb = QtWidgets.QHBoxLayout(window.replay_bar)
    rb.setContentsMargins(0, 0, 0, 0)
    window.replay_label = QtWidgets.QLabel("")
    window.replay_label.setWordWrap(True)
    window.replay_label.setTextFormat(Qt.RichText)  # bold through markup: a style sheet would pin its font
    window.replay_speed = QtWidgets.QComboBox()
    for speed in SPEEDS:
        window.replay_speed.addItem(f"{speed:g}×", speed)
    window.replay_speed.setCurrentIndex(SPEEDS.index(1.0))
    window.replay_speed.currentIndexChanged.connect(
        lambda _i: window.demo.player.set_speed(window.replay_speed.currentData()))
    window.replay_restart = QtWidgets.QPushButton("Restart")
    window.replay_restart.clicked.connect(window.demo.replay_again)
    window.replay_close = QtWidgets.QPushButton("Close replay")
    window.replay_close.clicked.connect(window.demo.close_replay)
    rb.addWidget(window.replay_label, 1)
    rb.addWidget(QtWidgets.QLabel("speed"))
    rb.addWidget(window.replay_speed)
    rb.addWidget(window.replay_restart)
    rb.addWidget(window.replay_close)
    window.replay_bar.setVisible(False)

    centre = QtWidgets.QWidget()
    cl = QtWidgets.QVBoxLayout(centre)
    cl.setContentsMargins(0, 0, 0, 0)
    cl.addWidget(window.replay_bar)
    cl.addWidget(window.legend)
    cl.addWidget(window.stream, 1)
    window.decisions = DecisionStrip()
    window.decisions_box = QtWidgets.QWidget()
    db = QtWidgets.QVBoxLayout(window.decisions_box)
    db.setContentsMargins(0, 0, 0, 0)
    decisions_legend = QtWidgets.QLabel("Auto's steps: " + window.decisions.legend_html()
                                        + " — height: tokens emitted; hover for the step")
    decisions_legend.setStyleSheet("font-size: 9pt;")
    decisions_legend.setWordWrap(True)
    db.addWidget(decisions_legend)
    db.addWidget(window.decisions)
    # at the end of a run: every source Auto considered, what it sent, and why one was never sent
    window.auto_sources = QtWidgets.QLabel("")
    window.auto_sources.setObjectName("autoSources")
    window.auto_sources.setStyleSheet("font-size: 9pt;")
    window.auto_sources.setWordWrap(True)
    window.auto_sources.setTextInteractionFlags(QtCore.Qt.TextSelectableByMouse)
    db.addWidget(window.auto_sources)
    window.decisions_box.setVisible(False)
    cl.addWidget(window.decisions_box)
    window.conversation_note = QtWidgets.QLabel("")
    window.conversation_note.setWordWrap(True)
    window.conversation_note.setStyleSheet("color: #8a6d00;")
    cl.addWidget(window.conversation_note)
    cl.addWidget(window.error_label)
    cl.addWidget(window.input)
    window.race = RaceView()
    window.race.race_requested.connect(window.jobs.start_race)
    window.centre_tabs = QtWidgets.QTabWidget()
    window.centre_tabs.addTab(centre, "Stream")
    window.centre_tabs.addTab(_scrolled(window.race), "Race")
    window.batch_view = BatchView()
    window.batch_view.batch_requested.connect(window.jobs.start_batch)
    window.batch_view.serve_requested.connect(window.jobs.start_serving)
    window.batch_view.stop_requested.connect(window.jobs.stop_request)
    window.centre_tabs.addTab(_scrolled(window.batch_view), "Batch")


def _right_panel(window: MainWindow) -> None:
    """The Live (KV map, figures), Inspect, Tune and Profile tabs."""
    window.kv_map = KvMapView()
    window.kv_map.set_token_colours(SOURCE_COLOURS)
    window.stats = StatsPanel()
    window.stats.baseline_button.clicked.connect(window.tuning.measure_baseline)
    live = QtWidgets.QSplitter(Qt.Vertical)
    live.addWidget(_titled("KV cache cells", window.kv_map))
    live.addWidget(_titled("Figures", window.stats))
    live.setSizes([360, 360])

    window.tune = TunePanel()
    window.tune.sweep_requested.connect(window.tuning.start_sweep)
    window.tune.stop_requested.connect(window.gate.stop)
    window.tune.setting_chosen.connect(window.tuning.apply_setting)
    window.controls.changed.connect(window.tuning.update_draft_break_even)  # its sentence is at the controls' k
    window.profile_plot = ProfilePlot()
    window.profile_label = QtWidgets.QLabel("No batch-cost profile yet: it is measured once per model, "
                                          "context size and thread count.")
    window.profile_label.setWordWrap(True)
    window.remeasure_button = QtWidgets.QPushButton("Re-measure profile")
    window.remeasure_button.setToolTip("Time one decode of 1 to 128 tokens again on this machine (about 20 s)")
    window.remeasure_button.clicked.connect(window.tuning.remeasure_profile)
    window.exactness_label = QtWidgets.QLabel("Exactness: not checked on this machine yet.")
    window.exactness_label.setWordWrap(True)
    window.exactness_button = QtWidgets.QPushButton("Check exactness")
    window.exactness_button.setToolTip("Decode a text alone and in batches, in a short and a long context "
                                     "(past 512 cells), and compare the logits (about 10 s)")
    window.exactness_button.clicked.connect(window.tuning.check_exactness)
    window.formats_button = QtWidgets.QPushButton("Compare weight formats")
    window.formats_button.setToolTip("Requantise this model to Q4_0, IQ4_NL, Q8_0 and Q4_K_M (once, into the model "
                                   "cache) and measure each copy as this file: one token's decode, every batch "
                                   "size to 16, exactness and agreement with this file (about two minutes)")
    window.formats_button.clicked.connect(lambda: window.tuning.compare_formats())
    window.formats_label = QtWidgets.QLabel("Weight formats: not compared on this machine yet.")
    window.formats_label.setWordWrap(True)
    window.formats_label.setTextFormat(Qt.RichText)
    window.copy_choice = QtWidgets.QComboBox()
    window.copy_choice.setToolTip("The copies measured; the recommended one (if any) is chosen first")
    window.load_copy_button = QtWidgets.QPushButton("Load this copy")
    window.load_copy_button.setToolTip("Load the chosen copy as the target (the original stays in the model list)")
    window.load_copy_button.clicked.connect(window.tuning.load_chosen_copy)
    window.format_speed_button = QtWidgets.QPushButton("Best mode on each format")
    window.format_speed_button.setToolTip(
        "Run plain, Auto and prompt lookup on this model's original file and on its Q4_0 and IQ4_NL copies "
        "(or the copies compared above), one prompt of each shipped category, and show each mode against plain "
        "on the same file and on the original (about two minutes)")
    window.format_speed_button.clicked.connect(lambda: window.tuning.measure_format_speeds())
    window.format_speed_label = QtWidgets.QLabel("")
    window.format_speed_label.setWordWrap(True)
    window.format_speed_label.setTextFormat(Qt.RichText)
    window.format_speed_label.hide()
    profile_page = QtWidgets.QWidget()
    pl = QtWidgets.QVBoxLayout(profile_page)
    pl.addWidget(window.profile_plot, 1)
    pl.addWidget(window.profile_label)
    pl.addWidget(window.remeasure_button)
    pl.addWidget(window.exactness_label)
    pl.addWidget(window.exactness_button)
    pl.addWidget(window.formats_label)
    pl.addWidget(window.formats_button)
    copy_row = QtWidgets.QHBoxLayout()
    copy_row.addWidget(window.copy_choice, 1)
    copy_row.addWidget(window.load_copy_button)
    pl.addLayout(copy_row)
    pl.addWidget(window.format_speed_label)
    pl.addWidget(window.format_speed_button)

    window.inspector = StepInspector()
    for view in (window.inspector.kv_before, window.inspector.kv_after):
        view.set_token_colours(SOURCE_COLOURS)
    window.inspector.set_record(window.runs.record)
    window.inspector.pause_toggled.connect(window.demo.set_paused)
    window.inspector.forward_requested.connect(window.demo.step_engine)
    right = QtWidgets.QTabWidget()
    # each page scrolls: the panel fits a laptop screen however tall or wide its content is
    right.addTab(_scrolled(live, 300, 420), "Live")
    window.inspector_page = _scrolled(window.inspector)
    right.addTab(window.inspector_page, "Inspect")
    right.addTab(_scrolled(window.tune), "Tune")
    right.currentChanged.connect(lambda _i: right.currentWidget() is window.inspector_page
                                 and window.inspector.refresh())
    right.addTab(_scrolled(profile_page), "Profile")
    window.right_tabs = right


def _side_panels(window: MainWindow, controls_scroll: QtWidgets.QScrollArea) -> None:
    """The Run and Chats tabs, and the splitter that holds the three panels."""
    window.sidebar = ConversationSidebar()
    window.sidebar.new_requested.connect(window.chat.new_conversation)
    window.sidebar.open_requested.connect(lambda conv_id: window.chat.act("open", conv_id))
    window.sidebar.rename_requested.connect(window.chat.rename)
    window.sidebar.delete_requested.connect(lambda conv_id: window.chat.act("delete", conv_id))
    window.sidebar.search_changed.connect(window.chat.search)
    window.sidebar.export_requested.connect(window.chat.export_dialog)
    left = QtWidgets.QTabWidget()
    left.addTab(controls_scroll, "Run")
    left.addTab(_scrolled(window.sidebar), "Chats")
    window.left_tabs = left

    window.splitter = QtWidgets.QSplitter(Qt.Horizontal)
    window.splitter.addWidget(left)
    window.splitter.addWidget(window.centre_tabs)
    window.splitter.addWidget(window.right_tabs)
    window.splitter.setCollapsible(1, False)  # the conversation never disappears; the side panels may
    window.splitter.setStretchFactor(1, 1)
    window.splitter.setSizes([300, 620, 480])

    root = QtWidgets.QWidget()
    rl = QtWidgets.QVBoxLayout(root)
    rl.addWidget(window.model_bar)
    rl.addWidget(window.splitter, 1)
    window.setCentralWidget(root)


def _scrolled(widget: QtWidgets.QWidget, min_width: int = 0, min_height: int = 0) -> QtWidgets.QScrollArea:
    """``widget`` in a scroll area that resizes it: it fills the panel when there is room and
    scrolls when there is not, so its own minimum never sets the window's."""
    area = QtWidgets.QScrollArea()
    area.setWidget(widget)
    area.setWidgetResizable(True)
    area.setFrameShape(QtWidgets.QFrame.NoFrame)
    widget.setMinimumSize(min_width, min_height)
    return area


def _titled(title: str, widget: QtWidgets.QWidget) -> QtWidgets.QWidget:
    box = QtWidgets.QGroupBox(title)
    layout = QtWidgets.QVBoxLayout(box)
    layout.setContentsMargins(6, 6, 6, 6)
    layout.addWidget(widget)
    return box
