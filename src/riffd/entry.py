"""The `riffd` console script: a light front door.

`riffd hook pre-tool-use` runs inside every Claude Code tool call, and `riffd hook session-start`
inside every session's start, so they must answer in a few tens of milliseconds; they are dispatched
from here without importing the full command line (whose imports alone take about 130 ms), as is
`riffd mcp`, the MCP server Claude Code starts (riffd.mcp_server.start). Every other command
(`riffd hook install`, `riffd mcp install` too), and `--help`, goes to `riffd.commands.cli.main`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # (collections costs the hooks a millisecond at every start)
    from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run riffd with `argv` (default: sys.argv[1:]) and return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if sys.platform not in ("linux", "darwin"):
        # riffd relies on POSIX: flock, renameat2/renamex_np, fsync of folders, signals.
        print(
            f"riffd: {sys.platform} is not supported: riffd runs on Linux (WSL2 included) and macOS",
            file=sys.stderr,
        )
        return 2
    try:
        return _dispatch(args)
    except KeyboardInterrupt:  # (the full command line says this itself; the fast paths here)
        from riffd.commands.output import say_interrupted

        return say_interrupted()


def _dispatch(args: list[str]) -> int:
    """Run the command `args` names: a hook or the MCP server from here, the rest by the full
    command line."""
    if args[:2] == ["hook", "pre-tool-use"] and not {"-h", "--help"} & set(args):
        from riffd.hooks.pre_tool_use import main as hook_main

        return hook_main(args[1:])
    if args[:2] == ["hook", "session-start"] and not {"-h", "--help"} & set(args):
        from riffd.hooks.session_start import main as session_start_main

        return session_start_main(args[1:])
    from riffd.mcp_server.start import is_serve

    if is_serve(args):
        from riffd.mcp_server.start import main as mcp_main

        return mcp_main(args)
    from riffd.commands.cli import main as cli_main

    return cli_main(args)
