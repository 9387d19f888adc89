"""The main window: the model bar, run controls, the live token stream, the KV-cache map and figures.

``MainWindow`` composes its parts (napari's ``Window``, Anki's ``AnkiQt``): the model
(app/model/window_model.py, Qt-free), the engine worker, the views (app/window/layout.py and
menus.py) and one controller per job (models, chat, runs, tuning, demo, presentation, jobs, and
the gate every job goes through). Each controller writes its own slice of the model; the controls'
enabled states are a subscriber of the model (controls_state.py). The engine runs on
:class:`app.worker.engine_worker.EngineWorker`; the window drains its events from a QTimer and
paints the newest state, so the engine's speed never depends on the window.
"""

from __future__ import annotations

from collections.abc import Callable

from specdec_studio.app.model.window_model import WindowModel
from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
from specdec_studio.app.window import layout, menus
from specdec_studio.app.window.chat import ChatController
from specdec_studio.app.window.controls_state import ControlsState
from specdec_studio.app.window.demo import DemoController
from specdec_studio.app.window.gate import ActivityGate
from specdec_studio.app.window.jobs import JobsController
from specdec_studio.app.window.models import ModelsController
from specdec_studio.app.window.preferences import Preferences
from specdec_studio.app.window.presentation import PresentationController
from specdec_studio.app.window.runs import RunsController
from specdec_studio.app.window.tuning import TuningController
from specdec_studio.app.worker.engine_process import EngineProcess
from specdec_studio.app.worker.engine_worker import EngineWorker
from specdec_studio.engine.events import KvSnapshot, RejectedDraft, RunFinished, RunStarted, StepBatch, StepDone

# On a 2-core machine every millisecond the GUI thread works is taken from llama.cpp's threads (and
# one of them preempted stalls the other at the next barrier): the window drains the engine's events
# at 20 Hz, text streams at that rate, and the plots and the KV map at 4 Hz (runs.FIGURES_INTERVAL_S).
# (tests/bench/gui_overhead.py --chat -n 512: 0.92 of headless speed at 30 and 8 Hz, 0.98 at 20 and 4.)
PAINT_INTERVAL_MS = 50
RECORDED = (StepDone, StepBatch, KvSnapshot, RunStarted, RunFinished)  # what the step inspector's record keeps
# events that change nothing but the stream and the figures
STEP_EVENTS = (StepDone, StepBatch, KvSnapshot, RejectedDraft)


class MainWindow(QtWidgets.QMainWindow):
    def __init__(self, model: str | None = None, *, autoload: bool = True,
                 settings: QtCore.QSettings | None = None) -> None:
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.settings = settings or QtCore.QSettings()
        self.model = WindowModel()
        self.worker: EngineWorker | EngineProcess = EngineWorker(self)
        self.worker.start()
        # the parts: each gets the window (its views, the others' public calls) and the model
        self.gate = ActivityGate(self)
        self.models = ModelsController(self)
        self.chat = ChatController(self)
        self.runs = RunsController(self)
        self.tuning = TuningController(self)
        self.demo = DemoController(self)
        self.presentation = PresentationController(self)
        self.jobs = JobsController(self)
        self.preferences = Preferences(self)
        layout.build(self)
        menus.build(self)
        self.controls_state = ControlsState(self)  # subscribes: every change of the model refreshes the controls
        self._handlers = self._event_handlers()
        self.preferences.restore()
        self._paint_timer = QtCore.QTimer(self)
        self._paint_timer.setInterval(PAINT_INTERVAL_MS)
        self._paint_timer.timeout.connect(self.drain_events)
        self._paint_timer.start()
        self.worker.conversation("start")  # the last conversation reopens
        self.input.focus()  # typing at once goes into the message box
        if autoload:
            wanted = model or self.settings.value("last_model", "default")
            self.models.load_model(wanted)

    def use_engine(self, *, rpc: bool) -> EngineWorker | EngineProcess:
        """The engine that loads a model: this process's engine thread, or, for a model on RPC
        servers, an engine process (app/worker/engine_process.py), which a lost server cannot take
        the window down with. Switching closes the other one and its model."""
        if rpc != isinstance(self.worker, EngineProcess):
            self.worker.shutdown()
            self.worker = EngineProcess(self) if rpc else EngineWorker(self)
            self.worker.start()
            self.worker.conversation("start")  # the conversation on screen, in the new engine
        return self.worker

    # ------------------------------------------------------------------ events
    def _event_handlers(self) -> dict[type, Callable]:
        """Which part draws which event: one table from every part's own, for every event the
        engine thread or a replay sends."""
        table: dict[type, Callable] = {}
        for part in (self.gate, self.models, self.chat, self.runs, self.tuning, self.demo, self.jobs):
            for kind, handler in part.handlers().items():
                assert kind not in table, f"two parts draw {kind.__name__}"
                table[kind] = handler
        return table

    def drain_events(self) -> None:
        events = self.worker.drain()
        if events:
            self.handle_events(events)

    def handle_events(self, events: list) -> None:
        """Events from the engine thread, or from a replayed trace: drawn the same way."""
        stream, record = self.stream, self.runs.record
        try:
            for event in events:
                # a run of step events appends to the stream in one edit (laid out once, not per
                # token); any other event may redraw the stream, so the edit closes before it is handled
                if isinstance(event, STEP_EVENTS):
                    stream.begin_appending()
                else:
                    stream.end_appending()
                if isinstance(event, RECORDED):
                    record.add(event)
                handler = self._handlers.get(type(event))
                if handler is not None:
                    handler(event)
        finally:
            stream.end_appending()
        self.runs.paint_figures()
        stream.scroll_to_end()

    # ------------------------------------------------------------------ the window itself
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
        self.sync_side_panel_actions()

    def sync_side_panel_actions(self) -> None:
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

    def copy_text(self) -> None:
        QtWidgets.QApplication.clipboard().setText(self.stream.toPlainText())

    def copy_html(self) -> None:
        mime = QtCore.QMimeData()
        mime.setHtml(self.stream.toHtml())
        mime.setText(self.stream.toPlainText())
        QtWidgets.QApplication.clipboard().setMimeData(mime)

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.model.presentation.on:
            self.presentation.scale_fonts()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.preferences.save()
        self._paint_timer.stop()
        self.worker.shutdown()
        super().closeEvent(event)
