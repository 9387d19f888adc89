"""A view that says what it will show until it has something to show, and plot axes in whole units."""

from __future__ import annotations

from specdec_studio.app.qt import Qt, QtWidgets, pg


class EmptyState(QtWidgets.QStackedWidget):
    """``content`` behind a one-line explanation: the explanation until :meth:`show_content`, so a
    view never shows meaningless axes before its first data."""

    def __init__(self, content: QtWidgets.QWidget, message: str, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = QtWidgets.QLabel(message)
        self.message.setAlignment(Qt.AlignCenter)
        self.message.setWordWrap(True)
        self.message.setStyleSheet("color: palette(mid); padding: 12px;")
        self.message.setObjectName("empty-state")
        self.content = content
        self.addWidget(self.message)
        self.addWidget(content)

    @property
    def empty(self) -> bool:
        return self.currentWidget() is self.message

    def show_content(self, shown: bool = True) -> None:
        self.setCurrentWidget(self.content if shown else self.message)

    def minimumSizeHint(self):  # the message wraps: its width never sets the panel's
        hint = super().minimumSizeHint()
        hint.setWidth(min(hint.width(), 120))
        return hint


class WholeAxis(pg.AxisItem):
    """An axis of things counted in whole units (cells, steps, tokens): ticks only at integers,
    never 0.5 of a step or ×0.001 of a cell, however far it is zoomed."""

    def tickSpacing(self, minVal, maxVal, size):
        levels = [(spacing, offset) for spacing, offset in super().tickSpacing(minVal, maxVal, size) if spacing >= 1]
        return levels or [(1.0, 0.0)]

    def tickStrings(self, values, scale, spacing):
        return [str(int(round(v))) for v in values]
