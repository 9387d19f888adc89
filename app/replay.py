"""Plays recorded traces back on the window's clock: a trace's events reach the window exactly as a
live run's would, at 0.25× to 4× the recorded pace, with pause and single steps."""

from __future__ import annotations

import time

from specdec_studio.app.qt import QtCore
from specdec_studio.engine.records.trace import Replay, Trace

TICK_MS = 30


class TracePlayer(QtCore.QObject):
    """Drives one or more :class:`engine.records.trace.Replay` on a common clock.

    ``events`` carries (lane, events) — lane 0 for a single trace, 0 and 1 for a race."""

    events = QtCore.Signal(int, list)
    finished = QtCore.Signal()

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.replays: list[Replay] = []
        self.speed = 1.0
        self.paused = False
        self._last = 0.0
        self._timer = QtCore.QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._tick)

    @property
    def active(self) -> bool:
        return bool(self.replays) and not all(r.done for r in self.replays)

    @property
    def clock(self) -> float:
        """Recorded seconds played so far (the common clock)."""
        return self.replays[0].clock if self.replays else 0.0

    def play(self, traces: list[Trace], speed: float = 1.0, *, paused: bool = False) -> None:
        self.replays = [Replay(t, speed) for t in traces]
        self.set_speed(speed)
        self.paused = paused
        self._last = time.perf_counter()
        self._timer.start()

    def set_speed(self, speed: float) -> None:
        self.speed = speed
        for r in self.replays:
            r.speed = speed

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self._last = time.perf_counter()

    def step(self) -> None:
        """One step of the first lane (a race steps on the common clock instead)."""
        self.paused = True
        if not self.replays:
            return
        if len(self.replays) == 1:
            self._deliver(0, self.replays[0].next_step())
        else:
            clock = self.replays[0].clock + 0.05
            for lane, r in enumerate(self.replays):
                r.clock = clock
                self._deliver(lane, r.advance(0.0))
        self._check_done()

    def finish_now(self) -> None:
        """Everything that remains, at once (a replay skipped to its end)."""
        for lane, r in enumerate(self.replays):
            self._deliver(lane, r.seek_end())
        self._check_done()

    def advance_to(self, recorded_s: float) -> None:
        """Deliver every event recorded up to ``recorded_s`` now, with the timer stopped: a video
        export drives the replay on its frame clock, not on the wall clock."""
        self._timer.stop()
        for lane, r in enumerate(self.replays):
            self._deliver(lane, r.advance_to(recorded_s))
        self._check_done()

    def stop(self) -> None:
        self._timer.stop()
        self.replays = []

    def _tick(self) -> None:
        now = time.perf_counter()
        dt, self._last = now - self._last, now
        if self.paused or not self.replays:
            return
        for lane, r in enumerate(self.replays):
            self._deliver(lane, r.advance(dt))
        self._check_done()

    def _deliver(self, lane: int, events: list) -> None:
        if events:
            self.events.emit(lane, events)

    def _check_done(self) -> None:
        if self.replays and all(r.done for r in self.replays):
            self._timer.stop()
            self.finished.emit()
