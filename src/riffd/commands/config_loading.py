"""How every command but `config` loads the configuration: reporting every error (`load_or_report`),
going on with the folders a broken file names (`load_despite_errors`, for `status` and `report`),
with the defaults (`config_for_folders`), or, for commands that edit files, not at all
(`config_for_edits`). Light on imports: `riffd status` starts with it."""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path

from riffd.commands.output import EXIT_ERROR
from riffd.config import Config, ConfigError, config_path, load_config, loads_config
from riffd.config.load import read_config_bytes, validate_command


def print_errors(errors: Sequence[str]) -> None:
    """Print each configuration error on its own line, then how many."""
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    print(f"riffd: {len(errors)} configuration error(s)", file=sys.stderr)


def load_or_report(
    args: argparse.Namespace, overrides: dict[str, object] | None = None
) -> Config | None:
    """Load the configuration named by the global --config (with `overrides`); on errors, print
    every one on stderr and return None."""
    try:
        return load_config(getattr(args, "config", None), overrides=overrides or {})
    except ConfigError as exc:
        print_errors(exc.errors)
        return None


def config_for_folders(args: argparse.Namespace) -> Config:
    """For commands that only need riffd's folders (scan, fix, backups): the configuration; when the
    file has errors, the defaults (and the environment), with a one-line note."""
    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        path = config_path(getattr(args, "config", None))
        what = (  # one error said as it is (a file that is not there, above all), more counted
            exc.errors[0]
            if len(exc.errors) == 1
            else f"{path} has {len(exc.errors)} errors (`{validate_command(path)}` lists them)"
        )
        try:
            defaults = loads_config("", source=path)
        except ConfigError as again:  # (the environment's own settings: RIFFD_STATE_DIR)
            for error in again.errors:
                print(f"riffd: error: {error}", file=sys.stderr)
            raise SystemExit(EXIT_ERROR) from None
        print(f"riffd: note: {what}; using the default folders", file=sys.stderr)
        return defaults


def config_for_edits(args: argparse.Namespace, command: str) -> Config | None:
    """For commands that edit files (`fix`, `backups restore`): the configuration, or None, with
    every error said, when the file has errors: such a command works by its settings (which classes
    to repair, the quiet period, where backups go), and the defaults in their place could edit what
    the file turns off."""
    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        path = config_path(getattr(args, "config", None))
        for error in exc.errors:
            print(f"riffd: error: {error}", file=sys.stderr)
        print(
            f"riffd: {command} edits files by its configuration ({path}, and riffd's variables in "
            "the environment), so it does not run while that has errors (the defaults could edit "
            f"what it turns off); mend them (`{validate_command(path)}` checks them) and run again",
            file=sys.stderr,
        )
        return None


def load_despite_errors(args: argparse.Namespace) -> Config | None:
    """For `status` and `report`, which matter most when something is wrong: load the configuration;
    when the file has errors, name every one and go on with the settings that do not come from the
    file (defaults and the environment), saying so, with `args.config_to_mend` set to the command
    that lists them (`start_advice`). Return None only when even those cannot be used (riffd's
    variables in the environment have errors)."""
    path = config_path(getattr(args, "config", None))
    try:
        return load_config(getattr(args, "config", None))
    except ConfigError as exc:
        for error in exc.errors:
            print(f"riffd: config error: {error}", file=sys.stderr)
    try:
        loads_config("", source=path)
    except ConfigError:  # the environment's own settings (RIFFD_STATE_DIR): said above, once
        print(
            "riffd: riffd's variables in the environment cannot be used as they are; mend them "
            "and run again",
            file=sys.stderr,
        )
        return None
    # (what these commands advise starts with mending the file: `riffd run` stops at its errors)
    args.config_to_mend = validate_command(path)
    print(
        f"riffd: {path} cannot be used as it is (`{validate_command(path)}` checks it); a running daemon keeps the "
        "configuration it loaded before; this looks at the folders the file names, else the defaults",
        file=sys.stderr,
    )
    # The folders the file names, when it parses at all: they say where the daemon's state is.
    folders: dict[str, object] = {}
    try:
        document = tomllib.loads(read_config_bytes(path).decode("utf-8"))
        for dotted in ("state_dir", "reports.dir", "backups.dir"):
            section, _, key = dotted.rpartition(".")
            value = (document.get(section) or {}).get(key) if section else document.get(key)
            if isinstance(value, str) and value:
                folders[dotted] = str((path.parent / Path(value).expanduser()).absolute())
    except (OSError, AttributeError):
        pass
    except ValueError:  # not TOML at all: the state folder may still be read off its own line
        try:
            text = read_config_bytes(path).decode("utf-8", errors="replace")
        except (OSError, ValueError):
            text = ""
        found = re.search(r'^state_dir\s*=\s*"([^"\n]+)"', text, re.M)
        if found:
            folders["state_dir"] = str((path.parent / Path(found.group(1)).expanduser()).absolute())
    try:  # (folders the file names that cannot be used were among its errors said above)
        return loads_config("", source=path, overrides=folders)
    except ConfigError:
        return loads_config("", source=path)


def start_advice(args: argparse.Namespace, riffd: str) -> str:
    """How to start the daemon, as a command riffd advises: `riffd run`, or `riffd service
    install`; first mending the configuration when it has errors (load_despite_errors), at which
    `riffd run` would stop."""
    start = f"`{riffd} run`, or `{riffd} service install`"
    mend = getattr(args, "config_to_mend", None)
    return f"`{mend}` lists what to mend first; then {start}" if mend else start
