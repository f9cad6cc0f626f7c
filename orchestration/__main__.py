"""``python -m orchestration`` is the ``dagwright`` command."""

import sys

from orchestration.cli import main

sys.exit(main())
