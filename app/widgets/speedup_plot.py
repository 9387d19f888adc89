"""The speed-up curve: predicted speed-up over plain decoding against per-token acceptance for
k = 1…8 on this machine (:mod:`engine.tuning.speedup_curve`), the break-even line, and the run's
measured point moving on it."""

from __future__ import annotations

import numpy as np

from specdec_studio.app.qt import Qt, QtWidgets, pg
from specdec_studio.app.widgets.empty_state import EmptyState
from specdec_studio.engine.tuning.speedup_curve import RunPoint, SpeedupCurves

NO_PROFILE = "The speed-up curve needs this machine's batch-cost profile (Profile tab: Measure)."


def _k_colour(i: int, n: int) -> tuple[int, int, int]:
    """k = 1 light to k = 8 dark along one hue: the eye reads the order without a legend."""
    t = i / max(1, n - 1)
    return int(120 - 90 * t), int(190 - 110 * t), int(235 - 60 * t)


class SpeedupPlot(QtWidgets.QWidget):
    """One plot; the window gives it curves when a profile changes and the run's point as it runs."""

    def __init__(self, title: str = "speed-up by acceptance", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        # k = 1 light … k = 8 dark, the two ends labelled: eight legend rows would cover the curves
        # of a small plot, and a long title would set a narrow panel's width
        self.plot = pg.PlotWidget(title=title)
        self.end_labels = [pg.TextItem("", anchor=(1, 0.5)) for _ in range(2)]
        for label in self.end_labels:
            self.plot.addItem(label)
        self.plot.setMenuEnabled(False)
        self.plot.setMinimumHeight(95)
        self.plot.setLabel("bottom", "per-token acceptance α")
        self.plot.setLabel("left", "speed-up ×")
        self.plot.setXRange(0, 1, padding=0.02)
        self.break_even_line = pg.InfiniteLine(
            pos=1.0,
            angle=0,
            pen=pg.mkPen((150, 150, 150), style=Qt.DashLine),
            label="break-even",
            labelOpts={"position": 0.1, "color": (150, 150, 150)},
        )
        self.plot.addItem(self.break_even_line)
        self.k_curves: list[pg.PlotDataItem] = []
        self.point = pg.ScatterPlotItem(size=12, brush=(230, 126, 34, 230), pen=pg.mkPen("w", width=1.5))
        self.point.setZValue(10)
        self.plot.addItem(self.point)
        self.point_label = pg.TextItem("", color=(230, 126, 34), anchor=(0, 1))
        self.plot.addItem(self.point_label)
        self.curves: SpeedupCurves | None = None
        self.run_point: RunPoint | None = None
        self.view = EmptyState(self.plot, NO_PROFILE)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view)

    def set_background(self, colour) -> None:
        self.plot.setBackground(colour)

    def set_curves(self, curves: SpeedupCurves | None) -> None:
        """The curves of this machine's profile(s); None shows what the plot needs instead."""
        self.curves = curves
        for item in self.k_curves:
            self.plot.removeItem(item)
        self.k_curves = []
        self.view.show_content(curves is not None)
        if curves is None:
            for label in self.end_labels:
                label.setText("")
            self.set_point(None)
            return
        for i in range(len(curves.ks)):
            item = self.plot.plot(
                curves.alphas, curves.speedups[i], pen=pg.mkPen(_k_colour(i, len(curves.ks)), width=1.5)
            )
            self.k_curves.append(item)
        for label, i in zip(self.end_labels, (0, len(curves.ks) - 1)):
            label.setText(f"k={curves.ks[i]}")
            label.setColor(_k_colour(i, len(curves.ks)))
            label.setPos(0.98, float(curves.speedups[i][-1]))
        top = float(np.nanmax(curves.speedups))
        self.plot.setYRange(0, max(1.5, top * 1.05), padding=0.02)
        self.plot.setToolTip(self.tooltip())
        self._highlight()

    def set_point(self, point: RunPoint | None) -> None:
        """The run's measured (α, speed-up), or None (no run, or one that drafted nothing).
        Called at the figures' paint rate: an unchanged point repaints nothing."""
        if point == self.run_point:
            return
        k_changed = (point.k if point else None) != (self.run_point.k if self.run_point else None)
        self.run_point = point
        if point is None:
            self.point.setData([], [])
            self.point_label.setText("")
        else:
            self.point.setData([point.alpha], [point.speedup])
            self.point_label.setText(f"this run: k={point.k}, α {point.alpha:.2f}, {point.speedup:.2f}×")
            self.point_label.setPos(min(point.alpha, 0.55), point.speedup)
        if k_changed:
            self._highlight()

    def _highlight(self) -> None:
        """The run's own k drawn bold."""
        if self.curves is None:
            return
        k = self.run_point.k if self.run_point is not None else None
        for i, (item, curve_k) in enumerate(zip(self.k_curves, self.curves.ks)):
            item.setPen(pg.mkPen(_k_colour(i, len(self.curves.ks)), width=3.5 if curve_k == k else 1.5))

    def tooltip(self) -> str:
        if self.curves is None:
            return NO_PROFILE
        cost = "the verification and the draft model's decodes" if self.curves.with_draft else "the verification"
        parts = [
            f"k={k}: " + ("never" if b is None else f"α above {b:.2f}")
            for k, b in zip(self.curves.ks, self.curves.break_even)
        ]
        return (f"Predicted speed-up over plain decoding on this machine for k = 1 (lightest) to 8 (darkest), "
                f"pricing {cost} with the measured "
                f"batch-cost profile(s). Break-even: " + ", ".join(parts) + ". The dot: the run's measured point.")
