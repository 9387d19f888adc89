"""Entry point of the ``specdec-studio`` GUI."""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(prog="specdec-studio")
    parser.add_argument("-m", "--model", default=None, help="default, gemma or a .gguf path (default: the last one)")
    args, qt_args = parser.parse_known_args()
    from app.qt import QtWidgets
    from app.main_window import MainWindow

    qapp = QtWidgets.QApplication([sys.argv[0], *qt_args])
    qapp.setApplicationName("SpecDec Studio")
    qapp.setOrganizationName("SpecDec Studio")
    window = MainWindow(args.model)
    window.show()
    return qapp.exec()


if __name__ == "__main__":
    sys.exit(main())
