"""The window's menus, its window-wide shortcuts (Run, Stop, the presentation keys, the mode
keys) and its status bar."""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdec_studio.app.qt import QtGui, QtWidgets, Qt
from specdec_studio.app.theme import THEMES
from specdec_studio.engine.config import MODES

if TYPE_CHECKING:
    from specdec_studio.app.window.main_window import MainWindow


def build(window: MainWindow) -> None:
    """The menus, the window-wide shortcuts and the status bar; the mode keys work in presentation
    mode only (elsewhere the number keys are typing)."""
    window.run_action = QtGui.QAction("Run", window, shortcut=QtGui.QKeySequence("Ctrl+Return"),
                                    triggered=window.runs.start_run)
    window.stop_action = QtGui.QAction("Stop", window, shortcut=QtGui.QKeySequence(Qt.Key_Escape),
                                     triggered=window.gate.stop)
    for action in (window.run_action, window.stop_action):
        action.setShortcutContext(Qt.ApplicationShortcut)
        window.addAction(action)
    file_menu = window.menuBar().addMenu("&File")
    file_menu.addAction("New conversation", window.chat.new_conversation, QtGui.QKeySequence("Ctrl+N"))
    file_menu.addAction("Export conversation as Markdown…", lambda: window.chat.export_dialog("markdown"))
    file_menu.addAction("Export conversation as HTML…", lambda: window.chat.export_dialog("html"))
    file_menu.addAction("System message…", window.chat.edit_system_message)
    file_menu.addSeparator()
    window.open_trace_action = file_menu.addAction(
        "Open trace…", window.demo.open_trace_dialog, QtGui.QKeySequence("Ctrl+O")
    )
    window.demo_menu = file_menu.addMenu("Demo traces")
    window.demo.fill_demo_menu()
    file_menu.addAction("Save run trace…", window.demo.save_trace_dialog, QtGui.QKeySequence("Ctrl+S"))
    export_menu = file_menu.addMenu("Export run")
    export_menu.addAction("Report (one HTML file)…", lambda: window.demo.export_dialog("report"))
    export_menu.addAction("Transcript as HTML…", lambda: window.demo.export_dialog("transcript"))
    export_menu.addAction("Figures as JSON…", lambda: window.demo.export_dialog("figures"))
    export_menu.addAction("KV map as PNG…", lambda: window.demo.export_dialog("kv_png"))
    export_menu.addAction("Plots as PNG…", lambda: window.demo.export_dialog("plots_png"))
    export_menu.addAction("Video (MP4 or GIF)…", window.demo.export_video_dialog)
    edit_menu = window.menuBar().addMenu("&Edit")
    edit_menu.addAction("Copy conversation as text", window.copy_text)
    edit_menu.addAction("Copy conversation as HTML (with colours)", window.copy_html)
    view_menu = window.menuBar().addMenu("&View")
    window.presentation_action = view_menu.addAction("Presentation mode", window.presentation.toggle,
                                                   QtGui.QKeySequence(Qt.Key_F11))
    window.presentation_action.setCheckable(True)
    window.presentation_action.setShortcutContext(Qt.ApplicationShortcut)
    tokens_action = view_menu.addAction("Show tokens", lambda: window.input.show_tokens.toggle(),
                                        QtGui.QKeySequence("Ctrl+T"))
    tokens_action.setToolTip(window.input.show_tokens.toolTip())
    # a token's tooltip explains it (the target's top 8, the proposal, the verdict) at 0.2-0.4 ms
    # of host time a token: where steps take a millisecond (a GPU) that is worth turning off
    window.explain_action = view_menu.addAction("Explain tokens in tooltips")
    window.explain_action.setCheckable(True)
    window.explain_action.setChecked(True)
    window.explain_action.setToolTip("Record why each token was chosen (the target's top 8, the proposal, the "
                                   "verdict in numbers): 0.2-0.4 ms of host time a token, applied to the next run")
    window.side_panel_actions = []
    for name, index, key in (("Run and chats panel", 0, "Ctrl+1"), ("Live panel", 2, "Ctrl+2")):
        action = view_menu.addAction(name, lambda on, i=index: window.show_side_panel(i, on),
                                     QtGui.QKeySequence(key))
        action.setCheckable(True)
        action.setChecked(True)
        window.side_panel_actions.append(action)
    window.splitter.splitterMoved.connect(lambda *_: window.sync_side_panel_actions())
    kv_menu = view_menu.addMenu("KV map colouring")
    for name in ("sequence", "writer", "age"):
        kv_menu.addAction(f"By {name}", lambda n=name: window.kv_map.set_colouring(n))
    run_menu = window.menuBar().addMenu("&Run")
    window.pause_action = run_menu.addAction("Pause / resume", window.demo.toggle_pause)
    window.step_action = run_menu.addAction("Step forward", window.demo.step_forward)
    window.back_action = run_menu.addAction("Step back", window.demo.step_back)
    window.reset_action = run_menu.addAction("Reset", window.demo.reset)
    run_menu.addAction("Race against plain", window.jobs.start_race)
    # Presentation keys: active in presentation mode only (elsewhere they are typing)
    window.presentation_keys = [(window.pause_action, Qt.Key_Space), (window.step_action, Qt.Key_Right),
                              (window.back_action, Qt.Key_Left), (window.reset_action, Qt.Key_R)]
    window.mode_actions = []
    for i, mode in enumerate(MODES[:5]):
        action = QtGui.QAction(f"Mode: {mode}", window, triggered=lambda _c=False, m=mode: window.demo.choose_mode(m))
        action.setShortcut(QtGui.QKeySequence(str(i + 1)))
        window.addAction(action)
        window.mode_actions.append(action)
    theme_menu = view_menu.addMenu("Theme")
    window.theme_group = QtGui.QActionGroup(window)
    for theme in THEMES:
        action = theme_menu.addAction(theme.capitalize(), lambda t=theme: window.preferences.set_theme(t))
        action.setCheckable(True)
        action.setData(theme)
        window.theme_group.addAction(action)
    window.training_bar = QtWidgets.QProgressBar()
    window.training_bar.setMaximumWidth(420)
    window.training_bar.setTextVisible(True)
    window.training_bar.hide()
    window.statusBar().addPermanentWidget(window.training_bar)
    window.statusBar().showMessage("Starting…")
