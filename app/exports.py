"""The window's run exports: the documents come from :mod:`engine.records.report` (Qt-free); the pictures
(the KV map, the plots) are pyqtgraph's exporters, which work offscreen too. Each export is one file,
the one the user chose, written whole or not at all (engine.jsonfile)."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.qt import QtCore, QtGui
from specdec_studio.engine.jsonfile import write_bytes, write_text


def plot_png(plot_widget) -> bytes:
    """A pyqtgraph PlotWidget as PNG bytes."""
    from pyqtgraph.exporters import ImageExporter

    exporter = ImageExporter(plot_widget.getPlotItem())
    exporter.parameters()["width"] = max(400, int(plot_widget.width()) * 2)
    return png_bytes(exporter.export(toBytes=True))


def png_bytes(image: QtGui.QImage) -> bytes:
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


def stacked_png(pngs: list[bytes]) -> bytes:
    """PNG pictures one under another, on the first picture's background, as one PNG."""
    images = [QtGui.QImage.fromData(png, "PNG") for png in pngs]
    width, height = max(i.width() for i in images), sum(i.height() for i in images)
    sheet = QtGui.QImage(width, height, QtGui.QImage.Format_ARGB32)
    sheet.fill(images[0].pixelColor(0, 0))
    painter = QtGui.QPainter(sheet)
    top = 0
    for image in images:
        painter.drawImage(0, top, image)
        top += image.height()
    painter.end()
    return png_bytes(sheet)


def pictures(window) -> dict[str, bytes]:
    """Caption -> PNG of what the window shows of the run: the KV map and each visible plot."""
    out = {"KV cache cells": plot_png(window.kv_map.plot)}
    stats = window.stats
    for caption, plot in (("accepted tokens per step", stats.accept_plot), ("tokens per step", stats.hist_plot),
                          ("Auto calibration", stats.calibration_plot)):
        if plot.isVisible() or plot is not stats.calibration_plot:
            out[caption] = plot_png(plot)
    if stats.speedup_plot.curves is not None:
        out["speed-up curve"] = plot_png(stats.speedup_plot.plot)
    return out


def speedup(window) -> dict | None:
    """The speed-up curve and the run's point, as the report and the figures file hold them."""
    from specdec_studio.engine.records.report import speedup_section

    plot = window.stats.speedup_plot
    return speedup_section(plot.curves, plot.run_point)


def write(window, kind: str, path: Path) -> list[Path]:
    """Write one export; returns the files written."""
    from specdec_studio.engine.records import report

    trace = window.model.run.last_trace
    if kind == "report":
        write_text(path, report.run_report(trace, pictures(window), speedup(window)), shared=True)
    elif kind == "transcript":
        write_text(path, report.transcript_html(trace), shared=True)
    elif kind == "figures":
        write_text(path, report.figures_json(trace, speedup(window)), shared=True)
    elif kind == "kv_png":
        write_bytes(path, plot_png(window.kv_map.plot), shared=True)
    elif kind == "plots_png":  # every plot shown, one under another, in the one file chosen
        plots = [png for caption, png in pictures(window).items() if caption != "KV cache cells"]
        write_bytes(path, stacked_png(plots), shared=True)
    else:
        raise ValueError(f"unknown export {kind!r}")
    return [path]
