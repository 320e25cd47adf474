"""``python -m kvpool ...``: the same as the ``kvpool`` script (kvpool.cli)."""

import sys

from kvpool.cli import main

sys.exit(main())
