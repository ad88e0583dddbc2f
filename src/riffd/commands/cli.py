"""The `riffd` command line: the top-level parser, every command group registered on it, and `main`.

Data goes to stdout, summaries, progress and log lines to stderr. `main(argv)` returns the exit
code; nothing here calls sys.exit.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from riffd import __version__
from riffd.commands import ack, archive, backups, config, daemon, export, fix, hook, scan, service, sessions, show
from riffd.commands.common import EXIT_ERROR, Parser, UsageError


def describe_os_error(exc: OSError) -> str:
    """Given an OSError, return one line naming the path(s), the operation's error and what to do."""
    where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
    what = exc.strerror or str(exc)
    hint = " (a cloud-synced or network folder failing for a moment? run the command again)" if exc.errno == 5 else ""
    return f"{where}: {what}{hint}" if where else f"{what}{hint}"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every riffd command."""
    parser = Parser(
        prog="riffd",
        description="Keeps Claude Code session transcripts healthy: finds duplicate, missing and orphan tool "
        "results, broken chains and torn lines, and repairs pairing damage safely (idle sessions only, after "
        "a verified backup, by atomic replace).",
        epilog="Exit codes: 0 nothing wrong / all repaired, 1 findings remain, 2 error. "
        "Environment: CLAUDE_CONFIG_DIR (Claude Code's folder, default ~/.claude), "
        "RIFFD_STATE_DIR (riffd's state and backups).",
    )
    parser.add_argument("--version", action="version", version=f"riffd {__version__}")
    parser.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"],
                        help="how much to log on stderr (default: warning; for `run`, the config's log.level)")
    parser.add_argument("--config", type=Path, default=None,
                        help="the TOML configuration file (default: $RIFFD_CONFIG, else "
                        "<user config dir>/riffd/config.toml)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    for command in (scan, fix, ack, sessions, backups, config, service, daemon, export, show, hook, archive):
        command.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run riffd with `argv` (default: sys.argv[1:]) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(level=(args.log_level or "warning").upper(), format="riffd: %(levelname)s: %(message)s",
                            stream=sys.stderr)
        if not hasattr(args, "run"):
            parser.print_help(sys.stderr)
            return EXIT_ERROR
        return int(args.run(args))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # what no command expected (a disk or sync client failing): one line, never a traceback
        print(f"riffd: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("riffd: interrupted", file=sys.stderr)
        return 130
