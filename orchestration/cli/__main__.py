"""``python -m orchestration.cli`` is the ``dagwright`` command, as ``python -m orchestration`` is."""

import sys

from orchestration.cli import main

sys.exit(main())
