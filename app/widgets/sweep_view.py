"""Sweep results drawn with pyqtgraph: a W×G heatmap per N for lookahead, a k curve for drafting.

Colour is the measured speed-up on a log scale centred on 1.0 (red slower than plain, white equal,
teal faster), so a 2× win and a 2× loss are equally strong; the 1.0 contour is drawn. A cell not
measured yet is grey. The same widgets fill in live in the Tune panel and are exported to PNG
offscreen by :mod:`app.sweep_plots`.
"""

from __future__ import annotations

import math

import numpy as np

from specdec_studio.app.qt import QtCore, Signal, pg

UNMEASURED_RGBA = (150, 150, 150, 255)
SLOWER_RGB = np.array((192, 57, 43), dtype=float)
EQUAL_RGB = np.array((250, 250, 250), dtype=float)
FASTER_RGB = np.array((17, 138, 130), dtype=float)
MIN_HALF_RANGE = math.log2(1.25)  # the colour scale spans at least 0.8×–1.25×


def speedup_lut() -> np.ndarray:
    """256 colours from slower (0) through equal (127.5) to faster (255), plus grey at index 0
    reserved for unmeasured cells (so the scale itself starts at 1)."""
    t = np.linspace(-1.0, 1.0, 255)[:, None]
    lower = EQUAL_RGB + (SLOWER_RGB - EQUAL_RGB) * np.clip(-t, 0, 1)
    upper = EQUAL_RGB + (FASTER_RGB - EQUAL_RGB) * np.clip(t, 0, 1)
    rgb = np.where(t < 0, lower, upper)
    lut = np.empty((256, 4), dtype=np.uint8)
    lut[0] = UNMEASURED_RGBA
    lut[1:, :3] = np.round(rgb).astype(np.uint8)
    lut[1:, 3] = 255
    return lut


def colour_indices(values: np.ndarray, half_range: float) -> np.ndarray:
    """uint8 LUT indices for speed-ups (NaN → 0, the grey of an unmeasured cell)."""
    out = np.zeros(values.shape, dtype=np.uint8)
    ok = np.isfinite(values) & (values > 0)
    scaled = np.clip(np.log2(values[ok]) / half_range, -1.0, 1.0)
    out[ok] = np.round(1 + (scaled + 1) / 2 * 254).astype(np.uint8)
    return out


def cell_lookup(result: dict) -> dict[tuple, dict]:
    """Measured cells by their setting's values (in axis order)."""
    axes = list(result["spec"]["axes"])
    return {tuple(c["setting"][a] for a in axes): c for c in result.get("cells", [])}


def describe_cell(cell: dict | None, setting: dict) -> str:
    from specdec_studio.engine.tuning.sweep import setting_label

    label = setting_label(setting)
    if cell is None:
        return f"{label}: not measured yet"
    lines = [label, f"measured {cell['measured']:.2f}× plain"]
    if cell.get("predicted") is not None:
        lines[-1] += f" · predicted {cell['predicted']:.2f}×"
    lines.append(f"{cell['tokens_per_step']:.2f} tokens/step · {cell['tokens_per_second']:.1f} tok/s "
                 f"(plain {cell['plain_tokens_per_second']:.1f})")
    if cell.get("acceptance") is not None:
        lines.append(f"acceptance {100 * cell['acceptance']:.0f}%")
    if not cell["lossless"]:
        lines.append("output differs from plain: " + ", ".join(
            f"{d['prompt']} at token {d['token']} (plain's margin {d['margin']:.3f})" for d in cell["divergences"]))
    return "\n".join(lines)


class SpeedupHeatmap(pg.PlotWidget):
    """Lookahead: W across, G up, one N at a time; hover describes a cell, a click picks it."""

    cell_clicked = Signal(dict)  # the setting
    cell_hovered = Signal(str)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.setMouseEnabled(x=False, y=False)
        self.hideButtons()
        self.image = pg.ImageItem(axisOrder="row-major")
        self.image.setLookupTable(speedup_lut())
        self.addItem(self.image)
        self.contour = pg.IsocurveItem(level=0.0, pen=pg.mkPen((20, 20, 20), width=2, style=QtCore.Qt.DashLine))
        self.contour.setParentItem(self.image)
        self.setLabel("bottom", "W (window)")
        self.setLabel("left", "G (verification n-grams)")
        self._labels: list[pg.TextItem] = []
        self.result: dict | None = None
        self.n_value: int | None = None
        self.w_values: list[int] = []
        self.g_values: list[int] = []
        self.scene().sigMouseMoved.connect(self._on_move)
        self.scene().sigMouseClicked.connect(self._on_click)

    def clear_result(self) -> None:
        self.result = None
        self.image.clear()
        self.contour.setData(None)
        for item in self._labels:
            self.removeItem(item)
        self._labels = []
        self.setTitle("no sweep yet: choose axes and prompts, then Run sweep")

    def set_result(self, result: dict, n_value: int) -> None:
        self.result, self.n_value = result, n_value
        axes = result["spec"]["axes"]
        self.w_values, self.g_values = list(axes["W"]), list(axes["G"])
        cells = cell_lookup(result)
        order = list(axes)
        grid = np.full((len(self.g_values), len(self.w_values)), np.nan)
        for gi, g in enumerate(self.g_values):
            for wi, w in enumerate(self.w_values):
                values = {"N": n_value, "W": w, "G": g}
                cell = cells.get(tuple(values[a] for a in order))
                if cell is not None:
                    grid[gi, wi] = cell["measured"]
        finite = grid[np.isfinite(grid) & (grid > 0)]
        half = max(MIN_HALF_RANGE, float(np.abs(np.log2(finite)).max()) if finite.size else 0.0)
        self.image.setImage(colour_indices(grid, half), autoLevels=False, levels=(0, 255))
        self.image.setRect(QtCore.QRectF(-0.5, -0.5, len(self.w_values), len(self.g_values)))
        # contour of log2(speed-up) = 0, on a copy where unmeasured cells do not draw a line
        logs = np.where(np.isfinite(grid) & (grid > 0), np.log2(np.where(grid > 0, grid, 1.0)), np.nan)
        self.contour.setData(np.nan_to_num(logs, nan=-half).T if finite.size else None)
        for item in self._labels:
            self.removeItem(item)
        self._labels = []
        for gi in range(len(self.g_values)):
            for wi in range(len(self.w_values)):
                if np.isfinite(grid[gi, wi]):
                    text = pg.TextItem(f"{grid[gi, wi]:.2f}", color=(20, 20, 20), anchor=(0.5, 0.5))
                    text.setPos(wi, gi)
                    self.addItem(text)
                    self._labels.append(text)
        self.getAxis("bottom").setTicks([[(i, str(w)) for i, w in enumerate(self.w_values)]])
        self.getAxis("left").setTicks([[(i, str(g)) for i, g in enumerate(self.g_values)]])
        self.setTitle(f"measured speed-up, N = {n_value} (dashed: 1.0×)")
        self.setXRange(-0.5, len(self.w_values) - 0.5, padding=0.02)
        self.setYRange(-0.5, len(self.g_values) - 0.5, padding=0.02)

    def setting_at(self, scene_pos) -> dict | None:
        if self.result is None or not self.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.plotItem.vb.mapSceneToView(scene_pos)
        wi, gi = int(round(p.x())), int(round(p.y()))
        if 0 <= wi < len(self.w_values) and 0 <= gi < len(self.g_values):
            return {"N": self.n_value, "W": self.w_values[wi], "G": self.g_values[gi]}
        return None

    def _cell(self, setting: dict) -> dict | None:
        order = list(self.result["spec"]["axes"])
        return cell_lookup(self.result).get(tuple(setting[a] for a in order))

    def _on_move(self, scene_pos) -> None:
        setting = self.setting_at(scene_pos)
        if setting is not None:
            text = describe_cell(self._cell(setting), setting)
            self.setToolTip(text)
            self.cell_hovered.emit(text)

    def _on_click(self, event) -> None:
        setting = self.setting_at(event.scenePos())
        if setting is not None:
            self.cell_clicked.emit(setting)


class SpeedupCurve(pg.PlotWidget):
    """Prompt lookup and draft model: speed-up against k, measured (solid) and predicted (dashed),
    one pair of lines per drafter policy and adaptive rule."""

    cell_clicked = Signal(dict)
    cell_hovered = Signal(str)
    PALETTE = [(17, 138, 130), (52, 101, 164), (204, 121, 167), (230, 159, 0)]

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.addLegend(offset=(-10, 10), brush=pg.mkBrush(255, 255, 255, 200), pen=pg.mkPen(200, 200, 200))
        self.setLabel("bottom", "k (tokens drafted per step)")
        self.setLabel("left", "speed-up over plain")
        self.showGrid(x=True, y=True, alpha=0.2)
        self.result: dict | None = None
        self._points: list[tuple[float, float, dict]] = []
        self.scene().sigMouseMoved.connect(self._on_move)
        self.scene().sigMouseClicked.connect(self._on_click)

    def set_result(self, result: dict) -> None:
        self.result = result
        self.clear()
        self.plotItem.legend.clear()
        self.addItem(pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen((20, 20, 20), width=1, style=QtCore.Qt.DashLine)))
        groups: dict[tuple, list[dict]] = {}
        plain = [c for c in result.get("cells", []) if c["setting"].get("k") == 0]
        for cell in result.get("cells", []):
            if cell["setting"].get("k") != 0:
                key = tuple((a, v) for a, v in cell["setting"].items() if a != "k")
                groups.setdefault(key, []).append(cell)
        if not groups and plain:
            groups[()] = []
        for cells in groups.values():  # k = 0 is plain decoding, measured once, the start of every line
            cells.extend(plain)
        for i, (key, cells) in enumerate(sorted(groups.items())):
            cells.sort(key=lambda c: c["setting"]["k"])
            colour = self.PALETTE[i % len(self.PALETTE)]
            name = " ".join(f"{v}" for _a, v in key) or "measured"
            ks = np.array([c["setting"]["k"] for c in cells], dtype=float)
            measured = np.array([c["measured"] for c in cells])
            self.plot(ks, measured, pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=7,
                      symbolBrush=colour, name=f"{name} measured")
            predicted = [c.get("predicted") for c in cells]
            if all(p is not None for p in predicted):
                self.plot(ks, np.array(predicted), pen=pg.mkPen(colour, width=1.5, style=QtCore.Qt.DashLine),
                          name=f"{name} predicted")
        self._points = [(c["setting"]["k"], c["measured"], c) for c in result.get("cells", [])]
        best = result.get("best")
        self.setTitle("measured (solid) and predicted (dashed) speed-up" +
                      (f" · best k = {next(c['setting']['k'] for c in result['cells'] if c['index'] == best)}"
                       if best is not None and result.get("cells") else ""))

    def _nearest(self, scene_pos) -> dict | None:
        if not self._points or not self.sceneBoundingRect().contains(scene_pos):
            return None
        p = self.plotItem.vb.mapSceneToView(scene_pos)
        k, _y, cell = min(self._points, key=lambda t: abs(t[0] - p.x()) + 0.2 * abs(t[1] - p.y()))
        return cell if abs(k - p.x()) <= 0.5 else None

    def _on_move(self, scene_pos) -> None:
        cell = self._nearest(scene_pos)
        if cell is not None:
            text = describe_cell(cell, cell["setting"])
            self.setToolTip(text)
            self.cell_hovered.emit(text)

    def _on_click(self, event) -> None:
        cell = self._nearest(event.scenePos())
        if cell is not None:
            self.cell_clicked.emit(dict(cell["setting"]))


class ProfilePlot(pg.PlotWidget):
    """The batch-cost profile: T(B)/T(1) against B on log axes, with the ideal flat line B = 1 cost
    and the linear B× line for reference; a strategy wins where tokens per step beat the curve."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setMenuEnabled(False)
        self.hideButtons()
        self.setLogMode(x=True, y=True)
        self.addLegend(offset=(10, 10))
        self.setLabel("bottom", "B (tokens in one decode)")
        self.setLabel("left", "T(B) / T(1)")
        self.showGrid(x=True, y=True, alpha=0.2)
        # log mode places ticks at log10 of the value; name the powers of two the strategies use
        self.getAxis("bottom").setTicks([[(math.log10(b), str(b)) for b in (1, 2, 4, 8, 16, 32, 64, 128)]])
        self.getAxis("left").setTicks([[(math.log10(v), str(v)) for v in (1, 2, 5, 10, 20, 50, 100)]])

    def set_profiles(self, target: dict | None, draft: dict | None = None) -> None:
        self.clear()
        self.plotItem.legend.clear()
        if target is None:
            self.setTitle("no batch-cost profile yet")
            return
        sizes = np.array(target["sizes"], dtype=float)
        self.plot(sizes, sizes, pen=pg.mkPen((160, 160, 160), width=1, style=QtCore.Qt.DashLine),
                  name="B× (no batching gain)")
        t1 = target["t_all_logits_s"][0]
        self.plot(sizes, np.array(target["t_all_logits_s"]) / t1, pen=pg.mkPen((52, 101, 164), width=2),
                  symbol="o", symbolSize=5, name="target, logits for every row")
        self.plot(sizes, np.array(target["t_last_logit_s"]) / t1, pen=pg.mkPen((17, 138, 130), width=1.5),
                  name="target, last row's logits only")
        if draft is not None:
            self.plot(np.array(draft["sizes"], dtype=float), np.array(draft["t_all_logits_s"]) / t1,
                      pen=pg.mkPen((204, 121, 167), width=1.5), name="draft (in target T(1) units)")
        key = target["key"]
        self.setTitle(f"T(1) = {1e3 * t1:.1f} ms · {key['n_threads']} threads · KV fill {key['kv_fill']}")
