"""What every part of the window is given: the window (its views, and the other parts' public
calls) and the window's model. A part writes its own slice only and never touches another part's
private members (tests/app/test_window_shape.py checks both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the window imports its parts: a part names it only for type checkers
    from specdec_studio.app.window.main_window import MainWindow


class Controller:
    def __init__(self, window: MainWindow) -> None:
        self.window = window
        self.model = window.model

    def handlers(self) -> dict[type, Callable[[object], None]]:
        """The engine or replay events this part draws, by type: merged into the window's one table."""
        return {}

    def say(self, sentence: str) -> None:
        """One sentence on the status bar."""
        self.window.statusBar().showMessage(sentence)
