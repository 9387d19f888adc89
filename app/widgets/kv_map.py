"""The KV-cache cell map: one row per sequence, one column per cell, in three colourings.

- **by sequence** (the default): which role owns each cell — sequence 0 (the input / accepted
  text), the lookahead window, the verification n-grams, or several at once;
- **by writer**: what put the token there — the prompt, a token the target sampled, an accepted
  n-gram or draft token, a speculative token still in the cache (a lookahead window);
- **by age**: the step that wrote the cell, newest brightest.

In every colouring the cells the step's decode wrote and verification then removed are drawn in
their own colour, so a rollback is visible as it happens.

Drawn with pyqtgraph's fast path: a uint8 image of constant shape per run, a 256-entry lookup
table and explicit levels (no auto-levelling). Colours are Okabe and Ito's palette, which reads
for colour-blind viewers.
"""

from __future__ import annotations

import numpy as np

from specdec_studio.app.qt import QtGui, QtWidgets, pg
from specdec_studio.app.widgets.empty_state import EmptyState, WholeAxis
from specdec_studio.app.widgets.state_slots import StateSlotsView

pg.setConfigOptions(imageAxisOrder="row-major")

EMPTY, SHARED, SEQ0, WINDOW, VERIFY = 0, 1, 2, 3, 4
PROMPT, SAMPLED, ACCEPTED_NGRAM, ACCEPTED_DRAFT, SPECULATIVE, REMOVED = 5, 6, 7, 8, 9, 10
AGE_FIRST, AGE_LEVELS = 16, 240  # values 16..255: the age ramp, newest last
_COLOURS = {EMPTY: (0, 0, 0, 0), SHARED: (120, 144, 176, 255), SEQ0: (0, 114, 178, 255),
            WINDOW: (230, 159, 0, 255), VERIFY: (0, 158, 115, 255),
            PROMPT: (153, 153, 153, 255), SAMPLED: (96, 112, 196, 255), ACCEPTED_NGRAM: (0, 158, 115, 255),
            ACCEPTED_DRAFT: (230, 159, 0, 255), SPECULATIVE: (240, 228, 66, 255), REMOVED: (213, 94, 0, 255)}
COLOURINGS = ("sequence", "writer", "age")
LEGENDS = {
    "sequence": [("shared by several sequences", SHARED), ("sequence 0 only", SEQ0),
                 ("lookahead window only", WINDOW), ("verification n-gram only", VERIFY),
                 ("verified, then removed this step", REMOVED)],
    "writer": [("prompt", PROMPT), ("sampled by the target", SAMPLED), ("accepted n-gram", ACCEPTED_NGRAM),
               ("accepted draft", ACCEPTED_DRAFT), ("speculative, still cached", SPECULATIVE),
               ("verified, then removed this step", REMOVED)],
    "age": [("older", AGE_FIRST), ("written this step", 255), ("verified, then removed this step", REMOVED)],
}
WRITER_OF_SOURCE = {"sampled": SAMPLED, "accepted_ngram": ACCEPTED_NGRAM, "accepted_draft": ACCEPTED_DRAFT}
AGE_SPAN = 64  # steps over which the age ramp runs from newest to oldest


def _lookup_table(background: tuple[int, int, int], overrides: dict[int, str] | None = None) -> np.ndarray:
    lut = np.zeros((256, 4), dtype=np.uint8)
    lut[:, :3] = background
    lut[:, 3] = 255
    for value, rgba in _COLOURS.items():
        if value != EMPTY:
            lut[value] = rgba
    for value, hex_colour in (overrides or {}).items():
        colour = QtGui.QColor(hex_colour)
        lut[value] = (colour.red(), colour.green(), colour.blue(), 255)
    ramp = pg.colormap.get("viridis").map(np.linspace(0.0, 1.0, AGE_LEVELS), mode="byte")
    lut[AGE_FIRST:] = ramp
    return lut


def _colour(value: int, lut: np.ndarray) -> tuple[int, int, int]:
    r, g, b, _ = lut[value]
    return int(r), int(g), int(b)


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


def writer_of_cell(snapshot, n_prompt: int, sources: np.ndarray) -> np.ndarray:
    """uint8 per cell: what wrote it. ``sources[i]`` is the writer value of the run's i-th
    generated token, which sits at position ``n_prompt + i`` of sequence 0."""
    pos = snapshot.pos_of_cell
    kept0 = snapshot.kept[0]
    index = pos - n_prompt
    writer = np.full(pos.shape, SPECULATIVE, dtype=np.uint8)
    writer[pos < 0] = EMPTY
    writer[(pos >= 0) & (pos < n_prompt)] = PROMPT
    known = kept0 & (index >= 0) & (index < len(sources))
    writer[known] = sources[index[known]]
    return writer


def age_of_cell(snapshot) -> np.ndarray:
    """uint8 per cell on the age ramp: the step that wrote it, the snapshot's step brightest."""
    written = snapshot.written_step if snapshot.written_step is not None else np.zeros_like(snapshot.pos_of_cell)
    age = np.clip(snapshot.step - written, 0, AGE_SPAN).astype(np.float32)
    return (255 - np.round(age * (AGE_LEVELS - 1) / AGE_SPAN)).astype(np.uint8)


def cell_image(snapshot, colouring: str, window: int, n_prompt: int = 0,
               sources: np.ndarray | None = None) -> np.ndarray:
    """The map's uint8 image (sequences × cells) of ``snapshot`` in ``colouring``."""
    seqs = snapshot.seq_of_cell
    if colouring == "sequence":
        image = membership_image(seqs, window)
    else:
        if colouring == "writer":
            per_cell = writer_of_cell(snapshot, n_prompt, sources if sources is not None else np.zeros(0, np.uint8))
        else:
            per_cell = age_of_cell(snapshot)
        image = np.where(seqs, per_cell[None, :], EMPTY).astype(np.uint8)
    removed = snapshot.removed if snapshot.kept_seq_of_cell is not None else None
    if removed is not None and removed.any():
        image[:, removed] = np.where(seqs[:, removed], REMOVED, EMPTY)
    free_tail = snapshot.cache_cells - snapshot.width  # the cells past the snapshot's arrays are free
    if free_tail:
        image = np.pad(image, ((0, 0), (0, free_tail)), constant_values=EMPTY)
    return np.ascontiguousarray(image)


class KvMapView(QtWidgets.QWidget):
    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.plot = pg.PlotWidget(axisItems={"bottom": WholeAxis("bottom")})
        # the map itself never shrinks to its axis under the figures below it (a laptop's screen)
        self.plot.setMinimumHeight(70)
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
        self.figures.setWordWrap(True)
        self.colouring_box = QtWidgets.QComboBox()
        for name in COLOURINGS:
            self.colouring_box.addItem(f"by {name}", name)
        self.colouring_box.setToolTip("Colour the cells by the sequences that hold them, by what wrote them "
                                      "(prompt, sampled, accepted n-gram or draft), or by the step that wrote them")
        self.colouring_box.currentIndexChanged.connect(lambda _i: self._recolour())
        self.legend = QtWidgets.QLabel()
        self.legend.setWordWrap(True)
        self.top = QtWidgets.QWidget()
        top = QtWidgets.QHBoxLayout(self.top)
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QtWidgets.QLabel("Colour:"))
        top.addWidget(self.colouring_box)
        top.addWidget(self.legend, 1)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.top)
        self.plot_area = EmptyState(self.plot, "Run a prompt to see the KV cache fill: one row per sequence, "
                                               "one column per cell, as each decode leaves them.")
        layout.addWidget(self.plot_area, 1)
        # a hybrid or recurrent model's state per sequence (hidden on a plain KV cache)
        self.state_slots = StateSlotsView()
        self.state_slots.hide()
        layout.addWidget(self.state_slots)
        layout.addWidget(self.figures)
        layout.addWidget(self.hover_label)
        self.snapshot = None
        self.memory_kind = "attention"
        self.window = 0
        self.n_prompt = 0
        self.sources = np.zeros(0, dtype=np.uint8)  # writer value of each generated token
        self.follow = True  # keep the newest cells in view until the user pans or zooms
        self.plot.getViewBox().sigRangeChangedManually.connect(self._stop_following)
        self._shape: tuple[int, int] | None = None
        self._overrides: dict[int, str] = {}
        self._background = (255, 255, 255)
        self.set_background(self.palette().color(QtGui.QPalette.Base))
        self.image.hoverEvent = self._hover

    def set_memory_kind(self, kind: str) -> None:
        """The loaded model's memory: "attention" (cells only), "hybrid" (its attention layers'
        cells and each sequence's recurrent state), "recurrent" (the states only: it has no cells)."""
        self.memory_kind = kind
        self.plot_area.setVisible(kind != "recurrent")
        self.top.setVisible(kind != "recurrent")
        self.state_slots.setVisible(kind != "attention" and bool(self.state_slots.states))

    @property
    def colouring(self) -> str:
        return self.colouring_box.currentData()

    def set_colouring(self, colouring: str) -> None:
        self.colouring_box.setCurrentIndex(max(0, COLOURINGS.index(colouring)))

    def set_background(self, colour: QtGui.QColor) -> None:
        self.plot.setBackground(colour)
        self._background = (colour.red(), colour.green(), colour.blue())
        self._refresh_lut()

    def set_token_colours(self, colours: dict) -> None:
        """Colour accepted cells as the token stream colours accepted tokens (its palette)."""
        self._overrides = {ACCEPTED_NGRAM: colours["accepted_ngram"], ACCEPTED_DRAFT: colours["accepted_draft"]}
        self._refresh_lut()

    def _refresh_lut(self) -> None:
        self._lut = _lookup_table(self._background, self._overrides)
        self.image.setLookupTable(self._lut)
        self._update_legend()
        if self.snapshot is not None:
            self.set_snapshot(self.snapshot)

    def set_roles(self, window: int) -> None:
        """Sequences 1..window are the lookahead window; later ones verification n-grams."""
        self.window = window

    def begin_run(self, window: int, n_prompt: int) -> None:
        """A new run: its lookahead window (0 for none) and prompt length, for the colourings."""
        self.window = window
        self.n_prompt = n_prompt
        self.sources = np.zeros(0, dtype=np.uint8)
        self.state_slots.begin_run()

    def add_tokens(self, sources) -> None:
        """The writer of each token a step emitted (their token sources), in order."""
        values = np.fromiter((WRITER_OF_SOURCE.get(s, SAMPLED) for s in sources), dtype=np.uint8)
        self.sources = np.concatenate([self.sources, values])

    def _update_legend(self) -> None:
        parts = []
        for text, value in LEGENDS[self.colouring]:
            r, g, b = _colour(value, self._lut)
            label = text.replace(" ", "&nbsp;")  # an entry wraps as a whole, never inside its words
            parts.append(f"<span style='color: rgb({r},{g},{b}); font-size: 14pt;'>■</span>&nbsp;{label}")
        self.legend.setText(" &nbsp; ".join(parts))

    def _recolour(self) -> None:
        self._update_legend()
        if self.snapshot is not None:
            self.set_snapshot(self.snapshot)

    def image_of(self, snapshot) -> np.ndarray:
        return cell_image(snapshot, self.colouring, self.window, self.n_prompt, self.sources)

    def set_snapshot(self, snapshot) -> None:
        self.snapshot = snapshot
        self.plot_area.show_content()
        image = self.image_of(snapshot)
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
        removed = int(snapshot.removed.sum()) if snapshot.kept_seq_of_cell is not None else 0
        states = snapshot.states
        self.state_slots.set_states(states, snapshot.step)
        self.state_slots.setVisible(bool(states))
        if states and self.memory_kind == "recurrent":
            self.figures.setText(f"step {snapshot.step} · {len(states)} recurrent state"
                                 f"{'s' if len(states) != 1 else ''} · {self.state_slots.describe()}")
            return
        self.figures.setText(
            f"step {snapshot.step} · used cells {snapshot.used} · holes {snapshot.holes} · "
            f"largest empty run {snapshot.largest_free_run} · {n_seq} sequence{'s' if n_seq != 1 else ''} × "
            f"{image.shape[1]} cells" + (f" · {removed} removed by verification" if removed else "")
            + (f" · recurrent state: {self.state_slots.describe()}" if states else "")
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
        if not (0 <= seq < snap.seq_of_cell.shape[0] and 0 <= cell < snap.cache_cells):
            return
        if cell >= snap.width:  # past the snapshot's arrays: free
            self.hover_label.setText(f"cell {cell} · empty")
            return
        members = np.flatnonzero(snap.seq_of_cell[:, cell]).tolist()
        pos = int(snap.pos_of_cell[cell])
        written = int(snap.written_step[cell]) if snap.written_step is not None else -1
        when = "before this run" if written < 0 else ("with the prompt" if written == 0 else f"at step {written}")
        gone = " · removed by verification" if snap.kept_seq_of_cell is not None and snap.removed[cell] else ""
        self.hover_label.setText(
            f"cell {cell} · " + ("empty" if pos < 0 and not members
                                 else f"position {pos} · sequences {members} · written {when}{gone}")
        )
