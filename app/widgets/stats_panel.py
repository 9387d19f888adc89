"""The run's figures and two plots: accepted tokens per step over the run, and the histogram of
tokens per step."""

from __future__ import annotations

import numpy as np

from specdec_studio.app.qt import Qt, QtWidgets, pg
from specdec_studio.app.widgets.empty_state import EmptyState, WholeAxis
from specdec_studio.app.widgets.speedup_plot import SpeedupPlot
from specdec_studio.engine.tuning.speedup_curve import run_point


class StatsPanel(QtWidgets.QWidget):
    FIELDS = ["tokens/s", "tokens", "steps", "tokens/step", "accepted / drafted", "acceptance", "k", "speed-up",
              "predicted"]

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QtWidgets.QGridLayout()
        self.values: dict[str, QtWidgets.QLabel] = {}
        for i, name in enumerate(self.FIELDS):
            label = QtWidgets.QLabel(name)
            label.setStyleSheet("color: palette(mid);")
            label.setWordWrap(True)  # a narrow panel wraps a name, never cuts it
            value = QtWidgets.QLabel("–")
            font = value.font()
            font.setPointSize(font.pointSize() + 3)
            font.setBold(True)
            value.setFont(font)
            grid.addWidget(label, 2 * (i // 3), i % 3)  # three columns: fits a narrow panel
            grid.addWidget(value, 2 * (i // 3) + 1, i % 3)
            self.values[name] = value
        self.values["speed-up"].setToolTip(
            "Measured against a plain run of the same prompt once one is measured; until then the "
            "cost model's prediction (≈) from the batch-cost profile and this run's own acceptance")
        self.values["predicted"].setToolTip(
            "The cost model's speed-up for this run: tokens per step over the step's cost, priced with "
            "the batch-cost profile (Profile tab) for the decodes the run really made")
        self.baseline_button = QtWidgets.QPushButton("Measure plain baseline")
        self.baseline_button.setToolTip("Run the same prompt with plain decoding to measure the speed-up")
        self.accept_plot = pg.PlotWidget(title="accepted per step",
                                         axisItems={"bottom": WholeAxis("bottom"), "left": WholeAxis("left")})
        self.accept_plot.setLabel("bottom", "step")
        # a line without symbols: a symbol per step is the plot's largest painting cost in a long run
        self.accept_curve = self.accept_plot.plot([], [], pen=pg.mkPen((10, 165, 192), width=1.5))
        self.hist_plot = pg.PlotWidget(title="steps by tokens emitted",
                                       axisItems={"bottom": WholeAxis("bottom"), "left": WholeAxis("left")})
        self.hist_plot.setLabel("bottom", "tokens in a step")
        # a stepped, filled curve: one item whose data is replaced, no per-bar objects
        self.hist_curve = self.hist_plot.plot([0, 1], [0], stepMode="center", fillLevel=0,
                                              brush=(52, 152, 219, 180), pen=pg.mkPen((52, 152, 219), width=1.5))
        # Auto's calibration: its predicted acceptance against what verification then found
        self.calibration_plot = pg.PlotWidget(title="Auto calibration")
        self.calibration_plot.setLabel("bottom", "predicted")
        self.calibration_plot.setLabel("left", "observed")
        self.calibration_plot.setXRange(0, 1)
        self.calibration_plot.setYRange(0, 1)
        self.calibration_plot.plot([0, 1], [0, 1], pen=pg.mkPen((150, 150, 150), style=Qt.DashLine))
        self.calibration_points = pg.ScatterPlotItem(brush=(230, 126, 34, 200), pen=None)
        self.calibration_plot.addItem(self.calibration_points)
        self.calibration_plot.setVisible(False)
        # what an acceptance buys at each k here, with this run's measured point on it
        self.speedup_plot = SpeedupPlot()
        self.t_plain_s: float | None = None  # plain decoding's step time from the profile
        self.baseline_tps: float | None = None  # a plain run of the same prompt, once measured
        for plot in (self.accept_plot, self.hist_plot, self.calibration_plot):
            plot.setMenuEnabled(False)
            plot.setMinimumHeight(95)
        for plot in (self.accept_plot, self.hist_plot):
            plot.disableAutoRange()  # refresh sets whole-unit ranges itself, only when they grow
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(grid)
        # a draft model's break-even on this machine, from the two profiles (speculative runs)
        self.break_even = QtWidgets.QLabel("")
        self.break_even.setWordWrap(True)
        self.break_even.hide()
        layout.addWidget(self.break_even)
        layout.addWidget(self.baseline_button)
        plots_box = QtWidgets.QWidget()
        # two rows: a narrow panel fits two plots side by side, never four
        plots = QtWidgets.QGridLayout(plots_box)
        plots.setContentsMargins(0, 0, 0, 0)
        plots.addWidget(self.accept_plot, 0, 0)
        plots.addWidget(self.hist_plot, 0, 1)
        plots.addWidget(self.speedup_plot, 1, 0, 1, 2)
        plots.addWidget(self.calibration_plot, 1, 1)
        self.plots_grid = plots
        self.plots = EmptyState(plots_box, "Run a prompt to see how many tokens each step accepts and emits.")
        layout.addWidget(self.plots, 1)
        self.reset()

    def set_background(self, colour) -> None:
        for plot in (self.accept_plot, self.hist_plot, self.calibration_plot):
            plot.setBackground(colour)
        self.speedup_plot.set_background(colour)

    def reset(self) -> None:
        self.steps: list[int] = []
        self.accepted: list[int] = []
        self.tokens_per_step: list[int] = []
        self.n_tokens = self.n_drafted = self.n_accepted = 0
        self.elapsed_s = 0.0
        self.k = None
        self.k_steps: dict[int, int] = {}  # drafting steps per draft length k
        self.predicted: float | None = None
        self.baseline_tps = None
        self.speedup_plot.set_point(None)
        for value in self.values.values():
            value.setText("–")
        self.accept_curve.setData([], [])
        self.hist_curve.setData([0, 1], [0])
        self.calibration_plot.setVisible(False)
        self.plots.show_content(False)
        self._ranges = None  # the plots' axis ranges (see refresh)
        self._dirty = True

    def add_step(self, event, elapsed_s: float) -> None:
        self.steps.append(event.step)
        self.accepted.append(event.n_accepted)
        self.tokens_per_step.append(len(event.tokens))
        self.n_tokens += len(event.tokens)
        self.n_drafted += event.n_drafted
        self.n_accepted += event.n_accepted
        # the draft length of the run (a last step with no room to draft says 0: not the run's k)
        self.k = event.extra.get("k") or self.k
        if event.n_drafted:  # the run's point is put on the curve of its most frequent k
            self.k_steps[self.k] = self.k_steps.get(self.k, 0) + 1
        self.elapsed_s = elapsed_s
        self._dirty = True

    def refresh(self) -> None:
        """Repaint from the counters (called from the window's paint timer, never per token)."""
        if not self._dirty or not self.steps:
            return
        self._dirty = False
        v = self.values
        steps = len(self.steps)
        v["tokens"].setText(str(self.n_tokens))
        v["steps"].setText(str(steps))
        v["tokens/step"].setText(f"{self.n_tokens / steps:.2f}")
        v["accepted / drafted"].setText(f"{self.n_accepted} / {self.n_drafted}")
        v["acceptance"].setText(f"{100 * self.n_accepted / self.n_drafted:.1f}%" if self.n_drafted else "–")
        v["k"].setText(str(self.k) if self.k is not None else "–")
        if self.elapsed_s > 0:
            v["tokens/s"].setText(f"{self.n_tokens / self.elapsed_s:.1f}")
            self._place_run(self.n_tokens / self.elapsed_s)
        self.plots.show_content()
        self.accept_curve.setData(np.asarray(self.steps), np.asarray(self.accepted))
        counts = np.bincount(np.asarray(self.tokens_per_step))
        edges = np.arange(counts.size + 1) - 0.5
        self.hist_curve.setData(edges, counts.astype(float))
        # whole steps and whole tokens, from 0: a run of one step still has a meaningful range. The
        # range is set only when it grows past the last one (by half): every change re-lays the axes
        ranges = (max(self.steps[-1], 1), max(max(self.accepted), 1), counts.size, max(int(counts.max()), 1))
        if self._ranges is None or any(new > old for new, old in zip(ranges, self._ranges)):
            self._ranges = (int(ranges[0] * 1.5) + 1, ranges[1], ranges[2], int(ranges[3] * 1.5) + 1)
            self.accept_plot.setXRange(0, self._ranges[0], padding=0.02)
            self.accept_plot.setYRange(0, self._ranges[1], padding=0.05)
            self.hist_plot.setXRange(-0.5, self._ranges[2] - 0.5, padding=0.02)
            self.hist_plot.setYRange(0, self._ranges[3], padding=0.05)

    def finish(self, stats: dict, baseline_tps: float | None, predicted: float | None) -> None:
        self.values["tokens/s"].setText(f"{stats['tokens_per_second']:.1f}")
        self.predicted = predicted
        self.values["predicted"].setText(f"{predicted:.2f}×" if predicted is not None else "–")
        self.set_speedup(stats["tokens_per_second"], baseline_tps)
        self.set_calibration(stats.get("auto", {}).get("calibration"))

    def set_break_even(self, words: str | None) -> None:
        """The draft's break-even in one sentence (None hides it)."""
        self.break_even.setText("Break-even: " + words if words else "")
        self.break_even.setVisible(bool(words))

    def set_calibration(self, table: list[dict] | None) -> None:
        """Auto's calibration bins (predicted, observed, n); hidden for the other modes. Shown, it
        takes the speed-up plot's right half: a third row of plots does not fit a laptop's screen."""
        self.calibration_plot.setVisible(bool(table))
        self.plots_grid.addWidget(self.speedup_plot, 1, 0, 1, 1 if table else 2)
        if not table:
            return
        n = np.asarray([row["n"] for row in table], dtype=float)
        self.calibration_points.setData([row["predicted"] for row in table], [row["observed"] for row in table],
                                        size=4 + 10 * np.sqrt(n / n.max()),
                                        data=[f"n={int(c)}" for c in n])

    def _place_run(self, tokens_per_second: float) -> None:
        """The run's point on the speed-up curve (needs the profile's plain step time)."""
        k = max(self.k_steps, key=self.k_steps.get) if self.k_steps else None
        self.speedup_plot.set_point(run_point(self.n_drafted, self.n_accepted, k, tokens_per_second,
                                              self.t_plain_s or 0.0, self.baseline_tps))

    def set_speedup(self, tps: float, baseline_tps: float | None) -> None:
        """Measured speed-up when a plain baseline is known, else the prediction marked with ≈."""
        self.baseline_tps = baseline_tps
        self._place_run(tps)
        if baseline_tps:
            self.values["speed-up"].setText(f"{tps / baseline_tps:.2f}×")
        elif self.predicted is not None:
            self.values["speed-up"].setText(f"≈{self.predicted:.2f}×")
        else:
            self.values["speed-up"].setText("–")
