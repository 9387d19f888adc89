"""One lane of side-by-side streams (the race's two runs, the batch's slots): a bold title, the
coloured token stream and a line of figures."""

from __future__ import annotations

from specdec_studio.app.qt import QtWidgets
from specdec_studio.app.widgets.token_stream import TokenStream


class StreamLane(QtWidgets.QWidget):
    def __init__(self, title: str, *, title_scale: float = 1.0, margin: int = 0,
                 parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QtWidgets.QLabel(title)
        self.title.setWordWrap(True)
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * title_scale)
        font.setBold(True)
        self.title.setFont(font)
        self.stream = TokenStream()
        self.counters = QtWidgets.QLabel("")
        self.counters.setWordWrap(True)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(margin, margin, margin, margin)
        layout.addWidget(self.title)
        layout.addWidget(self.stream, 1)
        layout.addWidget(self.counters)

    def append_step(self, event) -> None:
        """A step's tokens (a StepDone or a batch's JobStep), coloured by source."""
        for t in event.tokens:
            self.stream.append_text(t.text, t.source, event.step, t.id)
