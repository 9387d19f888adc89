"""Export video: the size, pace and format of a replay's video, then its progress with Stop."""

from __future__ import annotations

from specdec_studio.app.qt import QtWidgets
from specdec_studio.app.video_export import DEFAULT_FPS, FORMATS, SIZES
from specdec_studio.engine.records.trace import SPEEDS


class VideoDialog(QtWidgets.QDialog):
    """Asks what video to make; ``choice()`` after it is accepted: (size, speed, suffix, fps)."""

    def __init__(self, speed: float, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export video")
        self.format = QtWidgets.QComboBox()
        for suffix, name in FORMATS.items():
            self.format.addItem(name, suffix)
        self.size = QtWidgets.QComboBox()
        for name, size in SIZES.items():
            self.size.addItem(name.replace("x", " × "), size)
        self.speed = QtWidgets.QComboBox()
        for s in SPEEDS:
            self.speed.addItem(f"{s:g}×", s)
        self.speed.setCurrentIndex(self.speed.findData(speed) if self.speed.findData(speed) >= 0 else SPEEDS.index(1.0))
        self.fps = QtWidgets.QSpinBox()
        self.fps.setRange(1, 60)
        self.fps.setSuffix(" fps")
        self.format.currentIndexChanged.connect(lambda: self.fps.setValue(DEFAULT_FPS[self.format.currentData()]))
        self.fps.setValue(DEFAULT_FPS[self.format.currentData()])
        note = QtWidgets.QLabel("A title card, then the window as it draws the replay at this pace, then the "
                                "finished run held for 2 s.")
        note.setWordWrap(True)
        buttons = QtWidgets.QDialogButtonBox(QtWidgets.QDialogButtonBox.Ok | QtWidgets.QDialogButtonBox.Cancel)
        buttons.button(QtWidgets.QDialogButtonBox.Ok).setText("Choose file…")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QtWidgets.QFormLayout(self)
        form.addRow("Format", self.format)
        form.addRow("Size", self.size)
        form.addRow("Speed", self.speed)
        form.addRow("Frame rate", self.fps)
        form.addRow(note)
        form.addRow(buttons)

    def choice(self) -> tuple[tuple[int, int], float, str, int]:
        return self.size.currentData(), self.speed.currentData(), self.format.currentData(), self.fps.value()
