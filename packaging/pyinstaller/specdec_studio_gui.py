"""The frozen bundle's ``specdec-studio`` executable (PyInstaller freezes a script, not an entry point)."""

import sys

from specdec_studio.app.main import main

sys.exit(main())
