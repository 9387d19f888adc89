"""``python -m specdec_studio.engine.cli``."""

import sys

from specdec_studio.engine.cli.main import main

sys.exit(main())
