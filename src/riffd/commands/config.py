"""`riffd config`: write, locate, show, check and change riffd's TOML configuration file (see
riffd.config).

`set` edits the file with tomlkit, so the user's comments, key order and layout survive; the edited
text is checked before it is written, and it is written atomically (temp file in the same folder,
fsync, rename).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
from tomlkit.items import AoT, Table

from riffd.commands.config_loading import load_or_report, print_errors
from riffd.commands.output import EXIT_ERROR, EXIT_OK
from riffd.config import (
    CONFIG_ENV,
    STATE_DIR_ENV,
    ConfigError,
    config_path,
    example_toml,
    loads_config,
    parse_toml_value,
)
from riffd.config.load import read_config_bytes


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Add `riffd config init | path | show | validate | set` to the subcommands of `riffd`."""
    config = commands.add_parser(
        "config",
        help="create, locate, show, check or change riffd's configuration file",
        description="Work with riffd's TOML configuration file: --config PATH, else $RIFFD_CONFIG, else "
        "<user config dir>/riffd/config.toml. Precedence: command-line flag > environment > file > default.",
    )
    actions = config.add_subparsers(dest="config_action", metavar="ACTION")
    init = actions.add_parser(
        "init", help="write the commented example config (every key at its default)"
    )
    init.add_argument("--force", action="store_true", help="replace an existing config file")
    init.set_defaults(run=run_config_init)
    where = actions.add_parser("path", help="print the config file in use and whether it exists")
    where.set_defaults(run=run_config_path)
    show = actions.add_parser("show", help="print the effective configuration as TOML")
    show.set_defaults(run=run_config_show)
    validate = actions.add_parser(
        "validate", help="check the config file; print every error, or ok"
    )
    validate.set_defaults(run=run_config_validate)
    change = actions.add_parser(
        "set",
        help="change one key, keeping the file's comments and layout",
        description="Set KEY (dotted, e.g. watcher.debounce) to VALUE, read as a TOML value when it is one "
        '(numbers, true/false, [arrays], "quoted strings") and as a plain string otherwise. The file keeps its '
        "comments and layout; it is written only if the result is a valid config, and is created from the "
        "example when missing.",
    )
    change.add_argument("key", metavar="KEY")
    change.add_argument("value", metavar="VALUE")
    change.set_defaults(run=run_config_set)


def run_config_init(args: argparse.Namespace) -> int:
    """`riffd config init [--force]`: write the commented example to the config path; never
    overwrite unless --force."""
    target = config_path(args.config)
    if target.exists() and not args.force:
        print(
            f"riffd: error: {target} already exists; pass --force to replace it, or change one key with "
            "`riffd config set KEY VALUE`",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        write_atomically(target, example_toml())
    except OSError as exc:
        print(f"riffd: error: {target}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ERROR
    print(target)
    print(f"riffd: wrote the example configuration to {target}", file=sys.stderr)
    return EXIT_OK


def run_config_path(args: argparse.Namespace) -> int:
    """`riffd config path`: print the config file in use on stdout, and where it came from and
    whether it exists on stderr."""
    target = config_path(args.config)
    origin = (
        "from --config"
        if args.config is not None
        else f"from ${CONFIG_ENV}"
        if os.environ.get(CONFIG_ENV)
        else "the default location"
    )
    from riffd.display import riffd_invocation

    init = f"{riffd_invocation(None if origin == 'the default location' else target)} config init"
    explicit = origin != "the default location"
    state = (
        "exists"
        if target.is_file()
        else "a folder, not a riffd config file: name a file (`riffd --config FILE config init` "
        "writes one)"
        if target.is_dir()
        else "not a regular file (a FIFO or a device): read to its end as the config, up to 1 MiB"
        if target.exists()
        else "a symbolic link to nothing (a missing target or a loop): point it at a riffd config "
        "file, or remove it"
        if os.path.lexists(target)
        else f"does not exist (`riffd run` and the commands that edit files refuse it, the others "
        f"use the defaults; `{init}` writes one)"
        if explicit
        else f"does not exist (the defaults apply; `{init}` writes one)"
    )
    print(target)
    print(f"riffd: {origin}; {state}", file=sys.stderr)
    return EXIT_OK


def run_config_show(args: argparse.Namespace) -> int:
    """`riffd config show`: print the effective configuration (file, environment and defaults
    applied) as TOML."""
    config = load_or_report(args)
    if config is None:
        return EXIT_ERROR
    where = (
        f"# Effective riffd configuration, read from {config.source}"
        if config.source is not None
        else f"# Effective riffd configuration: defaults (no file at {config_path(args.config)})"
    )
    sys.stdout.write(f"{where}\n\n{tomlkit.dumps(config.to_toml_dict())}")
    return EXIT_OK


def run_config_validate(args: argparse.Namespace) -> int:
    """`riffd config validate`: print every error and exit 2, or print ok."""
    config = load_or_report(args)
    if config is None:
        return EXIT_ERROR
    if config.source is None:
        print(
            f"riffd: no config file at {config_path(args.config)}; the defaults apply",
            file=sys.stderr,
        )
    print("ok")
    return EXIT_OK


def run_config_set(args: argparse.Namespace) -> int:
    """`riffd config set KEY VALUE`: change one key, keeping comments and layout; write only a valid
    result."""
    target = config_path(args.config)
    try:
        original = read_config_bytes(target).decode("utf-8") if target.exists() else None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        print(f"riffd: error: {target}: cannot read: {exc}", file=sys.stderr)
        return EXIT_ERROR
    text = example_toml() if original is None else original
    try:
        document = tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as exc:
        print(
            f"riffd: error: {target}: TOML syntax error: {_syntax_error(text, exc)}; fix it by hand "
            "first (nothing was written)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    parts = args.key.split(".")
    if not all(parts):
        print(
            f"riffd: error: {args.key!r} is not a key; expected a dotted key such as watcher.debounce",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        _assign(document, parts, parse_toml_value(args.value))
    except TypeError as exc:
        print(f"riffd: error: {args.key}: {exc} (nothing was written)", file=sys.stderr)
        return EXIT_ERROR
    edited = tomlkit.dumps(document)
    # A file that is already invalid elsewhere can still be fixed one key at a time: refuse only an
    # edit that adds an error.
    errors_before = set(_errors_in(text, target))
    errors_after = _errors_in(edited, target)
    added = [error for error in errors_after if error not in errors_before]
    if added:
        print_errors(added)
        print(f"riffd: {target} is unchanged", file=sys.stderr)
        return EXIT_ERROR
    try:
        write_atomically(target, edited)
    except OSError as exc:
        print(
            f"riffd: error: {target}: cannot write: {exc.strerror or exc} (the file is unchanged)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    print(
        f"riffd: {'set' if original is not None else 'created ' + str(target) + ' with'} {args.key} = "
        f"{tomlkit.item(parse_toml_value(args.value)).as_string()}",
        file=sys.stderr,
    )
    if args.key == "state_dir" and os.environ.get(STATE_DIR_ENV):
        print(
            f"riffd: note: ${STATE_DIR_ENV} is set and takes precedence over the file's state_dir",
            file=sys.stderr,
        )
    if errors_after:
        print("riffd: the file still has other errors:", file=sys.stderr)
        print_errors(errors_after)
        return EXIT_ERROR
    return EXIT_OK


def _syntax_error(text: str, error: Exception) -> str:
    """The TOML syntax error in `text` as riffd's loader words it (the standard library's tomllib:
    tomlkit names the end of a file as the character '\\x00' at line 1 column 0)."""
    import tomllib

    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return str(exc)
    return str(error)


def _errors_in(text: str, source: Path) -> list[str]:
    """Return every configuration error in `text` as a file at `source` (empty when it is valid)."""
    try:
        loads_config(text, source=source)
    except ConfigError as exc:
        return exc.errors
    return []


def _assign(document: tomlkit.TOMLDocument, parts: list[str], value: object) -> None:
    """Set the dotted key `parts` in `document` to `value`, creating tables as needed; raise
    TypeError when a part of the path is a value, not a table."""
    container: Any = document
    for depth, part in enumerate(parts[:-1]):
        if part not in container:
            container[part] = tomlkit.table()
        container = container[part]
        if not isinstance(container, Table | dict):
            raise TypeError(f"{'.'.join(parts[: depth + 1])} is a value, not a table")
    name = parts[-1]
    if container is document and name not in document:
        # A new top-level key belongs after the last top-level key, not above the first table's
        # comment.
        plain_keys = [
            key
            for key, item in document.body
            if key is not None and not isinstance(item, Table | AoT)
        ]
        if plain_keys:
            document._insert_after(plain_keys[-1], name, value)
            return
    container[name] = value


def write_atomically(target: Path, text: str) -> None:
    """Write `text` to `target` so a reader sees the old file or the new one, never half of one:
    temp file in the same folder, fsync, rename. A symlinked config (dotfile managers) has its link
    target replaced; the file's permission bits are kept. Raise OSError when that fails (the old
    file is then untouched)."""
    try:
        real = target.resolve() if target.is_symlink() else target
    except RuntimeError:  # (before Python 3.13; OSError after)
        raise OSError(errno.ELOOP, "a symbolic link in a loop", str(target)) from None
    real.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(real.stat().st_mode) if real.exists() else 0o644
    fd, temp_name = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temp_name, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    # The rename itself must survive a crash too; some file systems cannot fsync a folder, which is
    # fine.
    with contextlib.suppress(OSError):
        folder = os.open(real.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
