"""`riffd hook pre-tool-use` in the full command line (for `--help` and `riffd hook` run through `python -m
riffd`); the console script runs riffd.tracker.hook directly, without this parser."""

from __future__ import annotations

import sys
from typing import Any

from riffd.tracker.calls import DEFAULT_WINDOW
from riffd.tracker.hook import EXIT_USAGE, MODES, run


def register(commands: Any) -> None:
    """Add `hook pre-tool-use` to the riffd command parser (the console script runs it without that parser)."""
    hook = commands.add_parser(
        "hook", help="Claude Code hook commands (settings.json runs them)",
        description="Commands Claude Code runs as hooks; they read the hook's JSON on stdin and answer on stdout.",
    )
    events = hook.add_subparsers(dest="event", metavar="EVENT", parser_class=type(hook))
    pre = events.add_parser(
        "pre-tool-use", help="note (or serve from the cache) a tool call that repeats a recent identical call",
        description="A PreToolUse hook: look at the session's transcript for the same call within the window. "
        "warn lets the call run and tells the model it repeats an earlier call; cache stops it and hands back the "
        "earlier result when nothing could have changed it. Any error lets the call run.",
    )
    pre.add_argument("--mode", choices=MODES, default="warn", help="warn (default) or cache")
    pre.add_argument("--window", type=float, default=DEFAULT_WINDOW, metavar="SECONDS",
                     help=f"how far back a call counts as recent (default: {DEFAULT_WINDOW:.0f})")
    pre.set_defaults(run=run_command)


def run_command(args: Any) -> int:
    """`riffd hook pre-tool-use` reached through the full command line: the same code as the console script."""
    if not args.window > 0:
        print("riffd hook: --window must be more than 0 seconds", file=sys.stderr)
        return EXIT_USAGE
    return run(args.mode, args.window, sys.stdin.buffer, sys.stdout)
