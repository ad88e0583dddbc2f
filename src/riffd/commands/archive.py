"""`riffd archive`: ingest, restore, search, stats, export."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from riffd.archive.store import ARCHIVE_NAME
from riffd.commands.common import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, transcript_targets
from riffd.commands.config import load_or_report


def register(commands: Any) -> None:
    """Add `riffd archive ...` to the riffd command parser."""
    archive = commands.add_parser(
        "archive",
        help="the archive: every conversation kept, deduplicated, searchable",
        description="Work with riffd's archive (<state dir>/archive.db), which keeps every line of every "
        "transcript the daemon reads, so nothing is lost when Claude Code deletes old sessions.",
    )
    actions = archive.add_subparsers(dest="action", metavar="ACTION")
    ingest = actions.add_parser("ingest", help="back-fill the archive from transcripts (resumes where it stopped)")
    ingest.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="transcripts or folders (default: Claude Code's projects folders)")
    ingest.set_defaults(run=run_ingest)
    restore = actions.add_parser("restore", help="rebuild a transcript byte for byte as it was last archived")
    restore.add_argument("session", metavar="SESSION", help="a session id, or an archived file's path")
    restore.add_argument("--to", type=Path, default=None,
                         help="write here (a folder, or a file for a single transcript) instead of the original path")
    restore.add_argument("--force", action="store_true", help="replace files that exist")
    restore.set_defaults(run=run_restore)
    search = actions.add_parser("search", help="find words in every archived conversation")
    search.add_argument("query", metavar="QUERY", help="words that must all occur")
    search.add_argument("--project", default=None, help="only sessions whose project path starts with this")
    search.add_argument("--session", default=None, help="only this session id")
    search.add_argument("--role", choices=["user", "assistant", "system", "summary"], default=None,
                        help="only messages of this role")
    search.add_argument("--since", default=None, metavar="DATE", help="only messages from this date on (YYYY-MM-DD)")
    search.add_argument("--limit", type=int, default=20, help="how many hits at most (default 20)")
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(run=run_search)
    stats = actions.add_parser("stats", help="sizes, dedup ratio, counts, oldest and newest")
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.set_defaults(run=run_stats)
    export = actions.add_parser("export", help="print a session's messages as JSON")
    export.add_argument("session", metavar="SESSION", help="a session id, or an archived file's path")
    export.set_defaults(run=run_export)


def _open(args: argparse.Namespace) -> Any:
    from riffd.archive.store import Archive, ArchiveError

    config = load_or_report(args)
    if config is None:
        return None
    try:
        return Archive(config.state_dir / ARCHIVE_NAME)
    except ArchiveError as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return None


def run_ingest(args: argparse.Namespace) -> int:
    """`riffd archive ingest`: archive what is new in each transcript; exit 0, or 2 when a file failed."""
    from riffd.archive.store import ingest_file

    archive = _open(args)
    if archive is None:
        return EXIT_ERROR
    files, errors = transcript_targets(args.paths)
    started, added, size = time.monotonic(), 0, 0
    for number, path in enumerate(files, 1):
        try:
            added += ingest_file(archive, path)
            size += path.stat().st_size
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
        if sys.stderr.isatty():
            rate = size / 1e6 / max(time.monotonic() - started, 1e-6)
            print(f"\rriffd: {number}/{len(files)} files, {size / 1e6:.0f} MB, {rate:.0f} MB/s ", end="",
                  file=sys.stderr)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    if added:
        archive.settle()  # the last pack compressed, the search index merged
    print(f"riffd: archived {added} new line(s) from {len(files)} file(s) into {archive.path}", file=sys.stderr)
    archive.close()
    return EXIT_ERROR if errors else EXIT_OK


def run_restore(args: argparse.Namespace) -> int:
    """`riffd archive restore SESSION`: write the archived transcript(s) back; refuse to overwrite unless --force."""

    archive = _open(args)
    if archive is None:
        return EXIT_ERROR
    files = archive.files_of(args.session)
    if not files:
        print(f"riffd: error: nothing archived for {args.session!r} (a session id or an archived path)",
              file=sys.stderr)
        return EXIT_ERROR
    failed = 0
    for file_id, path, _session in files:
        target = Path(path)
        if args.to is not None:
            target = args.to / Path(path).name if (args.to.is_dir() or len(files) > 1) else args.to
        if target.exists() and not args.force:
            print(f"riffd: error: {target} exists; use --to for another place, or --force to replace it",
                  file=sys.stderr)
            failed += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.with_name(f".{target.name}.riffd-restore.tmp")
        with open(temp, "wb") as out:
            for line in archive.iter_file(file_id):
                out.write(line)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
        print(f"restored {path} -> {target}")
    archive.close()
    return EXIT_ERROR if failed else EXIT_OK


def run_search(args: argparse.Namespace) -> int:
    """`riffd archive search QUERY`: print session, time and a snippet per hit; exit 0 with hits, 1 without."""

    since = None
    if args.since:
        try:
            since = int(datetime.fromisoformat(args.since).timestamp())
        except ValueError:
            print(f"riffd: error: --since {args.since!r}: expected a date like 2026-11-01", file=sys.stderr)
            return EXIT_ERROR
    archive = _open(args)  # after the arguments are checked: a bad date leaves no archive open
    if archive is None:
        return EXIT_ERROR
    hits = archive.search(args.query, project=args.project, session=args.session, role=args.role, since=since,
                          limit=args.limit)
    if args.json:
        sys.stdout.write(orjson.dumps([hit.__dict__ for hit in hits], option=orjson.OPT_INDENT_2).decode() + "\n")
    for hit in [] if args.json else hits:
        when = datetime.fromtimestamp(hit.timestamp).strftime("%Y-%m-%d %H:%M") if hit.timestamp else "-"
        print(f"{hit.session_id or '-'}  {when}  {hit.role or '-':9}  {hit.path}:{hit.line}\n    {hit.snippet}")
    archive.close()
    return EXIT_OK if hits else EXIT_FINDINGS


def run_stats(args: argparse.Namespace) -> int:
    """`riffd archive stats`: print the archive's figures."""

    archive = _open(args)
    if archive is None:
        return EXIT_ERROR
    stats = archive.stats()
    archive.close()
    if args.json:
        sys.stdout.write(orjson.dumps(stats, option=orjson.OPT_INDENT_2).decode() + "\n")
        return EXIT_OK
    ratio = f"{stats['ratio']:.1%}" if stats["ratio"] is not None else "-"
    print(f"raw bytes seen:   {stats['raw_bytes']:,}\nbytes stored:     {stats['stored_bytes']:,} ({ratio} of raw)\n"
          f"sessions: {stats['sessions']}, files: {stats['files']}, lines: {stats['lines']}\n"
          f"messages: {stats['messages']}, unique contents: {stats['unique_contents']}, "
          f"unique texts: {stats['unique_texts']}\noldest: {stats['oldest'] or '-'}, newest: {stats['newest'] or '-'}")
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    """`riffd archive export SESSION`: print the documented JSON form of the session's archived messages."""

    archive = _open(args)
    if archive is None:
        return EXIT_ERROR
    sessions = archive.export(args.session)
    archive.close()
    if not sessions:
        print(f"riffd: error: nothing archived for {args.session!r}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(orjson.dumps(sessions, option=orjson.OPT_INDENT_2).decode() + "\n")
    return EXIT_OK
