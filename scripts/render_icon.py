"""Render the app icon's SVG to the 256 px PNG that is shipped beside it (run after editing the SVG):

    .venv/bin/python scripts/render_icon.py
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from PySide6 import QtCore, QtGui, QtSvg  # noqa: E402

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"
SIZE = 256


def main() -> int:
    app = QtGui.QGuiApplication(sys.argv[:1])
    renderer = QtSvg.QSvgRenderer(str(ICONS / "specdec-studio.svg"))
    if not renderer.isValid():
        print("the icon's SVG does not parse", file=sys.stderr)
        return 1
    image = QtGui.QImage(SIZE, SIZE, QtGui.QImage.Format.Format_ARGB32)
    image.fill(QtCore.Qt.GlobalColor.transparent)
    painter = QtGui.QPainter(image)
    painter.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    out = ICONS / "specdec-studio.png"
    if not image.save(str(out)):
        return 1
    print(out)
    del app
    return 0


if __name__ == "__main__":
    sys.exit(main())
