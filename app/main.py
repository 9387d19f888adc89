"""Entry point of the ``specdec-studio`` GUI."""

import sys


def main() -> int:
    from app.qt import QtWidgets
    from app.main_window import MainWindow

    qapp = QtWidgets.QApplication(sys.argv)
    qapp.setApplicationName("SpecDec Studio")
    qapp.setOrganizationName("SpecDec Studio")
    window = MainWindow()
    window.show()
    return qapp.exec()
