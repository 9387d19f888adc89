"""The one way into Qt: PySide6 first, then pyqtgraph bound to it."""

import os

os.environ.setdefault("PYQTGRAPH_QT_LIB", "PySide6")

from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402
from PySide6.QtCore import Qt, Signal, Slot  # noqa: E402

import pyqtgraph as pg  # noqa: E402

__all__ = ["QtCore", "QtGui", "QtWidgets", "Qt", "Signal", "Slot", "pg"]
