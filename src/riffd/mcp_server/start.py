"""`riffd [--config FILE] [--log-level LEVEL] mcp`, as the console script's front door
(riffd.entry) hands it over: without the full command line's imports, so the server answers Claude
Code's first request quickly. Without the MCP SDK (the extra `riffd[mcp]`) it says in one line how
to install it, and exits 2. Its imports are light: the front door reads `is_serve` for every
command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path


def is_serve(argv: Sequence[str]) -> bool:
    """Whether `argv` is `riffd [global options] mcp` (no action, no --help)."""
    return _command(argv) == ["mcp"]


def _command(argv: Sequence[str]) -> list[str]:
    """`argv` after the global options (--config FILE, --log-level LEVEL, in either form)."""
    words = list(argv)
    while (
        words
        and words[0].startswith("--")
        and words[0].split("=")[0]
        in (
            "--config",
            "--log-level",
        )
    ):
        words = words[1:] if "=" in words[0] else words[2:]
    return words


def main(argv: Sequence[str]) -> int:
    """Serve riffd's MCP tools on stdio until the client closes it; exit 0, or 2 without the SDK or
    with a bad command line."""
    from riffd.commands.config_loading import config_for_folders
    from riffd.commands.output import EXIT_ERROR, EXIT_OK

    parser = argparse.ArgumentParser(prog="riffd", add_help=False)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("command", choices=["mcp"])
    args = parser.parse_args(list(argv))
    logging.basicConfig(
        level=args.log_level.upper(),
        format="riffd: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        from riffd.mcp_server.server import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "anyio", "pydantic"):
            raise
        from riffd.commands.mcp_setup import INSTALL_HINT

        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_ERROR
    from riffd.display import config_named, riffd_invocation
    from riffd.mcp_server.memory import Memory

    # The commands it advises run riffd as Claude Code runs the server (by its absolute path, on the
    # same configuration and state): the user's shell may have neither on its PATH or environment
    # (the --config given, when it is there: riffd_invocation drops a RIFFD_CONFIG that is not)
    named = config_named(getattr(args, "config", None))
    riffd = riffd_invocation(named, launcher=True, variables=True)
    serve(Memory(config_for_folders(args), riffd=riffd))
    return EXIT_OK
