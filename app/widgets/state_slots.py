"""The recurrent state of each sequence, beside the KV map, for hybrid and recurrent models.

A recurrent layer keeps one state per sequence rather than a cell per token. Per sequence this
draws the state itself (how many tokens it has seen), llama.cpp's per-token snapshots of it (the
boxes of ``n_rs_seq``, filled for those the last decode left), and the checkpoint saved before a
verification. A step that went back outlines, in the removed-cell colour, what it went back with:
a snapshot, or the checkpoint (restored, the accepted tokens decoded again). Painted with QPainter
from the snapshot's plain data, in the KV map's palette.
"""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtGui, QtWidgets

_STATE = QtGui.QColor(0, 114, 178)  # the map's "sequence 0" blue
_SNAPSHOT = QtGui.QColor(86, 180, 233)
_CHECKPOINT = QtGui.QColor(0, 158, 115)
_ROLLBACK = QtGui.QColor(213, 94, 0)  # the map's "verified, then removed" orange


def rollback_words(state) -> str:
    """What the step's rollback of one sequence did, in words ("" when it did none)."""
    if state.rollback == "snapshot":
        return f"back {state.rolled_back} by llama.cpp's snapshot"
    if state.rollback == "checkpoint":
        return f"back {state.rolled_back}: checkpoint restored, {state.redecoded} re-decoded"
    return ""


class StateSlotsView(QtWidgets.QWidget):
    ROW = 40  # the boxes, and a line of words under them
    BOX = 14
    SNAPSHOT_BOX = 8

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.states: tuple = ()
        self.last_rollback: dict[int, str] = {}  # seq -> the run's latest rollback, in words with its step
        self.setSizePolicy(QtWidgets.QSizePolicy.Expanding, QtWidgets.QSizePolicy.Fixed)
        self.setToolTip("Recurrent state per sequence: the state (tokens seen), llama.cpp's per-token snapshots "
                        "of the last decode (filled boxes), and the checkpoint saved before a verification. "
                        "An orange outline: this step went back with it.")

    def begin_run(self) -> None:
        self.last_rollback.clear()

    def note_rollbacks(self, states: tuple, step: int) -> None:
        """Remember each sequence's latest rollback (every snapshot passes here, painted or not)."""
        for state in states:
            if state.rollback:
                self.last_rollback[state.seq] = f"step {step}: {rollback_words(state)}"

    def set_states(self, states: tuple, step: int = 0) -> None:
        self.states = tuple(states)
        self.note_rollbacks(self.states, step)
        self.setFixedHeight(8 + self.ROW * max(1, len(self.states)))
        self.update()

    def describe(self) -> str:
        """The figures line under the slots."""
        if not self.states:
            return ""
        done = [f"seq {s.seq} {rollback_words(s)}" for s in self.states if s.rollback]
        return " · ".join(done) if done else "no rollback this step"

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt's name
        painter = QtGui.QPainter(self)
        painter.setRenderHint(QtGui.QPainter.Antialiasing, False)
        text_pen = self.palette().color(QtGui.QPalette.WindowText)
        metrics = painter.fontMetrics()
        label_w = metrics.horizontalAdvance("seq 00 · 00000 tokens ") + 8
        for row, state in enumerate(self.states):
            y = 4 + row * self.ROW
            painter.setPen(text_pen)
            painter.drawText(QtCore.QRect(4, y, label_w, 18), QtCore.Qt.AlignVCenter,
                             f"seq {state.seq} · {state.n_tokens} tokens")
            x = 4 + label_w
            x = self._box(painter, x, y, self.BOX, _STATE, True, state.rollback != "")
            x += 6
            for i in range(state.snapshots_max):
                filled = i < state.snapshots
                went_back = state.rollback == "snapshot" and i < state.rolled_back
                x = self._box(painter, x, y, self.SNAPSHOT_BOX, _SNAPSHOT, filled, went_back) - 2
            if state.snapshots_max:
                x += 8
            has_ckpt = state.checkpoint_at >= 0 or state.rollback == "checkpoint"
            x = self._box(painter, x, y, self.BOX, _CHECKPOINT, has_ckpt, state.rollback == "checkpoint")
            painter.setPen(text_pen)
            snaps = (f"snapshots {state.snapshots}/{state.snapshots_max}" if state.snapshots_max
                     else "no snapshots")
            where = f"checkpoint at {state.checkpoint_at}" if state.checkpoint_at >= 0 else "no checkpoint"
            painter.drawText(QtCore.QRect(x + 6, y, max(0, self.width() - x - 10), 18), QtCore.Qt.AlignVCenter,
                             f"{snaps} · {where}")
            last = self.last_rollback.get(state.seq, "no rollback yet this run")
            painter.drawText(QtCore.QRect(4, y + 18, max(0, self.width() - 8), 18), QtCore.Qt.AlignVCenter,
                             f"last rollback: {last}")
        painter.end()

    def _box(self, painter, x: int, y: int, width: int, colour: QtGui.QColor, filled: bool, outlined: bool) -> int:
        rect = QtCore.QRect(x, y + (18 - self.BOX) // 2, width, self.BOX)
        painter.setPen(QtGui.QPen(_ROLLBACK if outlined else colour, 2 if outlined else 1))
        painter.setBrush(colour if filled else QtCore.Qt.NoBrush)
        painter.drawRect(rect)
        return x + width + 4
