"""The frozen bundle's ``specdec`` executable (PyInstaller freezes a script, not an entry point)."""

import sys

from engine.cli import main

sys.exit(main())
