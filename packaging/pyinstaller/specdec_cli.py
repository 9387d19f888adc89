"""The frozen bundle's ``specdec`` executable (PyInstaller freezes a script, not an entry point)."""

import sys

from specdec_studio.engine.cli import main

sys.exit(main())
