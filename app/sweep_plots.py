"""Draw a sweep's results to PNG offscreen: ``python -m app.sweep_plots results.json OUT_DIR``.

Lookahead sweeps give one heatmap per N (``heatmap-N3.png``: W across, G up, colour = measured
speed-up, dashed 1.0 contour); drafting sweeps give the k curve (``k-curve.png``). Drawn with the
app's own widgets and pyqtgraph's ImageExporter, so the PNGs look like the Tune panel. Prints the
paths written, one a line. ``specdec sweep`` runs this in a child process: the engine never
imports Qt.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from specdec_studio.engine.strategies import registry

PNG_SIZE = (720, 540)


def export_plots(result: dict, out_dir: str | Path) -> list[Path]:
    """Write the PNGs of ``result`` into ``out_dir``; needs a QApplication."""
    from pyqtgraph.exporters import ImageExporter

    from specdec_studio.app.widgets.sweep_view import SpeedupCurve, SpeedupHeatmap

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if len(registry.mode(result["spec"]["mode"]).sweep_axes) > 1:  # a grid: one heatmap per N
        for n in result["spec"]["axes"]["N"]:
            plot = SpeedupHeatmap()
            plot.resize(*PNG_SIZE)
            plot.set_result(result, n)
            written.append(_export(ImageExporter, plot, out / f"heatmap-N{n}.png"))
    else:
        plot = SpeedupCurve()
        plot.resize(*PNG_SIZE)
        plot.set_result(result)
        written.append(_export(ImageExporter, plot, out / "k-curve.png"))
    return written


def _export(exporter_type, plot, path: Path) -> Path:
    from specdec_studio.app.exports import png_bytes
    from specdec_studio.app.qt import QtWidgets
    from specdec_studio.engine.jsonfile import write_bytes

    plot.setBackground("w")
    plot.show()  # lay the plot out (title, axes) before it is rendered
    QtWidgets.QApplication.processEvents()
    exporter = exporter_type(plot.plotItem)
    exporter.parameters()["width"] = PNG_SIZE[0]
    write_bytes(path, png_bytes(exporter.export(toBytes=True)), shared=True)  # whole or not at all
    plot.deleteLater()
    return path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m app.sweep_plots results.json OUT_DIR", file=sys.stderr)
        return 2
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from specdec_studio.app.qt import QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])
    result = json.loads(Path(args[0]).read_text())
    for path in export_plots(result, args[1]):
        print(path)
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
