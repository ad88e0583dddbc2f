"""The `riffd` command line: the top-level parser, every command group registered on it, and `main`.

Data goes to stdout, summaries, progress and log lines to stderr. `main(argv)` returns the exit
code; nothing here calls sys.exit.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from riffd import __version__
from riffd.commands.arguments import Parser, UsageError
from riffd.commands.output import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_READER_GONE,
    ClosedOutput,
    CtrlCNoted,
    leave_quietly_for_closed_stdout,
    say_interrupted,
    stdout_reader_gone,
)
from riffd.display import STDOUT_NAME, use_display_streams

# Each command: the module that registers and runs it, and its one-line help. Only the module of the
# command that runs is imported (`riffd --help` imports none), so a command starts without the
# others' imports; a test checks that these lines are the modules' own.
COMMANDS: dict[str, tuple[str, str]] = {
    "scan": ("scan", "report damage in transcripts; changes nothing"),
    "fix": (
        "fix",
        "repair damage in idle sessions (tool results, chains, torn lines), after a verified backup",
    ),
    "ack": (
        "ack",
        "acknowledge a finding (e.g. a malformed line riffd never edits) so it stops making riffd "
        "unhealthy",
    ),
    "sessions": (
        "sessions",
        "list sessions: id, project, title, dates, size, health, what the archive holds",
    ),
    "backups": ("backups", "list, restore or prune riffd's backups"),
    "config": ("config", "create, locate, show, check or change riffd's configuration file"),
    "service": (
        "service",
        "run `riffd run` as a systemd user service (Linux) or launchd agent (macOS)",
    ),
    "run": ("daemon", "the daemon: watch, check incrementally, repair when idle, report"),
    "report": ("daemon", "write a health report now and print it"),
    "status": ("daemon", "is the daemon running, and is all well?"),
    "export": ("export", "write each session's active conversation as one readable file"),
    "show": (
        "show",
        "show a session's structure: chain, branches, compactions, sidechains by agent, findings",
    ),
    "hook": ("hook", "Claude Code hook commands (settings.json runs them)"),
    "mcp": (
        "mcp_setup",
        "an MCP server on stdio: Claude searches, reads, checks and restores its sessions",
    ),
    "archive": ("archive", "the archive: every conversation kept, deduplicated, searchable"),
}
_TAKES_VALUE = {"--config", "--log-level"}


def describe_os_error(exc: OSError) -> str:
    """Given an OSError, return one line naming the path(s), the operation's error and what to
    do."""
    where = " -> ".join(str(name) for name in (exc.filename, exc.filename2) if name is not None)
    what = exc.strerror or str(exc)
    hint = (
        " (a cloud-synced or network folder failing for a moment? run the command again)"
        if exc.errno == 5
        else ""
    )
    return f"{where}: {what}{hint}" if where else f"{what}{hint}"


def command_of(argv: Sequence[str]) -> str | None:
    """The command `argv` names (after the global options), or None."""
    words = iter(argv)
    for word in words:
        if word in _TAKES_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Return the argument parser: with every command registered, or (given `argv` naming a known
    command) with that command only; for no command or an unknown one, every command's name and
    help, to list them."""
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
    parser.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="how much to log on stderr (default: warning; for `run`, the config's log.level)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="the TOML configuration file (default: $RIFFD_CONFIG, else "
        "<user config dir>/riffd/config.toml)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

    wanted = None if argv is None else command_of(argv)
    if argv is not None and wanted not in COMMANDS:
        for name, (_module, text) in COMMANDS.items():
            commands.add_parser(name, help=text, add_help=False)
        return parser
    modules = dict.fromkeys(
        module for name, (module, _text) in COMMANDS.items() if argv is None or name == wanted
    )
    for module in modules:
        importlib.import_module(f"riffd.commands.{module}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run riffd with `argv` (default: sys.argv[1:]) and return the exit code."""
    try:
        code = _main(argv)
    except SystemExit as exc:  # argparse's --help and --version
        if not isinstance(exc.code, int):
            raise
        code = exc.code
    return _with_stdout_flushed(code)


def _with_stdout_flushed(code: int) -> int:
    """`code`, once what is still buffered for standard output is written: a failure to write it
    is one line and exit 2 (141 when its reader has gone; an interrupted command keeps 130), not
    an error and exit 120 as Python exits."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError as exc:
        gone = isinstance(exc, BrokenPipeError) and stdout_reader_gone()
        _drop_stdout()
        if code == EXIT_INTERRUPTED:  # (said so already)
            return code
        if gone:
            return EXIT_READER_GONE
        print(f"riffd: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    return code


def _drop_stdout() -> None:
    """Point descriptor 1 at /dev/null: what is left in standard output's buffer goes nowhere,
    and does not fail again as Python exits."""
    if not isinstance(sys.stdout, ClosedOutput):  # (which holds /dev/null there already)
        leave_quietly_for_closed_stdout()


def _group(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser:
    """The parser of the command `name` (`riffd archive`: its own help, which lists its actions),
    else `parser`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            chosen: argparse.ArgumentParser = action.choices[name]
            return chosen
    return parser


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    use_display_streams()  # a file name that is not UTF-8 prints as \xff escapes, never a traceback
    with CtrlCNoted() as ctrl_c:  # the commands' imports
        parser = build_parser(argv)
    try:
        if ctrl_c.noted:
            raise KeyboardInterrupt
        args = parser.parse_args(argv)
        logging.basicConfig(
            level=(args.log_level or "warning").upper(),
            format="riffd: %(levelname)s: %(message)s",
            stream=sys.stderr,
        )
        if not hasattr(args, "run"):  # no command, or a command's group with no action named
            _group(parser, getattr(args, "command", None)).print_help(sys.stderr)
            return EXIT_ERROR
        if sys.stdout is None:  # started with standard output closed (`riffd ... >&-`)
            # a command that prints nothing there runs; one that prints stops at its first line
            sys.stdout = ClosedOutput()
            # and descriptor 1 holds /dev/null, not the next file or socket opened (the daemon's
            # guard socket took it, and passed it on when it started again in place), and no
            # child is given it
            null = os.open(os.devnull, os.O_WRONLY)
            if null != 1:
                os.dup2(null, 1, inheritable=False)
                os.close(null)
            else:
                os.set_inheritable(1, False)
        return int(args.run(args))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError as exc:
        if stdout_reader_gone():  # `riffd ... | head`: nothing more to say, and no one to say it to
            return leave_quietly_for_closed_stdout()
        print(f"riffd: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # what no command expected (a disk or sync client failing): one line, never a traceback
        if exc.filename == STDOUT_NAME:  # (a full disk, say)
            _drop_stdout()
        print(f"riffd: error: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return say_interrupted()
