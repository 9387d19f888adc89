"""Entry point of the ``specdec-studio`` GUI."""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from importlib import resources
from pathlib import Path


def main() -> int:
    # A model on RPC servers runs in a spawned engine process (app/worker/engine_process.py); in a frozen
    # app that child is this executable again, and must become the engine, not a second window.
    multiprocessing.freeze_support()
    parser = argparse.ArgumentParser(prog="specdec-studio", usage="%(prog)s [-h] [-m MODEL] [FILE.gguf] [Qt options]")
    parser.add_argument("-m", "--model", default=None, help="default, gemma or a .gguf path (default: the last one)")
    # `specdec sweep` in a frozen app, which has no `python -m app.sweep_plots`
    parser.add_argument("--sweep-plots", nargs=2, metavar=("RESULTS_JSON", "OUT_DIR"), help=argparse.SUPPRESS)
    # the smoke tests': load the model, decode a few tokens, print them as JSON and exit (app/self_test.py)
    parser.add_argument("--self-test", action="store_true", help=argparse.SUPPRESS)
    model_file, argv = split_model_file(sys.argv[1:])
    args, qt_args = parser.parse_known_args(argv)
    if args.sweep_plots:
        from specdec_studio.app import sweep_plots

        return sweep_plots.main(args.sweep_plots)
    from specdec_studio.app.qt import QtGui, QtWidgets
    from specdec_studio.app.window.main_window import MainWindow

    qapp = QtWidgets.QApplication([sys.argv[0], *qt_args])
    qapp.setApplicationName("SpecDec Studio")
    qapp.setOrganizationName("SpecDec Studio")
    qapp.setDesktopFileName("specdec-studio")  # Wayland finds the icon through the desktop entry
    qapp.setWindowIcon(QtGui.QIcon(str(app_icon_path())))
    if args.self_test:
        from specdec_studio.app.self_test import SelfTest, scratch_settings

        window = MainWindow(args.model or model_file or "default", settings=scratch_settings())
        window.show()
        SelfTest(window, qapp)
        return qapp.exec()
    window = MainWindow(args.model or model_file)
    window.show()
    return qapp.exec()


def split_model_file(argv: list[str]) -> tuple[str | None, list[str]]:
    """A bare .gguf path among the arguments (the desktop entry's ``%f``), and the rest in order:
    Qt's own options (``-platform offscreen``) must reach Qt as they were given."""
    for i, arg in enumerate(argv):
        if (
            arg.lower().endswith(".gguf")
            and not arg.startswith("-")
            and (i == 0 or argv[i - 1] not in ("-m", "--model"))
        ):
            return arg, argv[:i] + argv[i + 1:]
    return None, argv


def app_icon_path() -> Path:
    """The 256 px icon, shipped as package data."""
    return Path(str(resources.files("specdec_studio.resources") / "icons" / "specdec-studio.png"))


if __name__ == "__main__":
    sys.exit(main())
