"""Light and dark palettes (Fusion style), or the system's own."""

from __future__ import annotations

from specdec_studio.app.qt import QtGui, QtWidgets

THEMES = ("system", "light", "dark")
_applied = "system"  # the theme the application wears now (one palette for every window)


def current_theme() -> str:
    """The theme last applied to the application (presentation mode's dark one included)."""
    return _applied


def apply_theme(app: QtWidgets.QApplication, theme: str) -> None:
    global _applied
    _applied = theme
    app.setStyle("Fusion")
    if theme == "system":
        app.setPalette(app.style().standardPalette())
        return
    p = QtGui.QPalette()
    if theme == "dark":
        colours = {
            QtGui.QPalette.Window: "#202225", QtGui.QPalette.WindowText: "#e6e6e6",
            QtGui.QPalette.Base: "#17181a", QtGui.QPalette.AlternateBase: "#25272b",
            QtGui.QPalette.Text: "#e6e6e6", QtGui.QPalette.Button: "#2b2d31",
            QtGui.QPalette.ButtonText: "#e6e6e6", QtGui.QPalette.Highlight: "#3a7bd5",
            QtGui.QPalette.HighlightedText: "#ffffff", QtGui.QPalette.ToolTipBase: "#2b2d31",
            QtGui.QPalette.ToolTipText: "#e6e6e6", QtGui.QPalette.Mid: "#8a8f98",
            QtGui.QPalette.PlaceholderText: "#7d828a",
        }
    else:
        colours = {
            QtGui.QPalette.Window: "#f4f5f7", QtGui.QPalette.WindowText: "#1d1f23",
            QtGui.QPalette.Base: "#ffffff", QtGui.QPalette.AlternateBase: "#eef0f3",
            QtGui.QPalette.Text: "#1d1f23", QtGui.QPalette.Button: "#e9ebef",
            QtGui.QPalette.ButtonText: "#1d1f23", QtGui.QPalette.Highlight: "#3a7bd5",
            QtGui.QPalette.HighlightedText: "#ffffff", QtGui.QPalette.Mid: "#6b7280",
        }
    for role, colour in colours.items():
        p.setColor(role, QtGui.QColor(colour))
    app.setPalette(p)
