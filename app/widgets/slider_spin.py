"""A labelled slider with a spin box beside it, for one integer or float parameter."""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtWidgets, Qt, Signal


class SliderSpin(QtWidgets.QWidget):
    """Slider and spin box kept in step. ``decimals > 0`` makes it a float control."""

    valueChanged = Signal(object)

    def __init__(self, label: str, minimum: float, maximum: float, value: float, *, step: float = 1,
                 decimals: int = 0, tooltip: str = "", parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._scale = 10**decimals
        self.label = QtWidgets.QLabel(label)
        self.label.setMinimumWidth(28)
        self.slider = QtWidgets.QSlider(Qt.Horizontal)
        self.slider.setRange(int(round(minimum * self._scale)), int(round(maximum * self._scale)))
        if decimals:
            self.spin = QtWidgets.QDoubleSpinBox()
            self.spin.setDecimals(decimals)
            self.spin.setSingleStep(step)
        else:
            self.spin = QtWidgets.QSpinBox()
        self.spin.setRange(minimum, maximum)
        self.spin.setValue(value)
        self.spin.setMinimumWidth(64)
        self.slider.setValue(int(round(value * self._scale)))
        for w in (self.label, self.slider, self.spin):
            w.setToolTip(tooltip)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.slider, 1)
        layout.addWidget(self.spin)
        self.slider.valueChanged.connect(self._from_slider)
        self.spin.valueChanged.connect(self._from_spin)

    def _from_slider(self, raw: int) -> None:
        value = raw / self._scale if self._scale > 1 else raw
        if self.spin.value() != value:
            self.spin.setValue(value)

    def _from_spin(self, value) -> None:
        raw = int(round(value * self._scale))
        if self.slider.value() != raw:
            with QtCore.QSignalBlocker(self.slider):
                self.slider.setValue(raw)
        self.valueChanged.emit(value)

    def value(self):
        return self.spin.value()

    def setValue(self, value) -> None:
        self.spin.setValue(value)

    def set_pending(self, pending: bool) -> None:
        font = self.label.font()
        font.setBold(pending)
        self.label.setFont(font)
        self.label.setText(self.label.text().rstrip(" •") + (" •" if pending else ""))
