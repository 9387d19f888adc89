"""The step inspector: one step of a run, stopped in time.

It draws the batch the step sent to the target — the picture in the comment at the top of
llama.cpp's ``examples/lookahead/lookahead.cpp``, drawn: one column per batch row with its token,
position and the sequences it belongs to (a dot per sequence), a mark on the rows that produced
logits, and what verification made of each candidate (accepted, or the first mismatch) — then the
verification in words, and the KV cells before and after the step.

Steps come from :class:`RunRecord`, which the window fills from a live run or a replayed trace.
"""

from __future__ import annotations


from specdec_studio.app.qt import QtCore, QtGui, QtWidgets, Qt
from specdec_studio.app.widgets.kv_map import KvMapView
from specdec_studio.app.model.run_record import RunRecord
from specdec_studio.engine.strategies import registry

ROLE_COLOURS = {  # Okabe–Ito, as the KV map
    "input": "#56B4E9", "redecode": "#999999", "window": "#E69F00", "ngram": "#009E73",
    "draft": "#CC79A7", "suffix": "#0072B2", "ngram_alt": "#F0E442",
}
ROLE_LABELS = {
    "input": "input token (the last one accepted)", "redecode": "accepted token decoded again (cache order)",
    "window": "lookahead window (Jacobi guesses)", "ngram": "candidate from an n-gram",
    "draft": "candidate from the draft model", "suffix": "candidate from the suffix match",
    "ngram_alt": "candidate from an n-gram's 2nd or 3rd follower",
}
VERDICT_COLOURS = {"accepted": "#009E73", "rejected": "#D55E00"}


class BatchPicture(QtWidgets.QWidget):
    """One column per batch row: role colour, token, position, a dot per sequence, logits mark."""

    COLUMN = 46
    TOP = 58  # token text and position above the sequence grid
    ROW = 14

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.rows: tuple = ()
        self.seqs: list[int] = []
        self.setMouseTracking(True)
        self.scale = 1.0

    def set_rows(self, rows: tuple) -> None:
        self.rows = rows
        self.seqs = sorted({s for r in rows for s in r.seqs})
        self._resize()
        self.update()

    def set_scale(self, scale: float) -> None:
        self.scale = scale
        self._resize()
        self.update()

    def _resize(self) -> None:
        s = self.scale
        width = int((len(self.rows) * self.COLUMN + 70) * s)
        height = int((self.TOP + (len(self.seqs) + 2) * self.ROW + 10) * s)
        self.setMinimumSize(width, height)

    def paintEvent(self, _event) -> None:
        painter = QtGui.QPainter(self)
        painter.setRenderHint(QtGui.QPainter.Antialiasing)
        s = self.scale
        painter.scale(s, s)
        text_colour = self.palette().color(QtGui.QPalette.Text)
        font = painter.font()
        font.setPointSizeF(8)
        painter.setFont(font)
        left = 64
        # sequence labels
        painter.setPen(text_colour)
        painter.drawText(QtCore.QRectF(0, 14, left - 4, 14), Qt.AlignRight, "token")
        painter.drawText(QtCore.QRectF(0, 32, left - 4, 14), Qt.AlignRight, "position")
        for j, seq in enumerate(self.seqs):
            y = self.TOP + j * self.ROW
            painter.drawText(QtCore.QRectF(0, y, left - 4, self.ROW), Qt.AlignRight | Qt.AlignVCenter, f"seq {seq}")
        y_logits = self.TOP + len(self.seqs) * self.ROW
        painter.drawText(QtCore.QRectF(0, y_logits, left - 4, self.ROW), Qt.AlignRight | Qt.AlignVCenter, "logits")
        seq_index = {seq: j for j, seq in enumerate(self.seqs)}
        for i, row in enumerate(self.rows):
            x = left + i * self.COLUMN
            role = QtGui.QColor(ROLE_COLOURS.get(row.role, "#888888"))
            box = QtCore.QRectF(x + 2, 4, self.COLUMN - 4, 44)
            fill = QtGui.QColor(role)
            fill.setAlpha(70)
            painter.fillRect(box, fill)
            pen = QtGui.QPen(QtGui.QColor(VERDICT_COLOURS.get(row.verdict, role.name())), 3 if row.verdict else 1)
            painter.setPen(pen)
            painter.drawRect(box)
            painter.setPen(text_colour)
            token = row.text.replace("\n", "⏎").replace(" ", "·") or f"#{row.token}"
            painter.drawText(QtCore.QRectF(x + 2, 8, self.COLUMN - 4, 16), Qt.AlignHCenter, token[:7])
            painter.drawText(QtCore.QRectF(x + 2, 28, self.COLUMN - 4, 16), Qt.AlignHCenter, str(row.pos))
            if row.verdict == "rejected":
                painter.setPen(QtGui.QPen(QtGui.QColor(VERDICT_COLOURS["rejected"]), 2))
                painter.drawLine(QtCore.QPointF(box.left() + 3, box.top() + 3),
                                 QtCore.QPointF(box.right() - 3, box.bottom() - 3))
            painter.setPen(Qt.NoPen)
            painter.setBrush(role)
            for seq in row.seqs:
                j = seq_index[seq]
                centre = QtCore.QPointF(x + self.COLUMN / 2, self.TOP + j * self.ROW + self.ROW / 2)
                painter.drawEllipse(centre, 4, 4)
            if row.logits:
                painter.setBrush(text_colour)
                centre = QtCore.QPointF(x + self.COLUMN / 2, y_logits + self.ROW / 2)
                painter.drawRect(QtCore.QRectF(centre.x() - 4, centre.y() - 4, 8, 8))
            painter.setBrush(Qt.NoBrush)
        painter.end()

    def mouseMoveEvent(self, event) -> None:
        i = int((event.position().x() / self.scale - 64) // self.COLUMN)
        if 0 <= i < len(self.rows):
            r = self.rows[i]
            verdict = {"accepted": " · accepted by the target",
                       "rejected": " · first mismatch: the target chose otherwise"}
            self.setToolTip(
                f"row {i} · {ROLE_LABELS.get(r.role, r.role)}\ntoken {r.token} {r.text!r} · position {r.pos}"
                f" · sequences {list(r.seqs)}" + (" · produces logits" if r.logits else "") + verdict.get(r.verdict, "")
            )
        else:
            self.setToolTip("")


def describe_step(batch, done) -> str:
    """The step's verification in words, for the speaker."""
    if batch is None or done is None:
        return "Step 0: the prompt was decoded and the first token sampled from its last row." \
            if done is not None else "No step recorded."
    rows = batch.rows
    candidates = [r for r in rows if r.role in ("ngram", "ngram_alt", "draft", "suffix")]
    window = [r for r in rows if r.role == "window"]
    accepted = [r for r in rows if r.verdict == "accepted"]
    rejected = [r for r in rows if r.verdict == "rejected"]
    parts = [f"Step {done.step}: a batch of {len(rows)} token{'s' if len(rows) != 1 else ''} "
             f"({sum(r.logits for r in rows)} with logits) in {done.t_decode_s * 1000:.1f} ms."]
    if window:
        parts.append(f"{len(window)} of them are the lookahead window's guesses, kept to grow the n-gram pool.")
    if candidates:
        parts.append(f"{len(candidates)} candidate token{'s' if len(candidates) != 1 else ''} verified; "
                     f"{len(accepted)} accepted.")
        if rejected:
            first = min(rejected, key=lambda r: r.pos)
            depth = first.pos - next(r.pos for r in rows if r.role == "input")
            chosen = done.tokens[depth - 1].text if 0 < depth <= len(done.tokens) else "?"
            parts.append(f"First mismatch at position {first.pos}: the candidate was {first.text!r}, "
                         f"the target chose {chosen!r}.")
    else:
        parts.append("Nothing to verify: a plain step.")
    emitted = "".join(t.text for t in done.tokens)
    parts.append(f"Emitted {len(done.tokens)} token{'s' if len(done.tokens) != 1 else ''}: {emitted!r}.")
    return " ".join(parts)


class StepInspector(QtWidgets.QWidget):
    """Back and forward through a run's recorded steps; forward past the last one asks the
    paused run (or the replay) for one more."""

    forward_requested = QtCore.Signal()  # past the newest recorded step: decode one more
    pause_toggled = QtCore.Signal(bool)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.record: RunRecord | None = None
        self.current: int | None = None
        self.follow = True  # show the newest step as it arrives, until the user goes back
        self.back_button = QtWidgets.QPushButton("◀ Back")
        self.forward_button = QtWidgets.QPushButton("Step ▶")
        self.forward_button.setToolTip("The next recorded step, or — at the newest — one more decode of the paused run")
        self.pause_button = QtWidgets.QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.setToolTip("Hold the run after its current step (also before a run: it stops after step 0)")
        self.step_label = QtWidgets.QLabel("No run yet")
        self.step_label.setWordWrap(True)
        self.back_button.clicked.connect(self.back)
        self.forward_button.clicked.connect(self.forward)
        self.pause_button.toggled.connect(self._pause_toggled)
        nav = QtWidgets.QHBoxLayout()
        for w in (self.pause_button, self.back_button, self.forward_button):
            nav.addWidget(w)
        nav.addWidget(self.step_label, 1)

        self.picture = BatchPicture()
        scroll = QtWidgets.QScrollArea()
        scroll.setWidget(self.picture)
        scroll.setWidgetResizable(False)
        # its width is the column's, never the batch's: a wide batch scrolls sideways
        scroll.setSizePolicy(QtWidgets.QSizePolicy.Ignored, QtWidgets.QSizePolicy.Fixed)
        self.scroll = scroll
        legend = QtWidgets.QLabel(" &nbsp; ".join(
            f"<span style='color:{c}; font-size: 13pt'>■</span>&nbsp;{ROLE_LABELS[r].split(' (')[0]}"
            for r, c in ROLE_COLOURS.items())
            + " &nbsp; <b style='color:#009E73'>▢</b> accepted &nbsp; <b style='color:#D55E00'>▨</b> first mismatch"
            + " &nbsp; ■ row with logits")
        legend.setWordWrap(True)
        self.summary = QtWidgets.QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.kv_before = KvMapView()
        self.kv_after = KvMapView()
        for view in (self.kv_before, self.kv_after):
            view.hover_label.hide()
            view.plot.setMinimumHeight(110)
            view.plot.setMaximumHeight(260)
        self.kv_before.top.hide()  # one colouring and legend (the after map's) for both
        self.kv_after.colouring_box.currentIndexChanged.connect(
            lambda i: self.kv_before.colouring_box.setCurrentIndex(i))
        # One column in a scroll area: wrapped labels keep their height for any width, and a
        # short window scrolls instead of squeezing the pictures over each other.
        body = QtWidgets.QWidget()
        bl = QtWidgets.QVBoxLayout(body)
        bl.setContentsMargins(0, 0, 0, 0)
        heading = QtWidgets.QLabel("The batch sent to the target (columns: batch rows)")
        heading.setWordWrap(True)
        bl.addWidget(heading)
        bl.addWidget(scroll)
        bl.addWidget(legend)
        bl.addWidget(self.summary)
        # short titles: a group box's title never wraps, so it sets the column's narrowest width
        bl.addWidget(self._titled("KV cells before", self.kv_before), 1)
        bl.addWidget(self._titled("KV cells after the decode", self.kv_after), 1)
        bl.addStretch(0)
        outer = QtWidgets.QScrollArea()
        outer.setWidget(body)
        outer.setWidgetResizable(True)
        outer.setFrameShape(QtWidgets.QFrame.NoFrame)
        outer.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(nav)
        layout.addWidget(outer, 1)
        self.paused_run = False  # a live run waits for Step
        self._update_buttons()

    @staticmethod
    def _titled(title: str, widget: QtWidgets.QWidget) -> QtWidgets.QWidget:
        box = QtWidgets.QGroupBox(title)
        QtWidgets.QVBoxLayout(box).addWidget(widget)
        box.layout().setContentsMargins(4, 4, 4, 4)
        return box

    def set_background(self, colour: QtGui.QColor) -> None:
        self.kv_before.set_background(colour)
        self.kv_after.set_background(colour)

    def set_record(self, record: RunRecord) -> None:
        self.record = record
        self.current = None
        self.follow = True
        self.refresh()

    def refresh(self) -> None:
        """New steps arrived: follow the newest unless the user went back."""
        steps = self.record.step_numbers if self.record else []
        if steps and (self.follow or self.current is None):
            self.show_step(steps[-1])
        else:
            self._update_buttons()

    def show_step(self, step: int) -> None:
        record = self.record
        if record is None:
            return
        self.current = step
        batch, done = record.batches.get(step), record.steps.get(step)
        self.picture.set_rows(batch.rows if batch is not None else ())
        # the whole batch in view (a scroll bar's worth of room below it), within reason
        self.scroll.setFixedHeight(min(self.picture.minimumHeight() + 22, 420))
        self.summary.setText(describe_step(batch, done))
        started = record.started
        lookahead = started is not None and registry.mode(started.config.get("mode", "plain")).settings == "lookahead"
        window = int(started.config.get("W", 0)) if lookahead else 0
        n_prompt = started.n_prompt if started else 0
        for view in (self.kv_before, self.kv_after):
            view.begin_run(window, n_prompt)
            view.add_tokens(t.source for s in record.step_numbers if s <= step for t in record.steps[s].tokens)
        before = record.snapshot_before(step)
        if before is not None:  # the cells as the previous step left them, its verification done
            self.kv_before.set_snapshot(before.after_verification())
        after = record.snapshots.get(step)
        if after is not None:
            self.kv_after.set_snapshot(after)
        self._update_buttons()

    def back(self) -> None:
        steps = self.record.step_numbers if self.record else []
        earlier = [s for s in steps if self.current is not None and s < self.current]
        if earlier:
            self.follow = False
            self.show_step(earlier[-1])

    def forward(self) -> None:
        steps = self.record.step_numbers if self.record else []
        later = [s for s in steps if self.current is not None and s > self.current]
        if later:
            self.follow = later[0] == steps[-1]
            self.show_step(later[0])
        else:
            self.follow = True
            self.forward_requested.emit()

    def _pause_toggled(self, on: bool) -> None:
        self.pause_toggled.emit(on)
        self._update_buttons()

    def set_paused(self, paused: bool) -> None:
        """The window's pause state (space in presentation mode toggles it too)."""
        if self.pause_button.isChecked() != paused:
            self.pause_button.blockSignals(True)
            self.pause_button.setChecked(paused)
            self.pause_button.blockSignals(False)
        self._update_buttons()

    def _update_buttons(self) -> None:
        steps = self.record.step_numbers if self.record else []
        self.back_button.setEnabled(bool(steps) and self.current is not None and self.current > steps[0])
        self.pause_button.setText("Resume" if self.pause_button.isChecked() else "Pause")
        if self.current is None or not steps:
            self.step_label.setText("No step recorded yet")
        else:
            self.step_label.setText(f"Step {self.current} of {steps[-1]}"
                                    + (" · the run waits: Step decodes one more" if self.paused_run else ""))
