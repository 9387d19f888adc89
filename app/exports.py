"""The window's run exports: the documents come from :mod:`engine.records.report` (Qt-free); the pictures
(the KV map, the plots) are pyqtgraph's exporters, which work offscreen too."""

from __future__ import annotations

from pathlib import Path

from specdec_studio.app.qt import QtCore


def plot_png(plot_widget) -> bytes:
    """A pyqtgraph PlotWidget as PNG bytes."""
    from pyqtgraph.exporters import ImageExporter

    exporter = ImageExporter(plot_widget.getPlotItem())
    exporter.parameters()["width"] = max(400, int(plot_widget.width()) * 2)
    image = exporter.export(toBytes=True)
    buffer = QtCore.QBuffer()
    buffer.open(QtCore.QIODevice.WriteOnly)
    image.save(buffer, "PNG")
    return bytes(buffer.data())


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
        path.write_text(report.run_report(trace, pictures(window), speedup(window)), encoding="utf-8")
        return [path]
    if kind == "transcript":
        path.write_text(report.transcript_html(trace), encoding="utf-8")
        return [path]
    if kind == "figures":
        path.write_text(report.figures_json(trace, speedup(window)), encoding="utf-8")
        return [path]
    if kind == "kv_png":
        path.write_bytes(plot_png(window.kv_map.plot))
        return [path]
    if kind == "plots_png":  # one file per plot: name-accepted.png, name-tokens.png, …
        written = []
        for caption, png in pictures(window).items():
            if caption == "KV cache cells":
                continue
            target = path.with_name(f"{path.stem}-{caption.split()[0].lower()}{path.suffix or '.png'}")
            target.write_bytes(png)
            written.append(target)
        return written
    raise ValueError(f"unknown export {kind!r}")

