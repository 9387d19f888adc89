"""Presentation mode: full screen, large type that grows with the window, high contrast, tuning
hidden, the demo driven from the keyboard. Writes the presentation slice."""

from __future__ import annotations

from specdec_studio.app.qt import QtGui, QtWidgets
from specdec_studio.app.theme import apply_theme
from specdec_studio.app.widgets.token_stream import PRESENTATION_COLOURS, SOURCE_COLOURS, SOURCE_LABELS
from specdec_studio.app.window.controller import Controller


class PresentationController(Controller):
    _geometry_before = None  # the window's geometry and splitter before presentation, restored after
    _splitter_before = None

    def toggle(self) -> None:
        self.set_on(not self.model.presentation.on)

    def set_on(self, on: bool) -> None:
        window = self.window
        self.model.presentation.update(on=on)  # the number keys choose the mode in presentation mode only
        window.presentation_action.setChecked(on)
        for widget in (window.splitter.widget(0), window.model_bar, window.input):
            widget.setVisible(not on)
        for index, name in enumerate(("Live", "Inspect", "Tune", "Profile")):
            window.right_tabs.setTabVisible(index, not on or name in ("Live", "Inspect"))
        for action, key in window.presentation_keys:
            action.setShortcut(QtGui.QKeySequence(key) if on else QtGui.QKeySequence())
            if action not in window.actions():
                window.addAction(action)
        colours = PRESENTATION_COLOURS if on else SOURCE_COLOURS
        if on:
            self._geometry_before = window.saveGeometry()
            self._splitter_before = window.splitter.saveState()
            apply_theme(QtWidgets.QApplication.instance(), "dark")
        window.stream.colours = colours
        self.style_legend(colours)
        for view in (window.kv_map, window.inspector.kv_before, window.inspector.kv_after):
            view.set_token_colours(colours)
        if on:
            window.showFullScreen()
            width = window.width()
            window.splitter.setSizes([0, int(width * 0.55), int(width * 0.45)])  # the stream and the inspector
            window.stream.setFocus()
            self.say("Presentation: space run/pause · → step · ← back · R reset · 1–5 mode · F11 leave")
        else:
            window.showNormal()
            if self._geometry_before is not None:
                window.restoreGeometry(self._geometry_before)
                window.splitter.restoreState(self._splitter_before)
            window.preferences.set_theme(str(window.settings.value("theme", "system")))
        window.preferences.paint_backgrounds()
        self.scale_fonts()
        window.runs.render()

    def style_legend(self, colours: dict) -> None:
        parts = []
        for source in ("sampled", "accepted_ngram", "accepted_draft", "rejected"):
            colour = colours[source]
            style = f"color: {colour};" if colour else ""
            if source == "rejected":
                style += " text-decoration: line-through;"
            if source.startswith("accepted"):
                style += " font-weight: 600;"
            parts.append(f"<span style='{style}'>{SOURCE_LABELS[source]}</span>")
        self.window.legend.setText(" &nbsp;&nbsp; ".join(parts))

    def scale_fonts(self) -> None:
        """Presentation type grows with the window (about 1 point per 55 pixels of width)."""
        window, on = self.window, self.model.presentation.on
        scale = max(1.0, min(3.0, window.width() / 1280)) if on else 1.0
        base = QtWidgets.QApplication.instance().font()
        font = QtGui.QFont(base)
        font.setPointSizeF(base.pointSizeF() * (1.25 * scale if on else 1.0))
        window.centralWidget().setFont(font)
        window.statusBar().setFont(font)
        QtWidgets.QToolTip.setFont(font)  # a token's explanation reads from the back of the room too
        stream_font = window.stream.font()
        stream_font.setPointSizeF(11 * (1.6 * scale if on else 1.0))
        window.stream.setFont(stream_font)
        window.race.set_font_scale(1.6 * scale if on else 1.0)
        window.inspector.picture.set_scale(1.4 * scale if on else 1.0)
