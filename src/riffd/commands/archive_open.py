"""Opening the archive for a command: the one the config names, a missing one said as such, and
never moved to this riffd's format while a daemon has it.

A daemon of riffd 0.2, left running after an upgrade, writes the archive in format 2 and fails on
every write once another riffd has moved it to format 3 (riffd.archive.schema). So while a daemon
holds the state folder, a command does not open an archive still of format 2: it says to restart
the daemon, whose new riffd moves the archive as it starts; or, when the daemon's figures say it
writes this riffd's format (its own move could not be made yet), that it moves it once it can.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from riffd.archive.schema import ARCHIVE_NAME, FORMAT, ArchiveError, needs_move
from riffd.commands.advice import daemon_figures
from riffd.commands.config_loading import load_or_report
from riffd.commands.output import riffd_advice
from riffd.database import DatabaseDamaged


def move_waits(state_dir: Path, archive_path: Path) -> str | None:
    """Why the archive at `archive_path` must not be opened for writing now: it is of format 2 and
    a daemon holds `state_dir` (None when neither, or either cannot be told)."""
    from riffd.daemon.lock import running_pid

    if not needs_move(archive_path):  # (first: a lock file riffd cannot read blocks nothing then)
        return None
    pid = running_pid(state_dir)
    if pid is None:
        return None
    holder = "the riffd daemon running now" + (f" (pid {pid})" if pid > 0 else "")
    figures = daemon_figures(state_dir)  # (a daemon of riffd 0.2 says no archive format)
    if figures is not None and figures.get("archive_format") == FORMAT:
        return (
            f"{archive_path} is still in format 2: {holder} runs this riffd and moves it to format "
            f"{FORMAT} as soon as it can open it, which it could not yet (`riffd status` says why: a "
            "full disk, or another process holding the archive); run this again once it has"
        )
    return (
        f"{archive_path} is in format 2, which this riffd moves to format 3 when it opens it, and "
        f"{holder} has it: a daemon of riffd 0.2 would fail on every write after that. Restart "
        "the daemon so that it runs this riffd, which moves the archive as it starts (`riffd "
        "service install` restarts the service; or stop `riffd run` and start it again), then run "
        "this again"
    )


def open_archive(args: argparse.Namespace, *, existing: bool = True) -> Any:
    """The archive the config names, or None once the error is said. With `existing` (every
    command but `ingest`), a missing archive is said as such, never made empty."""
    from riffd.archive.store import Archive

    config = load_or_report(args)
    if config is None:
        return None
    args.archive_path = config.state_dir / ARCHIVE_NAME
    args.roots = config.roots  # what the daemon watches (and archives)
    args.loaded_config = config
    if existing and not args.archive_path.exists():
        riffd = riffd_advice(args)
        print(
            f"riffd: error: no archive at {args.archive_path} yet: the daemon (`{riffd} run`) makes "
            f"it as it reads the sessions, or `{riffd} archive ingest` at once",
            file=sys.stderr,
        )
        return None
    try:
        why = move_waits(config.state_dir, args.archive_path)
        if why is not None:
            raise ArchiveError(why)
        return Archive(args.archive_path)
    except (ArchiveError, DatabaseDamaged) as exc:
        told = exc.told(riffd_advice(args)) if isinstance(exc, DatabaseDamaged) else str(exc)
        print(f"riffd: error: {told}", file=sys.stderr)
        return None
