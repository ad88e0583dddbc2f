"""`riffd backups list | restore | prune`: the verified backups riffd takes before each repair."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from riffd.claude_code.folders import default_roots
from riffd.claude_code.liveness import session_liveness
from riffd.commands.advice import repaired_again_note, restore_words
from riffd.commands.arguments import Parser, UsageError, count_of_one_or_more, nonnegative_number
from riffd.commands.config_loading import config_for_edits, config_for_folders
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, print_json, skipped_line
from riffd.config.model import Config
from riffd.display import shell_command
from riffd.repair.backup import BackupError, BackupRecord, BackupStore
from riffd.repair.outcomes import ApplyOptions, Failed, Skipped, SkipReason
from riffd.repair.restore import restore_backup
from riffd.transcript.targets import resolve_target


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd backups list | restore | prune` to the riffd subcommands."""
    backups = commands.add_parser(
        "backups",
        help="list, restore or prune riffd's backups",
        description="Work with the verified backups riffd takes before each repair.",
    )
    backups.add_argument(
        "--backup-dir",
        type=Path,
        default=None,
        help="the backup folder (default: the config's backups.dir, <state dir>/backups)",
    )
    actions = backups.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    listing = actions.add_parser("list", help="list backups, newest last")
    listing.add_argument(
        "session",
        nargs="?",
        metavar="SESSION",
        help="only this session's: an id, a unique prefix of one, latest, or a transcript path",
    )
    listing.add_argument("--json", action="store_true", help="print JSON on stdout")
    listing.set_defaults(run=run_backups_list)
    restore = actions.add_parser(
        "restore",
        help="put a backup back",
        description="Write a backup back to its original path (only if that session is idle, and after a "
        "verified backup of what is there now) or, with --to, to a new file.",
    )
    restore.add_argument("backup_id", metavar="ID")
    restore.add_argument(
        "--to", type=Path, default=None, help="write to this path instead of the original"
    )
    restore.add_argument("--force", action="store_true", help="with --to: replace an existing file")
    restore.add_argument(
        "--quiet-period",
        type=nonnegative_number,
        default=None,
        metavar="SECONDS",
        help="how long the original must be unmodified to count as idle (default: the config's "
        "repair.quiet_period, 120)",
    )
    restore.set_defaults(run=run_backups_restore)
    prune = actions.add_parser(
        "prune", help="remove old backups (the newest of each file is always kept)"
    )
    prune.add_argument(
        "--keep",
        type=count_of_one_or_more,
        default=10,
        metavar="N",
        help="backups to keep per file, 1 or more (default: 10)",
    )
    prune.add_argument(
        "--max-age",
        type=nonnegative_number,
        default=90,
        metavar="DAYS",
        help="remove backups older than this (default: 90)",
    )
    prune.add_argument(
        "--max-total-mb",
        type=nonnegative_number,
        default=None,
        metavar="MB",
        help="then remove the oldest until the store is under this size",
    )
    prune.set_defaults(run=run_backups_prune)


def _store(args: argparse.Namespace, config: Config | None = None) -> BackupStore:
    """The backup folder: --backup-dir, else the configuration's backups.dir (the daemon's; `config`
    when loaded already)."""
    if args.backup_dir:
        return BackupStore(args.backup_dir)
    return BackupStore((config or config_for_folders(args)).backups.dir)


def run_backups_list(args: argparse.Namespace) -> int:
    """`riffd backups list`: print every backup, oldest first."""
    config = config_for_folders(args)
    store = _store(args, config)
    if os.path.lexists(store.root) and not store.root.is_dir():
        print(
            f"riffd: error: {store.root}: not a folder; no backups can be listed", file=sys.stderr
        )
        return EXIT_ERROR
    if args.session == "latest":
        try:
            resolve_target("latest", config.roots)
        except FileNotFoundError as exc:
            print(f"riffd: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
    records = store.list() if store.root.is_dir() else []
    if args.session:
        records = [record for record in records if _names(args.session, record, config.roots)]
    if args.json:
        print_json(
            [
                {
                    "id": r.backup_id,
                    "source": r.source_path,
                    "session": r.session_id,
                    "sha256": r.sha256,
                    "size": r.size,
                    "created": r.created_at.isoformat(),
                    "reason": r.reason,
                    "findings": list(r.findings),
                    "path": str(r.data_path),
                }
                for r in records
            ]
        )
        return EXIT_OK
    for record in records:
        print(
            f"{record.backup_id}  {record.created_at:%Y-%m-%d %H:%M:%S}  {record.size:>12,} B  "
            f"{record.source_path}  ({len(record.findings)} finding(s))"
        )
    print(
        f"riffd: {len(records)} backup(s) in {store.root}"
        + (
            ""
            if store.root.is_dir()
            else " (no such folder yet: riffd makes it at its first backup)"
        ),
        file=sys.stderr,
    )
    return EXIT_OK


def _names(session: str, record: BackupRecord, roots: Sequence[Path]) -> bool:
    """Whether SESSION names the session a backup was taken of (`latest`: under `roots`)."""
    if session == "latest":
        try:
            return record.source_path in {str(path) for path in resolve_target("latest", roots)}
        except FileNotFoundError:
            return False
    return (
        record.session_id.startswith(session)
        or Path(record.source_path).stem.startswith(session)
        or os.path.abspath(session) == record.source_path
    )


def run_backups_restore(args: argparse.Namespace) -> int:
    """`riffd backups restore ID [--to PATH]`: put a backup back; exit 0 done, 1 skipped, 2
    failed."""
    config = config_for_edits(args, "`riffd backups restore`")
    if config is None:
        return EXIT_ERROR
    store = _store(args, config)
    options = ApplyOptions(
        backup_dir=store.root,
        claude_dir=config.claude_dir,  # where a running client registers the session
        roots=config.roots + tuple(default_roots()),
        quiet_period=(
            config.repair.quiet_period if args.quiet_period is None else args.quiet_period
        ),
    )
    outcome = restore_backup(store, args.backup_id, args.to, overwrite=args.force, options=options)
    if isinstance(outcome, Skipped):
        detail = outcome.detail
        if outcome.reason is SkipReason.LIVE:
            detail += _restore_now_advice(Path(outcome.path), options, restore_words(args))
        print(skipped_line(outcome.path, outcome.reason, detail), file=sys.stderr)
        return EXIT_FINDINGS
    if isinstance(outcome, Failed):
        print(f"riffd: error: {outcome.detail}", file=sys.stderr)
        return EXIT_ERROR
    safety = (
        f" (what was there is backed up as {outcome.safety_backup_id})"
        if outcome.safety_backup_id
        else ""
    )
    print(f"restored {args.backup_id} to {outcome.path}{safety}")
    if store.get(args.backup_id).findings:
        note = repaired_again_note(Path(outcome.path), config)
        if note:
            print(note)
    return EXIT_OK


def _restore_now_advice(path: Path, options: ApplyOptions, typed: tuple[str, ...]) -> str:
    """What to do about a restore a live session held back: `typed`, the command as given, again
    once the session is idle; and when only the quiet period holds it (no Claude Code process has
    the session open), the same with `--quiet-period 0`, which restores it now."""
    again = f"; run `{shell_command(*typed)}` again once it is idle"
    if options.quiet_period <= 0:
        return again
    held, _ = session_liveness(path, options.claude_dirs(path), 0)
    if held:
        return again
    now = shell_command(*typed[:-1], "--quiet-period", "0", typed[-1])
    return (
        f"{again}; only the quiet period holds it: if you are sure the session is closed, `{now}` "
        "restores it now"
    )


def run_backups_prune(args: argparse.Namespace) -> int:
    """`riffd backups prune`: remove old backups, keeping the newest of each file."""
    config = None
    if not args.backup_dir:  # (the folder it removes from comes from the configuration)
        config = config_for_edits(args, "`riffd backups prune`")
        if config is None:
            return EXIT_ERROR
    store = _store(args, config)
    if not store.root.is_dir():
        print(f"riffd: no backups in {store.root}", file=sys.stderr)
        return EXIT_OK
    max_total = int(args.max_total_mb * 1e6) if args.max_total_mb is not None else None
    try:
        removed = store.prune(
            keep_per_file=args.keep, max_age_days=args.max_age, max_total_bytes=max_total
        )
    except (ValueError, BackupError) as exc:
        raise UsageError(f"riffd backups prune: {exc}") from exc
    for record in removed:
        print(f"removed {record.backup_id}  {record.source_path}")
    print(f"riffd: removed {len(removed)} backup(s) from {store.root}", file=sys.stderr)
    return EXIT_OK
