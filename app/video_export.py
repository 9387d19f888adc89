"""A replayed run as a video (MP4/H.264 or GIF) for slides and talks: a title card, then the window
itself (stream, KV map, figures) as the replay draws it, frame by frame on the video's own clock,
then the finished window held for a moment.

The frames are the window's own pictures: an offscreen window of the video's size replays the
trace, driven by the frame clock instead of a timer, and is grabbed after each frame's events.
PyAV (FFmpeg's libraries, shipped in its wheels) encodes them; nothing here writes a codec.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
from specdec_studio.app.theme import current_theme
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.records.demo_traces import setting_words

SIZES = {"1280x720": (1280, 720), "1920x1080": (1920, 1080)}
FORMATS = {".mp4": "MP4 (H.264)", ".gif": "GIF"}
DEFAULT_FPS = {".mp4": 30, ".gif": 10}  # a GIF's frame delay is in hundredths of a second: 10 fps is exact
TITLE_S = 2.0  # the title card
HOLD_S = 2.0  # the finished window, held at the end


class VideoError(SpecDecError):
    """A video could not be made: an unknown size or format, or a file that could not be written."""


@dataclass(frozen=True)
class VideoSpec:
    path: Path
    size: tuple[int, int] = SIZES["1280x720"]
    speed: float = 1.0  # times the recorded pace
    fps: int = 0  # 0: the format's default

    @property
    def suffix(self) -> str:
        return self.path.suffix.lower()

    @property
    def frame_rate(self) -> int:
        return self.fps or DEFAULT_FPS[self.suffix]

    def check(self) -> None:
        if self.suffix not in FORMATS:
            raise VideoError(
                f"{self.path.name}: a video is written as .mp4 (H.264) or .gif, not {self.suffix or 'no suffix'}"
            )
        if self.size not in SIZES.values():
            raise VideoError(f"a video is {' or '.join(SIZES)}, not {self.size[0]}x{self.size[1]}")
        if not (math.isfinite(self.speed) and self.speed > 0):
            raise VideoError(f"a video's speed must be a number above 0, not {self.speed}")
        if not 1 <= self.frame_rate <= 60:
            raise VideoError(f"a video's frame rate must be 1 to 60 frames a second, not {self.frame_rate}")


@dataclass(frozen=True)
class Timeline:
    """Which frames show what: the title card, then the replay (recorded time ``(i + 1) / fps *
    speed`` after its start at frame ``i`` of the replay), then the held end."""

    n_title: int
    n_replay: int
    n_hold: int
    fps: int
    speed: float

    @classmethod
    def of(cls, duration_s: float, spec: VideoSpec) -> Timeline:
        fps = spec.frame_rate
        return cls(round(TITLE_S * fps), max(1, math.ceil(duration_s / spec.speed * fps)), round(HOLD_S * fps),
                   fps, spec.speed)

    @property
    def n_frames(self) -> int:
        return self.n_title + self.n_replay + self.n_hold

    @property
    def seconds(self) -> float:
        return self.n_frames / self.fps

    def recorded_s(self, frame: int) -> float | None:
        """The recorded time the window shows at ``frame``; None on the title card."""
        if frame < self.n_title:
            return None
        return (frame - self.n_title + 1) / self.fps * self.speed


@dataclass(frozen=True)
class VideoWritten:
    path: Path
    frames: int
    seconds: float  # the video's length
    wall_s: float  # what making it took
    size_bytes: int


def title_card(trace, size: tuple[int, int]) -> QtGui.QImage:
    """The first seconds of the video: what was run, on which model, when, at which pace."""
    w, h = size
    image = QtGui.QImage(w, h, QtGui.QImage.Format_RGB888)
    image.fill(QtGui.QColor("#111418"))
    painter = QtGui.QPainter(image)
    painter.setRenderHint(QtGui.QPainter.TextAntialiasing)
    config, model = trace.config, trace.header.get("model", {})
    mode = str(config.get("mode", "?"))
    detail = setting_words(config)
    if mode == "lookup":
        detail += f" ({config.get('lookup', 'cache')})"
    final = trace.finished
    lines = [(f"{mode} decoding" + (f"  ·  {detail}" if detail else ""), 0.060, "#ffffff", True),
             (str(model.get("name", "a model")), 0.034, "#bbbbbb", False),
             (f"recorded {str(trace.header.get('created', ''))[:10]} with SpecDec Studio", 0.026, "#8a8f98", False)]
    if final is not None:
        s = final.stats
        lines.append((f"{s.get('n_predict', 0)} tokens at {s.get('tokens_per_second', 0):.1f} tok/s · "
                      f"{s.get('tokens_per_step', 0):.2f} tokens a step", 0.030, "#56b4e9", False))
    y = h * 0.34
    for text, scale, colour, bold in lines:
        font = QtGui.QFont()
        font.setPixelSize(max(12, int(h * scale)))
        font.setBold(bold)
        painter.setFont(font)
        painter.setPen(QtGui.QColor(colour))
        painter.drawText(QtCore.QRectF(0, y, w, h * scale * 1.6), QtCore.Qt.AlignHCenter | QtCore.Qt.AlignVCenter, text)
        y += h * scale * 2.0
    painter.end()
    return image


def as_rgb(image: QtGui.QImage, size: tuple[int, int]) -> np.ndarray:
    """``image`` at ``size`` as an (h, w, 3) uint8 array (a copy: the QImage's memory is Qt's)."""
    if (image.width(), image.height()) != size:
        image = image.scaled(size[0], size[1], QtCore.Qt.IgnoreAspectRatio, QtCore.Qt.SmoothTransformation)
    image = image.convertToFormat(QtGui.QImage.Format_RGB888)
    w, h = image.width(), image.height()
    row = image.bytesPerLine()
    data = np.frombuffer(image.constBits(), dtype=np.uint8, count=row * h).reshape(h, row)
    return data[:, : 3 * w].reshape(h, w, 3).copy()


# GIF's 256 colours for pictures of a window: a 5×5×5 colour cube for the token colours and 128 greys
# for the text, the panels and their antialiased edges (where a cube's 5 grey levels would band).
CUBE = 5
N_GREYS = 128
GREY_CHROMA = 16  # a pixel whose channels differ by less than this is drawn with a grey


def gif_palette() -> np.ndarray:
    """The palette's 256 rows as PyAV 18 reads a pal8 palette: alpha, red, green, blue."""
    palette = np.zeros((256, 4), dtype=np.uint8)
    palette[:, 0] = 255
    levels = np.round(np.arange(CUBE) * 255 / (CUBE - 1)).astype(np.uint8)
    r, g, b = np.meshgrid(levels, levels, levels, indexing="ij")
    palette[: CUBE**3, 1:] = np.stack([r.ravel(), g.ravel(), b.ravel()], axis=1)
    greys = np.round(np.arange(N_GREYS) * 255 / (N_GREYS - 1)).astype(np.uint8)
    palette[CUBE**3 : CUBE**3 + N_GREYS, 1:] = greys[:, None]
    return palette


_CUBE_LEVEL = np.round(np.arange(256) * (CUBE - 1) / 255).astype(np.uint8)
_GREY_LEVEL = np.round(np.arange(256) * (N_GREYS - 1) / 255).astype(np.uint8)


def gif_indices(rgb: np.ndarray) -> np.ndarray:
    """Each pixel's palette row: its grey where it is nearly grey, else its nearest cube colour."""
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    cube = (_CUBE_LEVEL[r].astype(np.uint8) * (CUBE * CUBE) + _CUBE_LEVEL[g] * CUBE + _CUBE_LEVEL[b])
    chroma = rgb.max(axis=2).astype(np.int16) - rgb.min(axis=2)
    grey = (CUBE**3 + _GREY_LEVEL[((r.astype(np.uint16) + g + b) // 3).astype(np.uint8)]).astype(np.uint8)
    return np.where(chroma < GREY_CHROMA, grey, cube).astype(np.uint8)


class Encoder:
    """PyAV's encoder for one file: H.264 in MP4 (yuv420p, so every player opens it) or GIF."""

    def __init__(self, spec: VideoSpec) -> None:
        try:
            import av
        except ImportError:  # pragma: no cover - a dependency of the app
            raise VideoError("video export needs PyAV (pip install av)") from None
        self.av, self.path = av, spec.path
        # encoded beside the chosen file and renamed over it only when finished: a Stop, a failure
        # or a full disk leaves the file that was there (a video the user chose to replace) whole
        try:
            fd, name = tempfile.mkstemp(prefix=f".{spec.path.name}.", suffix=f".partial{spec.suffix}",
                                        dir=spec.path.parent)
        except OSError as exc:
            raise VideoError(f"{spec.path} could not be written ({exc.strerror or exc})") from None
        os.close(fd)
        self.partial = Path(name)
        try:
            self.container = av.open(name, "w", format="mp4" if spec.suffix == ".mp4" else "gif")
        except OSError as exc:  # av's errors are OSErrors with FFmpeg's message
            self.partial.unlink(missing_ok=True)
            raise VideoError(f"{spec.path} could not be written ({exc.strerror or exc})") from None
        codec = "libx264" if spec.suffix == ".mp4" else "gif"
        self.stream = self.container.add_stream(codec, rate=spec.frame_rate)
        self.stream.width, self.stream.height = spec.size
        if codec == "libx264":
            self.stream.pix_fmt = "yuv420p"
            self.stream.options = {"preset": "veryfast", "crf": "20"}
        else:  # one palette for every frame, so FFmpeg stores only what changed between frames
            self.stream.pix_fmt = "pal8"
        self.palette = gif_palette() if codec == "gif" else None

    def add(self, rgb: np.ndarray) -> None:
        if self.palette is not None:
            frame = self.av.VideoFrame.from_ndarray((gif_indices(rgb), self.palette), format="pal8")
        else:
            frame = self.av.VideoFrame.from_ndarray(rgb, format="rgb24")
        for packet in self.stream.encode(frame):
            self.container.mux(packet)

    def close(self) -> None:
        """Finish the file, and put it in the chosen file's place (on the disk first: fsync)."""
        for packet in self.stream.encode():
            self.container.mux(packet)
        self.container.close()
        with open(self.partial, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(self.partial, 0o644)  # mkstemp made it private; a video is for others to see
        os.replace(self.partial, self.path)

    def discard(self) -> None:
        """Close without finishing and remove what was encoded (the chosen file is left as it was)."""
        try:
            self.container.close()
        except Exception:  # noqa: BLE001 - the file is removed anyway
            pass
        self.partial.unlink(missing_ok=True)


class FilmWindow:
    """An offscreen window (of ``window_class``, the app's MainWindow) of the video's size that
    replays one trace on the frame clock."""

    def __init__(self, trace, size: tuple[int, int], window_class) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="specdec-film-")
        settings = QtCore.QSettings(str(Path(self._folder.name) / "settings.ini"), QtCore.QSettings.IniFormat)
        settings.setValue("auto_profile", "false")
        settings.setValue("theme", current_theme())  # its theme is the application's: it must not change it
        self.window = window_class(autoload=False, settings=settings)
        self.window.setAttribute(QtCore.Qt.WA_DontShowOnScreen)
        self.window.resize(*size)
        self.window.show()
        self.window.demo.play_trace(trace)
        self.window.demo.player.set_paused(True)
        self.window.demo.player.advance_to(0.0)  # RunStarted: the prompt on screen

    def show_at(self, recorded_s: float) -> bool:
        """The window at ``recorded_s``; True if events reached it since the last call."""
        replay = self.window.demo.player.replays[0]
        before = replay.index
        self.window.demo.player.advance_to(recorded_s)
        QtWidgets.QApplication.processEvents()
        return replay.index != before

    def grab(self) -> QtGui.QImage:
        return self.window.grab().toImage()

    def close(self) -> None:
        self.window.demo.player.stop()
        self.window.close()
        self.window.deleteLater()
        QtWidgets.QApplication.processEvents()
        self._folder.cleanup()


def export_video(trace, spec: VideoSpec, window_class, progress: Callable[[int, int], None] | None = None,
                 stopped: Callable[[], bool] | None = None) -> VideoWritten | None:
    """Write ``trace`` as the video ``spec`` asks for, drawn by an offscreen ``window_class`` (the
    app's MainWindow: passed in, as the window that exports imports this module); None (and no
    file) if ``stopped()`` said so.

    ``progress(frame, n_frames)`` is called after each frame. The window is grabbed only after a
    frame whose events changed it; the frames between repeat the last picture."""
    spec.check()
    t0 = time.perf_counter()
    timeline = Timeline.of(trace.duration_s, spec)
    encoder = Encoder(spec)
    film = FilmWindow(trace, spec.size, window_class)
    try:
        card = as_rgb(title_card(trace, spec.size), spec.size)
        picture = None
        for frame in range(timeline.n_frames):
            if stopped is not None and stopped():
                encoder.discard()
                return None
            recorded = timeline.recorded_s(frame)
            if recorded is None:
                encoder.add(card)
            else:
                if film.show_at(recorded) or picture is None:  # grabbed again only when events changed it
                    picture = as_rgb(film.grab(), spec.size)
                encoder.add(picture)
            if progress is not None:
                progress(frame + 1, timeline.n_frames)
        encoder.close()
    except OSError as exc:  # FFmpeg opens the file with the first packet: a folder that is not there shows here
        encoder.discard()
        raise VideoError(f"{spec.path} could not be written ({exc.strerror or exc})") from None
    except BaseException:
        encoder.discard()
        raise
    finally:
        film.close()
    return VideoWritten(spec.path, timeline.n_frames, timeline.seconds, time.perf_counter() - t0,
                        spec.path.stat().st_size)
