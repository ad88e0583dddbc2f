"""`riffd mcp`: the MCP server over riffd's archive (riffd.mcp_server), and `riffd mcp install` /
`uninstall`, which register it with Claude Code for the user as `claude mcp add --scope user riffd
-- <riffd> mcp` does (riffd.claude_code.user_config: only riffd's entry is added or taken out, after
a copy of the file is kept in riffd's state folder, riffd.hooks.install.apply).

The server itself starts from the console script's front door (riffd.entry), without this command
line, so that it answers Claude Code quickly; this module only describes `riffd mcp` for `--help`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from riffd.claude_code.user_config import (
    SERVERS,
    ConfigFileError,
    held_lock,
    is_plain_stdio,
    parse_document,
    server_entry,
    stdio_server,
    user_config_path,
    with_server,
    without_server,
)
from riffd.commands.arguments import Parser
from riffd.commands.config_loading import config_for_folders
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.display import riffd_launcher, riffd_variables, shell_command
from riffd.hooks.install import Change, SettingsError, apply, backup_folder

INSTALL_HINT = (
    "riffd: error: `riffd mcp` needs the MCP SDK, an optional extra: install it with "
    "`python3 -m pip install 'riffd[mcp]'` (or `pipx inject riffd 'mcp>=1.2,<2'`)"
)

NAME = "riffd"  # the server's name in Claude Code (its tools are mcp__riffd__search, ...)


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd mcp` to the riffd subcommands."""
    mcp = commands.add_parser(
        "mcp",
        help="an MCP server on stdio: Claude searches, reads, checks and restores its sessions",
        description="Run a Model Context Protocol server on stdio that gives Claude Code riffd's memory: "
        "search (every archived conversation, deleted sessions too), list_sessions, read_session (the "
        "conversation Claude Code would load, in pages), session_health (findings and the API errors they "
        "cause) and restore_session (a deleted session put back, never over an existing file). Needs the "
        "optional extra riffd[mcp]. `riffd mcp install` registers it for the user.",
    )
    actions = mcp.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    install = actions.add_parser(
        "install",
        help="register the server with Claude Code for the user, as `claude mcp add --scope user` does",
        description="Add `riffd` to the top-level mcpServers of Claude Code's user configuration "
        "($CLAUDE_CONFIG_DIR/.claude.json, else ~/.claude.json), running this riffd by its absolute path; "
        "nothing else in the file changes, and a copy of it is kept in riffd's state folder first. Running it "
        "again changes nothing.",
    )
    install.add_argument(
        "--dry-run", action="store_true", help="print the entry it would write; change nothing"
    )
    install.set_defaults(run=run_install)
    uninstall = actions.add_parser(
        "uninstall",
        help="take the server out of Claude Code's user configuration again",
        description="Take `riffd` out of the top-level mcpServers again, leaving every other byte of the "
        "file as it is (after a copy is kept in riffd's state folder).",
    )
    uninstall.set_defaults(run=run_uninstall)
    mcp.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    """`riffd mcp` reached through the full command line (not the console script): say how it
    starts."""
    del args
    print(
        "riffd: error: the MCP server starts from the riffd console script: run `riffd mcp` "
        "(or `python3 -m riffd mcp`)",
        file=sys.stderr,
    )
    return EXIT_ERROR


def server_command(config: Path | None) -> list[str]:
    """How Claude Code should start this riffd's server: the console script that runs now, by its
    absolute path, else this Python with `-m riffd`; with `--config` when one was given."""
    command = list(riffd_launcher(elsewhere=True))
    if config is not None:
        command += ["--config", os.path.abspath(config)]
    return [*command, "mcp"]


def run_install(args: argparse.Namespace) -> int:
    """`riffd mcp install`: exit 0 registered (or there already), 2 refused."""
    return _locked(args, _install)


def run_uninstall(args: argparse.Namespace) -> int:
    """`riffd mcp uninstall`: exit 0 taken out (or not there), 2 refused."""
    return _locked(args, _uninstall)


def _locked(args: argparse.Namespace, change: Callable[[argparse.Namespace, Path], int]) -> int:
    """`change` the user configuration holding Claude Code's lock on it, from the read to the
    write (a dry run reads it without)."""
    path = user_config_path()
    try:
        with contextlib.nullcontext() if getattr(args, "dry_run", False) else held_lock(path):
            return change(args, path)
    except ConfigFileError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _install(args: argparse.Namespace, path: Path) -> int:
    if not sdk_installed():
        print(
            f"{INSTALL_HINT}; then run `riffd mcp install` "
            f"again ({path} not written: Claude Code would start a server that cannot run)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    command = server_command(getattr(args, "config", None))
    try:
        before = _read(path)
        text = before.decode("utf-8") if before is not None else ""
        entry = stdio_server(command, riffd_variables())
        there = server_entry(text, NAME, path)
        # replaced only when it is riffd's own: its form, with the variables riffd gives it now
        ours = is_plain_stdio(there) and (there.get("env") or {}) == entry["env"]
        if there not in (None, entry) and not ours:
            raise ConfigFileError(
                f"{path}: {SERVERS}.{NAME} is there already, not in the form riffd writes "
                f"({json.dumps(there, ensure_ascii=False)}); riffd changed nothing: keep it, or take "
                f"it out (`claude mcp remove --scope user {NAME}`) and run this again"
            )
        after = with_server(text, NAME, entry, path).encode("utf-8")
    except (ConfigFileError, UnicodeDecodeError) as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if there not in (None, entry):
        print(f"{path}: {SERVERS}.{NAME} ran `{_command_of(there)}`; now this riffd")
    variables = "".join(f" with {name}={value}" for name, value in entry["env"].items())
    print(f"{path}: {SERVERS}.{NAME} runs `{shell_command(*command)}`{variables}")
    if before is not None and after == before:
        print(f"{path}: riffd's server is there already; nothing to change")
        return EXIT_OK
    if args.dry_run:
        print(f"riffd: dry run: {path} not written", file=sys.stderr)
        return EXIT_OK
    return _write(args, Change(path, before, after), "install")


def sdk_installed() -> bool:
    """Whether the MCP SDK the server needs can be imported here (the server runs with this
    Python)."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # (sys.modules["mcp"] set to None: as if missing)
        return False


def _command_of(entry: dict[str, Any]) -> str:
    """The command a stdio server entry runs, as a shell would take it."""
    return shell_command(entry["command"], *map(str, entry.get("args", [])))


def _uninstall(args: argparse.Namespace, path: Path) -> int:
    state_dir = config_for_folders(args).state_dir
    try:
        before = _read(path)
        if before is None:
            print(f"{path}: no such file; nothing to take out")
            return EXIT_OK
        had_servers, had_file = _before_install(path, state_dir)
        text = before.decode("utf-8")
        after_text = without_server(text, NAME, path, drop_empty=not had_servers)
    except (ConfigFileError, UnicodeDecodeError) as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if after_text == text:
        print(f"{path}: riffd's server is not in it; nothing to take out")
        return EXIT_OK
    gone = not had_file and not parse_document(after_text, path)
    return _write(
        args, Change(path, before, None if gone else after_text.encode("utf-8")), "uninstall"
    )


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _before_install(path: Path, state_dir: Path) -> tuple[bool, bool]:
    """From the newest copy an install kept: whether the file had a top-level mcpServers then, and
    whether there was a file at all (no copy: as if it had both)."""
    folder = backup_folder(state_dir, path)
    copies = sorted(folder.glob("install-*.json")) if folder.is_dir() else []
    if not copies:
        return True, True
    if copies[-1].name.endswith("-absent.json"):
        return False, False
    try:
        document = parse_document(copies[-1].read_text(encoding="utf-8"), copies[-1])
    except (ConfigFileError, OSError, UnicodeDecodeError):
        return True, True
    return SERVERS in document, True


def _write(args: argparse.Namespace, change: Change, kind: str) -> int:
    try:
        saved = apply(change, config_for_folders(args).state_dir, kind, "riffd's server entry")
    except (SettingsError, OSError) as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(
        f"riffd: {change.path} {'removed' if change.after is None else 'written'}; the previous "
        f"file is kept in {saved}"
        + (
            "; Claude Code starts the server in new sessions (`/mcp` shows it)"
            if kind == "install"
            else ""
        ),
        file=sys.stderr,
    )
    return EXIT_OK
