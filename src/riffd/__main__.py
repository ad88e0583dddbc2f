"""Allow `python -m riffd`."""

import sys

from riffd.entry import main

sys.exit(main())
