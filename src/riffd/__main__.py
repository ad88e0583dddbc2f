"""Allow `python -m riffd`."""

import sys

try:
    from riffd.entry import main
except KeyboardInterrupt:  # Ctrl-C while the front door loads, before main() can catch one
    from riffd.commands.output import say_interrupted

    sys.exit(say_interrupted())

sys.exit(main())
