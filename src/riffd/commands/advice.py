"""The commands `fix`, `backups restore` and `archive restore` advise when only the quiet period
holds a file back: the command the user typed, with its own options, and `--quiet-period 0`; and
whether a riffd daemon in repair mode runs now to do it by itself (`daemon_figures`: what the
daemon running now says of itself)."""

from __future__ import annotations

import argparse
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.commands.output import riffd_words
from riffd.config.model import Config
from riffd.database import DatabaseDamaged
from riffd.display import shell_command
from riffd.state.database import STATE_NAME


@dataclass(frozen=True)
class RepairNow:
    """What `fix` says of a file only its quiet period holds back: `words`, the command that
    repairs it now (the user's own options kept, `--quiet-period 0`), and the folders a riffd daemon
    running in repair mode watches (none when no such daemon runs): it repairs a file there by
    itself once the quiet period is over."""

    words: tuple[str, ...] = ("riffd", "fix", "--quiet-period", "0")
    daemon_roots: tuple[Path, ...] = ()

    def command(self, path: Path) -> str:
        """The command that repairs `path` now, quoted word by word."""
        return shell_command(*self.words, path)

    def daemon_repairs(self, path: Path) -> bool:
        """Whether the running daemon repairs `path` by itself: under a folder it watches, and not a
        symlink (the daemon never repairs through one)."""
        return not path.is_symlink() and _under(path, self.daemon_roots)

    def advice(self, path: Path) -> str:
        """The words added to the reason a live file was skipped."""
        by_itself = (
            " (the riffd daemon, running in repair mode, repairs it by itself once the quiet period "
            "is over)"
            if self.daemon_repairs(path)
            else ""
        )
        return (
            f"; only the quiet period holds it: if you are sure the session is closed, "
            f"`{self.command(path)}` repairs it now{by_itself}"
        )


# what `fix` advises when its caller gave no options (a test's `_fix_one`)
PLAIN_REPAIR_NOW = RepairNow()


def repair_now(args: argparse.Namespace, config: Config) -> RepairNow:
    """The RepairNow of a `riffd fix` run with `args` (`--no-synthesize` and `--backup-dir` kept:
    the advised repair makes the same edits and puts its backup where this one would)."""
    words = [*riffd_words(args), "fix", "--quiet-period", "0"]
    if args.no_synthesize:
        words.append("--no-synthesize")
    if args.backup_dir is not None:
        words += ["--backup-dir", str(args.backup_dir)]
    return RepairNow(tuple(words), repair_daemon_roots(config))


def _under(path: Path, roots: tuple[Path, ...]) -> bool:
    """Whether `path` is in one of the folders `roots` (links resolved)."""
    where = path.resolve()
    return any(where.is_relative_to(root.resolve()) for root in roots)


def restore_words(args: argparse.Namespace) -> tuple[str, ...]:
    """The command `riffd backups restore` was given as `args`: the same backup folder, target,
    `--force` and backup id (not its quiet period)."""
    words = [*riffd_words(args), "backups"]
    if args.backup_dir is not None:
        words += ["--backup-dir", str(args.backup_dir)]
    words.append("restore")
    if args.to is not None:
        words += ["--to", str(args.to)]
    if args.force:
        words.append("--force")
    return (*words, args.backup_id)


def archive_restore_words(args: argparse.Namespace) -> list[str]:
    """The command `riffd archive restore` was given as `args`, without its SESSION and quiet
    period: `--config`, `--to` and `--force` kept."""
    words = [*riffd_words(args), "archive", "restore"]
    if args.to is not None:
        words += ["--to", str(args.to)]
    if args.force:
        words.append("--force")
    return words


def daemon_figures(state_dir: Path) -> dict[str, Any] | None:
    """The figures the riffd daemon running now on `state_dir` keeps in the state store (its pid,
    mode, roots, archive format...); None when no daemon runs, or they are not its own or cannot be
    read."""
    from riffd.daemon.lock import running_pid
    from riffd.state.store import StateStore

    pid = running_pid(state_dir)
    path = state_dir / STATE_NAME
    if pid is None or not path.exists():
        return None
    try:
        store = StateStore(path, read_only=True)
    except (sqlite3.Error, DatabaseDamaged, OSError):
        return None
    try:
        snapshot = store.meta("daemon")
    except sqlite3.Error:
        return None
    finally:
        store.close()
    if not isinstance(snapshot, dict) or snapshot.get("pid") != pid:
        return None
    return snapshot


def repair_daemon_roots(config: Config) -> tuple[Path, ...]:
    """The folders a riffd daemon running now on `config`'s state folder in repair mode watches (as
    its last figures say); none when no daemon runs, it only reports, or its state cannot be
    read."""
    snapshot = daemon_figures(config.state_dir)
    if snapshot is None or snapshot.get("repair_mode") != "repair" or not snapshot.get("running"):
        return ()
    return tuple(Path(root) for root in snapshot.get("roots") or ())


def repaired_again_note(path: Path, config: Config) -> str:
    """After a backup holding damage is put back at `path`: when a riffd daemon in repair mode
    watches its folder, the note that it repairs that damage again, and how to keep the file as
    restored; else nothing."""
    if not _under(path, repair_daemon_roots(config)):
        return ""
    from riffd.config.load import advised_config
    from riffd.display import riffd_invocation

    report_only = f"{riffd_invocation(advised_config(config))} config set repair.mode report-only"
    return (
        "note: the riffd daemon runs in repair mode over this folder: once the session is idle, it "
        f"repairs the damage this backup holds again; `{report_only}` (the daemon reloads it) keeps "
        "the file as restored"
    )
