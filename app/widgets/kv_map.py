"""The KV-cache cell map: one row per sequence, one column per cell, coloured by membership.

Drawn with pyqtgraph's fast path: a uint8 image of constant shape per run, a 256-entry lookup
table and explicit levels (no auto-levelling). Rows are sequences; the run's roles colour them:
sequence 0 (the input / accepted text), the lookahead window, the verification n-grams.
"""

from __future__ import annotations

import numpy as np

from app.qt import QtGui, QtWidgets, pg

pg.setConfigOptions(imageAxisOrder="row-major")

EMPTY, SHARED, SEQ0, WINDOW, VERIFY = 0, 1, 2, 3, 4
_COLOURS = {EMPTY: (0, 0, 0, 0), SHARED: (120, 144, 176, 255), SEQ0: (52, 152, 219, 255),
            WINDOW: (230, 126, 34, 255), VERIFY: (10, 165, 192, 255)}
LEGEND = [("shared by several sequences", SHARED), ("sequence 0 only", SEQ0),
          ("lookahead window only", WINDOW), ("verification n-gram only", VERIFY)]


def _lookup_table(background: tuple[int, int, int]) -> np.ndarray:
    lut = np.zeros((256, 4), dtype=np.uint8)
    lut[:, :3] = background
    lut[:, 3] = 255
    for value, rgba in _COLOURS.items():
        if value != EMPTY:
            lut[value] = rgba
    return lut


def membership_image(seq_of_cell: np.ndarray, window: int) -> np.ndarray:
    """uint8 (sequences × cells): which role owns each cell, or SHARED when several do."""
    n_seq = seq_of_cell.shape[0]
    counts = seq_of_cell.sum(axis=0)
    role = np.full(n_seq, SEQ0, dtype=np.uint8)
    if window:
        role[1 : window + 1] = WINDOW
        role[window + 1 :] = VERIFY
    image = np.where(seq_of_cell, role[:, None], EMPTY).astype(np.uint8)
    image[:, counts > 1] = np.where(seq_of_cell[:, counts > 1], SHARED, EMPTY)
    return np.ascontiguousarray(image)


class KvMapView(QtWidgets.QWidget):
    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = pg.PlotWidget()
        self.plot.setMenuEnabled(False)
        self.plot.hideButtons()
        self.plot.setLabel("bottom", "KV cell")
        self.plot.setLabel("left", "sequence")
        self.plot.invertY(True)
        self.image = pg.ImageItem()
        self.plot.addItem(self.image)
        self.frame = pg.PlotCurveItem(pen=pg.mkPen((231, 76, 60), width=1.5))
        self.plot.addItem(self.frame)
        self.hover_label = QtWidgets.QLabel("Cells as the latest decode left them. Hover a cell for its position "
                                            "and sequences; drag to pan, wheel to zoom.")
        self.hover_label.setWordWrap(True)
        self.figures = QtWidgets.QLabel("")
        legend = QtWidgets.QHBoxLayout()
        for text, value in LEGEND:
            swatch = QtWidgets.QLabel()
            r, g, b, _ = _COLOURS[value]
            swatch.setFixedSize(12, 12)
            swatch.setStyleSheet(f"background: rgb({r},{g},{b}); border: 1px solid #555;")
            legend.addWidget(swatch)
            legend.addWidget(QtWidgets.QLabel(text))
        legend.addStretch(1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.plot, 1)
        layout.addLayout(legend)
        layout.addWidget(self.figures)
        layout.addWidget(self.hover_label)
        self.snapshot = None
        self.window = 0
        self.follow = True  # keep the newest cells in view until the user pans or zooms
        self.plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)
        self._shape: tuple[int, int] | None = None
        self.set_background(self.palette().color(QtGui.QPalette.Base))
        self.image.hoverEvent = self._hover

    def set_background(self, colour: QtGui.QColor) -> None:
        self.plot.setBackground(colour)
        self._lut = _lookup_table((colour.red(), colour.green(), colour.blue()))
        self.image.setLookupTable(self._lut)

    def set_roles(self, window: int) -> None:
        """Sequences 1..window are the lookahead window; later ones verification n-grams."""
        self.window = window

    def set_snapshot(self, snapshot) -> None:
        self.snapshot = snapshot
        image = membership_image(snapshot.seq_of_cell, self.window)
        first = self._shape != image.shape
        self.image.setImage(image, autoLevels=False, levels=(0, 255), lut=self._lut)
        used_top = int(np.flatnonzero(snapshot.pos_of_cell >= 0).max(initial=-1)) + 1
        n_seq = image.shape[0]
        if first:
            self._shape = image.shape
            self.follow = True
            self.plot.setYRange(0, n_seq, padding=0.02)
            # row i spans [i, i + 1]: label each row (or every few) at its middle
            step = max(1, n_seq // 8)
            self.plot.getAxis("left").setTicks([[(i + 0.5, str(i)) for i in range(0, n_seq, step)], []])
        if self.follow:  # the newest cells, where the step's branches are
            self.plot.setXRange(max(0, used_top - self.FOLLOW_CELLS), used_top + 4, padding=0)
        self.frame.setData([0, used_top, used_top, 0, 0], [0, 0, n_seq, n_seq, 0])
        self.figures.setText(
            f"used cells {snapshot.used} · holes {snapshot.holes} · largest empty run {snapshot.largest_free_run} · "
            f"{n_seq} sequence{'s' if n_seq != 1 else ''} × {image.shape[1]} cells"
        )

    FOLLOW_CELLS = 160

    def _stop_following(self, *_args) -> None:
        self.follow = False

    def _hover(self, event) -> None:
        if event.isExit() or self.snapshot is None:
            return
        point = event.pos()
        cell, seq = int(point.x()), int(point.y())
        snap = self.snapshot
        if 0 <= seq < snap.seq_of_cell.shape[0] and 0 <= cell < snap.seq_of_cell.shape[1]:
            members = np.flatnonzero(snap.seq_of_cell[:, cell]).tolist()
            pos = int(snap.pos_of_cell[cell])
            self.hover_label.setText(
                f"cell {cell} · " + ("empty" if pos < 0 else f"position {pos} · sequences {members}")
            )
