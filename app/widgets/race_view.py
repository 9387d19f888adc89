"""The race: plain decoding and the chosen strategy on the same prompt, side by side.

The two runs are measured one after the other on this machine (never two contexts fighting for
the same cores) and then replayed on one common clock at their true relative speeds, so the
figure shown is the measured speed-up, not a guess. The label says so.
"""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtWidgets, Qt
from specdec_studio.app.replay import TracePlayer
from specdec_studio.app.widgets.stream_lane import StreamLane
from specdec_studio.engine.events import RejectedDraft, RunFinished, StepDone
from specdec_studio.engine.records.trace import SPEEDS

HONEST_NOTE = ("Measured one after the other on this machine, then replayed side by side on a common clock "
               "at their recorded speeds.")


class RaceLane(StreamLane):
    def __init__(self, title: str, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(title, title_scale=1.3, parent=parent)
        self.reset()

    def reset(self) -> None:
        self.stream.clear_stream()
        self.n_tokens = 0
        self.n_steps = 0
        self.finished: RunFinished | None = None
        self.counters.setText("")

    def add(self, events: list, clock: float) -> None:
        for event in events:
            if isinstance(event, StepDone):
                self.n_steps += 1
                self.n_tokens += len(event.tokens)
                self.append_step(event)
            elif isinstance(event, RunFinished):
                self.finished = event
            elif isinstance(event, RejectedDraft):
                pass  # the race shows what each side emitted
        self.show_counters(clock)
        self.stream.scroll_to_end()

    def rate(self, clock: float) -> float:
        if self.finished is not None:
            return float(self.finished.stats["tokens_per_second"])
        return self.n_tokens / clock if clock > 0 else 0.0

    def show_counters(self, clock: float) -> None:
        done = " · done" if self.finished is not None else ""
        self.counters.setText(f"{self.n_tokens} tokens · {self.n_steps} steps · "
                              f"{self.n_tokens / max(self.n_steps, 1):.2f} tokens/step · {self.rate(clock):.1f} tok/s"
                              + done)


class RaceView(QtWidgets.QWidget):
    race_requested = QtCore.Signal()

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.player = TracePlayer(self)
        self.player.events.connect(self._on_events)
        self.player.finished.connect(self._on_finished)
        self.start_button = QtWidgets.QPushButton("Race plain against the chosen mode")
        self.start_button.setToolTip("Run the prompt with plain decoding, then with the mode in the controls, "
                                     "and replay both side by side")
        self.start_button.clicked.connect(self.race_requested)
        self.replay_button = QtWidgets.QPushButton("Replay")
        self.replay_button.clicked.connect(self.replay)
        self.speed = QtWidgets.QComboBox()
        for s in SPEEDS:
            self.speed.addItem(f"{s:g}×", s)
        self.speed.setCurrentIndex(SPEEDS.index(1.0))
        self.speed.currentIndexChanged.connect(lambda _i: self.player.set_speed(self.speed.currentData()))
        self.speedup = QtWidgets.QLabel("")
        font = self.speedup.font()
        font.setPointSizeF(font.pointSizeF() * 2.0)
        font.setBold(True)
        self.speedup.setFont(font)
        self.status = QtWidgets.QLabel("Type a prompt, choose a mode, and race it against plain decoding.")
        self.status.setWordWrap(True)
        note = QtWidgets.QLabel(HONEST_NOTE)
        note.setWordWrap(True)
        note.setStyleSheet("color: #8a8f98;")
        self.note = note
        bar = QtWidgets.QHBoxLayout()
        bar.addWidget(self.start_button)
        bar.addWidget(self.replay_button)
        bar.addWidget(QtWidgets.QLabel("speed"))
        bar.addWidget(self.speed)
        bar.addStretch(1)
        bar.addWidget(self.speedup)
        self.left = RaceLane("plain")
        self.right = RaceLane("strategy")
        lanes = QtWidgets.QSplitter(Qt.Horizontal)
        lanes.addWidget(self.left)
        lanes.addWidget(self.right)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(bar)
        layout.addWidget(self.status)
        layout.addWidget(lanes, 1)
        layout.addWidget(note)
        self.traces: tuple | None = None
        self.replay_button.setEnabled(False)

    def on_progress(self, which: str, n_tokens: int) -> None:
        self.status.setText(f"Measuring {which}: {n_tokens} tokens… (the runs take turns; the replay follows)")

    def start(self, plain, strategy) -> None:
        """Both runs are recorded: replay them from the start on one clock."""
        self.traces = (plain, strategy)
        self.replay_button.setEnabled(True)
        self.replay()

    def replay(self) -> None:
        if self.traces is None:
            return
        plain, strategy = self.traces
        self.left.reset()
        self.right.reset()
        self.left.title.setText("plain")
        self.right.title.setText(strategy.config.get("mode", "strategy"))
        self.status.setText(f"Racing: {plain.finished.stats['n_predict'] if plain.finished else '?'} tokens each · "
                            f"{strategy.header.get('model', {}).get('name', '')}")
        self.speedup.setText("")
        self.player.play([plain, strategy], self.speed.currentData())

    def _on_events(self, lane: int, events: list) -> None:
        clock = self.player.clock
        (self.left if lane == 0 else self.right).add(events, clock)
        self.left.show_counters(clock)
        self.right.show_counters(clock)
        self._show_speedup(clock)

    def _show_speedup(self, clock: float) -> None:
        plain, other = self.left.rate(clock), self.right.rate(clock)
        if plain > 0 and other > 0:
            self.speedup.setText(f"{other / plain:.2f}× plain")

    def _on_finished(self) -> None:
        self.left.show_counters(self.player.clock)
        self.right.show_counters(self.player.clock)
        self._show_speedup(self.player.clock)
        self.status.setText(self.status.text() + " · finished")

    def set_font_scale(self, scale: float) -> None:
        for lane in (self.left, self.right):
            font = lane.stream.font()
            font.setPointSizeF(11 * scale)
            lane.stream.setFont(font)
