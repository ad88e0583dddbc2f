"""Allow `python -m riffd`."""

import sys

try:
    from riffd.entry import main
except KeyboardInterrupt:  # Ctrl-C while the front door loads, before main() can catch one
    from riffd.commands.output import say_interrupted

    code = say_interrupted()
else:
    code = main()
# CPython notes a KeyboardInterrupt raised inside any exec() of a string (a dataclass's generated
# methods, say) as unhandled, even when riffd caught it and said so; under `python -m` it then ends
# the process by SIGINT, not with this exit code (1 Ctrl-C in about 100 at a scan's start). An
# exec() that completes clears that note.
exec("")
sys.exit(code)
