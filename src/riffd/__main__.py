"""Allow `python -m riffd`."""

import sys

from riffd.cli import main

sys.exit(main())
