"""Auto's decisions, one bar per step under the token stream: the colour says what the step
verified (nothing, one source, or a tree of several), the height how many tokens it emitted.
Hover a bar for the step's k, tree depth, predicted gain and the tokens' proposers."""

from __future__ import annotations

import html

from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
from specdec_studio.engine.events import AutoStep

DECISION_COLOURS = {
    "plain": "#a0a4aa",
    "ngram": "#0aa5c0",
    "ngram_alt": "#c9b400",
    "suffix": "#8e44ad",
    "memory": "#b03a6f",
    "draft": "#2e9d4f",
    "tree": "#e67e22",
}
DECISION_LABELS = {
    "plain": "plain step",
    "ngram": "n-gram cache",
    "ngram_alt": "n-gram cache, a less frequent follower",
    "suffix": "suffix match",
    "memory": "n-gram memory of past runs",
    "draft": "draft model",
    "tree": "tree of several sources",
}
BAR_WIDTH = 4
MAX_TOKENS_DRAWN = 8


def _kind(decision: str) -> str:
    return "tree" if decision.startswith("tree:") else decision


class DecisionStrip(QtWidgets.QWidget):
    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(34)
        self.setMaximumHeight(34)
        self.setMouseTracking(True)
        self.steps: list[tuple[int, AutoStep, int]] = []  # (step, Auto's decision there, tokens emitted)

    def clear(self) -> None:
        self.steps.clear()
        self.update()

    def add(self, step: int, record: AutoStep, n_tokens: int) -> None:
        self.steps.append((step, record, n_tokens))

    def legend_html(self) -> str:
        return " ".join(f'<span style="color:{c}">■</span> {DECISION_LABELS[k]}' for k, c in DECISION_COLOURS.items())

    def _visible(self) -> list[tuple[int, AutoStep, int]]:
        fit = max(1, self.width() // BAR_WIDTH)
        return self.steps[-fit:]  # the newest steps when the run is longer than the strip

    def paintEvent(self, _event) -> None:
        painter = QtGui.QPainter(self)
        h = self.height() - 2
        for i, (_step, record, n_tokens) in enumerate(self._visible()):
            colour = QtGui.QColor(DECISION_COLOURS.get(_kind(record.decision), "#888"))
            bar = max(3, int(h * min(n_tokens, MAX_TOKENS_DRAWN) / MAX_TOKENS_DRAWN))
            painter.fillRect(i * BAR_WIDTH, self.height() - bar, BAR_WIDTH - 1, bar, colour)
        painter.end()

    def event(self, ev):
        if ev.type() == QtCore.QEvent.ToolTip:
            visible = self._visible()
            i = int(ev.pos().x()) // BAR_WIDTH
            if 0 <= i < len(visible):
                step, r, n = visible[i]
                text = (f"step {step}: {DECISION_LABELS.get(_kind(r.decision), r.decision)} ({r.decision})\n"
                        f"verified {r.k} candidate tokens in {r.branches} branch(es), depth {r.depth}; "
                        f"predicted gain {r.predicted_gain:.2f}×\nemitted {n} token(s), proposed by: "
                        + ", ".join(r.proposers))
                # escaped and set as rich text: a replayed trace's words are shown, never interpreted
                QtWidgets.QToolTip.showText(ev.globalPos(), html.escape(text).replace("\n", "<br>"), self)
            else:
                QtWidgets.QToolTip.hideText()
            return True
        return super().event(ev)
