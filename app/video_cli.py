"""``specdec replay TRACE --export VIDEO``: a replay's video made headless, on Qt's offscreen
platform (:mod:`app.video_export` makes it; this module brings the window class and the terminal)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from specdec_studio.app.window.main_window import MainWindow
from specdec_studio.app.qt import QtCore, QtWidgets
from specdec_studio.app.video_export import FORMATS, SIZES, VideoError, VideoSpec, export_video


def _quiet_offscreen(kind, context, message: str) -> None:
    """Qt's warnings, less the offscreen platform's notes on what it cannot do (it has no windows
    to size or raise), which say nothing about the video."""
    if not message.startswith("This plugin does not support"):
        print(f"Qt: {message}", file=sys.stderr)


def export_from_command_line(trace_path: str, output: str, size: str, speed: float, fps: int) -> int:
    """``specdec replay TRACE --export OUT``: the video made headless (Qt's offscreen platform),
    progress on standard error; Ctrl+C stops and leaves no file."""
    from specdec_studio.engine.records import trace as traces

    if size not in SIZES:
        raise VideoError(f"--size must be {' or '.join(SIZES)}, not {size}")
    spec = VideoSpec(Path(output), SIZES[size], speed, fps)
    spec.check()
    recorded = traces.load(trace_path)
    os.environ["QT_QPA_PLATFORM"] = "offscreen"  # headless: no window ever shows, with or without a display
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication([])  # noqa: F841 - kept alive
    QtCore.qInstallMessageHandler(_quiet_offscreen)

    def progress(frame: int, n_frames: int) -> None:
        if frame == n_frames or frame % 30 == 0:
            print(f"\rspecdec: frame {frame}/{n_frames}", end="", file=sys.stderr, flush=True)

    written = export_video(recorded, spec, MainWindow, progress)
    print(f"\nspecdec: {FORMATS[spec.suffix]} written to {written.path}: {written.frames} frames, "
          f"{written.seconds:.1f} s at {spec.frame_rate} fps, {spec.size[0]}x{spec.size[1]}, "
          f"{written.size_bytes / 1e6:.1f} MB, made in {written.wall_s:.1f} s", file=sys.stderr)
    return 0
