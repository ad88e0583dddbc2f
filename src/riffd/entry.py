"""The `riffd` console script: a light front door.

`riffd hook …` runs inside every Claude Code tool call, so it must answer in a few tens of
milliseconds; it is dispatched from here without importing the full command line (whose imports
alone take about 130 ms). Every other command, and `riffd hook --help`, goes to
`riffd.commands.cli.main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run riffd with `argv` (default: sys.argv[1:]) and return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if sys.platform not in ("linux", "darwin"):
        # riffd relies on POSIX: flock, renameat2/renamex_np, fsync of folders, signals.
        print(f"riffd: {sys.platform} is not supported: riffd runs on Linux (WSL2 included) and macOS",
              file=sys.stderr)
        return 2
    if args[:1] == ["hook"] and not {"-h", "--help"} & set(args):
        from riffd.tracker.hook import main as hook_main

        return hook_main(args[1:])
    from riffd.commands.cli import main as cli_main

    return cli_main(args)
