"""``python -m stress pool|http ...`` (see stress/cli.py)."""

import sys

from stress.cli import main

if __name__ == "__main__":
    sys.exit(main())
