"""App tests run offscreen, whatever the environment says."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
