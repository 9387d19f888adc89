"""A replay as a video: the MP4 and the GIF decode (PyAV) at the asked size with the frames their
length needs, their first frame is the title card and their last the window at the replay's end, a
stopped export leaves no file, and the CLI makes one headless."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from specdec_studio.app.window.main_window import MainWindow
from specdec_studio.app.video_export import (FilmWindow, Timeline, VideoSpec, as_rgb, export_video,
                                             title_card)
from specdec_studio.engine.cli.main import main as specdec
from specdec_studio.engine.records import demo_traces, trace

SIZE = (1280, 720)
# mean absolute difference per channel (0-255) a lossy frame may have from the window's own picture;
# measured: 1.5 and 1.0 (MP4), 2.4 and 0.8 (GIF) for the first and last frames, while the replay's
# first and last frames differ by about 5
BOUND = {".mp4": 3.0, ".gif": 3.0}


@pytest.fixture(scope="module")
def recorded() -> trace.Trace:
    return trace.load(next(p for p in demo_traces.shipped() if p.stem == "prompt_lookup_on_python_code"))


def _decoded(path: Path) -> tuple[list[np.ndarray], av.video.stream.VideoStream]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        return frames, stream


def _window_at_end(recorded, qtbot) -> np.ndarray:
    """The window of the video's size with the whole replay delivered at once (the player's own
    skip to the end, not the film's frame clock), grabbed offscreen."""
    film = FilmWindow(recorded, SIZE, MainWindow)
    try:
        film.window.demo.player.finish_now()
        qtbot.wait(10)
        return as_rgb(film.grab(), SIZE)
    finally:
        film.close()


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_a_video_decodes_with_its_size_length_first_and_last_frames(recorded, qtbot, tmp_path, suffix):
    spec = VideoSpec(tmp_path / f"replay{suffix}", SIZE, speed=2.0)
    done = []
    written = export_video(recorded, spec, MainWindow, lambda frame, n: done.append((frame, n)))
    timeline = Timeline.of(recorded.duration_s, spec)
    assert written is not None and written.path.exists() and written.size_bytes == written.path.stat().st_size
    assert done[-1] == (timeline.n_frames, timeline.n_frames)
    frames, stream = _decoded(written.path)
    expected = (2.0 + recorded.duration_s / 2.0 + 2.0) * spec.frame_rate  # title, replay at 2x, held end
    assert abs(len(frames) - expected) <= 1 and len(frames) == written.frames
    assert (stream.width, stream.height) == SIZE and all(f.shape == (720, 1280, 3) for f in frames)
    assert stream.codec_context.name == ("h264" if suffix == ".mp4" else "gif")
    first = as_rgb(title_card(recorded, SIZE), SIZE)
    assert np.abs(frames[0].astype(int) - first).mean() < BOUND[suffix]
    last = _window_at_end(recorded, qtbot)
    assert np.abs(frames[-1].astype(int) - last).mean() < BOUND[suffix]
    # the bound tells frames apart: the replay's first frame is not its last
    assert np.abs(frames[timeline.n_title].astype(int) - last).mean() > BOUND[suffix]


def test_a_stopped_export_leaves_the_file_that_was_there_and_nothing_else(recorded, qtbot, tmp_path):
    """Issue 79, item 7: the export wrote into the chosen file and deleted it on Stop, so a video
    the user had confirmed replacing was gone although nothing replaced it."""
    path = tmp_path / "talk.mp4"
    path.write_bytes(b"last week's talk")
    seen = []
    assert export_video(recorded, VideoSpec(path, SIZE), MainWindow, lambda frame, n: seen.append(frame),
                        stopped=lambda: len(seen) >= 10) is None
    assert len(seen) == 10 and path.read_bytes() == b"last week's talk"
    assert [p.name for p in tmp_path.iterdir()] == ["talk.mp4"]  # no half-encoded file left beside it


def test_the_cli_exports_headless_and_refuses_what_it_cannot_write(recorded, qtbot, tmp_path, capsys):
    shipped = str(next(p for p in demo_traces.shipped() if p.stem == "prompt_lookup_on_python_code"))
    out = tmp_path / "talk.mp4"
    assert specdec(["replay", shipped, "--export", str(out), "--size", "1920x1080", "--speed", "4"]) == 0
    frames, stream = _decoded(out)
    assert (stream.width, stream.height) == (1920, 1080) and len(frames) > 60
    assert "MP4 (H.264) written to" in capsys.readouterr().err
    assert specdec(["replay", shipped, "--export", str(tmp_path / "talk.avi")]) == 2
    assert "written as .mp4 (H.264) or .gif" in capsys.readouterr().err
    assert specdec(["replay", shipped, "--export", str(tmp_path / "missing" / "talk.mp4")]) == 2
    assert "could not be written" in capsys.readouterr().err and not (tmp_path / "missing").exists()


def test_the_window_exports_the_replay_it_shows(qtbot, tmp_path, monkeypatch):
    from specdec_studio.app.qt import QtCore

    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path / "data"))
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.IniFormat)
    win = MainWindow(autoload=False, settings=settings)
    qtbot.addWidget(win)
    win.demo.export_video_dialog()  # nothing shown yet: a sentence, no dialog
    assert win.statusBar().currentMessage() == "No finished run to export yet"
    shipped = next(p for p in demo_traces.shipped() if p.stem == "draft_model_on_a_chat_answer")
    assert win.demo.open_trace(str(shipped))
    win.demo.player.finish_now()
    written = win.demo.export_video(tmp_path / "talk.gif", (1280, 720), 4.0, 10)
    assert written == tmp_path / "talk.gif" and "Video written to" in win.statusBar().currentMessage()
    frames, stream = _decoded(written)
    assert (stream.width, stream.height) == SIZE and len(frames) == Timeline.of(
        win.model.run.last_trace.duration_s, VideoSpec(written, SIZE, 4.0, 10)).n_frames
    assert win.demo.export_video(tmp_path / "nowhere" / "talk.mp4", SIZE, 1.0, 30) is None
    assert win.error_label.text().startswith("Could not export the video:")
    win.close()


def test_the_video_dialog_writes_the_file_confirmed_and_keeps_the_theme(qtbot, tmp_path, monkeypatch):
    """Issue 79, items 7 and 9: a name typed with another format's suffix was written under the
    chosen format's (a file nobody confirmed), and the offscreen film window set the application's
    theme back to "system"."""
    from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
    from specdec_studio.app.theme import current_theme
    from specdec_studio.app.widgets.video_dialog import VideoDialog

    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path / "data"))
    settings = QtCore.QSettings(str(tmp_path / "settings.ini"), QtCore.QSettings.IniFormat)
    win = MainWindow(autoload=False, settings=settings)
    qtbot.addWidget(win)
    win.preferences.set_theme("dark")
    dark_base = QtWidgets.QApplication.palette().color(QtGui.QPalette.Base).name()
    shipped = next(p for p in demo_traces.shipped() if p.stem == "draft_model_on_a_chat_answer")
    assert win.demo.open_trace(str(shipped))
    win.demo.player.finish_now()
    asked = []
    monkeypatch.setattr(VideoDialog, "exec", lambda self: QtWidgets.QDialog.Accepted)
    monkeypatch.setattr(VideoDialog, "choice", lambda self: (SIZE, 8.0, ".mp4", 10))  # MP4 chosen
    made = []
    monkeypatch.setattr(win.demo, "export_video", lambda path, *rest: made.append(path))
    typed = []
    monkeypatch.setattr(QtWidgets.QFileDialog, "getSaveFileName", lambda *a, **k: (typed[-1], ""))
    monkeypatch.setattr(QtWidgets.QMessageBox, "question",
                        lambda *a, **k: asked.append(a[2]) or QtWidgets.QMessageBox.No)
    typed.append(str(tmp_path / "talk.gif"))  # the name typed says GIF: a GIF, under that name
    win.demo.export_video_dialog()
    typed.append(str(tmp_path / "talk"))  # no suffix: the chosen format's is added
    win.demo.export_video_dialog()
    (tmp_path / "notes.mp4").write_bytes(b"mine")
    typed.append(str(tmp_path / "notes"))  # added, it names a file there: asked first, and No keeps it
    win.demo.export_video_dialog()
    assert made == [tmp_path / "talk.gif", tmp_path / "talk.mp4"]
    assert asked == ["notes.mp4 already exists. Replace it?"]
    monkeypatch.undo()
    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path / "data"))
    assert win.demo.export_video(tmp_path / "talk.gif", SIZE, 8.0, 10) == tmp_path / "talk.gif"
    assert current_theme() == "dark"
    assert QtWidgets.QApplication.palette().color(QtGui.QPalette.Base).name() == dark_base
    win.preferences.set_theme("system")
    win.close()
