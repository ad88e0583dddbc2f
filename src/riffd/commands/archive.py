"""`riffd archive`: ingest, restore, search, stats, export, recover.

A database error never shows a traceback: each command says in one line which file failed and what
helps.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from riffd.archive.schema import ARCHIVE_NAME, RECOVER_ADVICE, ArchiveError
from riffd.commands.archive_open import move_waits, open_archive
from riffd.commands.archive_stats import run_stats
from riffd.commands.arguments import count_of_one_or_more, date_seconds, nonnegative_number
from riffd.commands.config_loading import load_or_report
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, riffd_advice
from riffd.database import (
    BUSY,
    DAMAGED,
    SIDECARS,
    damaged_copies,
    full_disk_note,
    is_busy_error,
    is_damage_error,
    is_full_error,
    started_as,
)
from riffd.display import display_json


def register(commands: Any) -> None:
    """Add `riffd archive ...` to the riffd command parser."""
    archive = commands.add_parser(
        "archive",
        help="the archive: every conversation kept, deduplicated, searchable",
        description="Work with riffd's archive (<state dir>/archive.db), which keeps every line of every "
        "transcript the daemon reads, so nothing is lost when Claude Code deletes old sessions.",
    )
    actions = archive.add_subparsers(dest="action", metavar="ACTION")
    ingest = actions.add_parser(
        "ingest",
        help="back-fill the archive from transcripts and their sessions' other "
        "files (resumes where it stopped)",
    )
    ingest.add_argument(
        "--no-compact",
        action="store_true",
        help="leave the packs filled and the files kept whole during the ingest compressed fast "
        "(packs about 12%% bigger, files kept whole a quarter to three quarters bigger); `riffd "
        "archive compact` or the daemon, once quiet, compresses them at the settled level",
    )
    ingest.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="transcripts or folders (default: the configured roots, which the daemon watches)",
    )
    ingest.set_defaults(run=run_ingest)
    restore = actions.add_parser(
        "restore",
        help="bring a whole session back, byte for byte as it was last archived",
        description="Write every file of a session back (its transcripts, saved tool outputs, subagents' settings, "
        "checkpoints, task list and plans) where `claude --resume` finds it, byte for byte as last archived, with its "
        "modification time (the time of now for a saved output, task list or plan Claude Code's cleanup would "
        "delete again by its own age: --keep-times), checked against the checksums archived with it (a file the archive cannot give whole is "
        "not restored). Only what is missing is written: a file that is there and the same is left, as is a "
        "transcript that has only grown; one that differs is named and left, unless --force: then it is replaced "
        "only while its session is idle, after a verified backup of it. Nothing is written through a symlinked folder "
        "below a session's project folder or config folder, and a session's transcripts are held back when another "
        "file of it failed. Exit 0: every file is there now; 1: one was skipped (live or changed) or differs, or a "
        "saved output the transcripts name was never archived; 2: one failed, was held back, or the archive cannot "
        "give it whole.",
    )
    restore.add_argument(
        "session",
        metavar="SESSION",
        help="a session id (or a prefix only one session has), or an archived transcript's path",
    )
    restore.add_argument(
        "--to",
        type=Path,
        default=None,
        metavar="PATH",
        help="write here (a folder, or a file for a single transcript) instead of the original path; "
        "the files keep their paths below the folder they all share",
    )
    restore.add_argument(
        "--force",
        action="store_true",
        help="replace files that exist and differ (only while their session is idle, after a "
        "backup of each)",
    )
    restore.add_argument(
        "--keep-times",
        action="store_true",
        help="give every file its own modification time as archived, also a saved output, task list or "
        "plan older than Claude Code's cleanupPeriodDays (by default such a file gets the time of now, "
        "so the client's next start does not delete it again by its own age)",
    )
    restore.add_argument(
        "--quiet-period",
        type=nonnegative_number,
        default=None,
        metavar="SECONDS",
        help="how long a file to replace must be unmodified to count as idle (default: the config's "
        "repair.quiet_period, 120)",
    )
    restore.set_defaults(run=run_restore)
    search = actions.add_parser("search", help="find words in every archived conversation")
    search.add_argument("query", metavar="QUERY", help="words that must all occur")
    search.add_argument(
        "--project", default=None, help="only sessions whose project path starts with this"
    )
    search.add_argument(
        "--session",
        default=None,
        help="only this session (its id, or a prefix of it only one archived session has)",
    )
    search.add_argument(
        "--role",
        choices=["user", "assistant", "system", "summary"],
        default=None,
        help="only messages of this role",
    )
    search.add_argument(
        "--since",
        type=date_seconds,
        default=None,
        metavar="DATE",
        help="only messages from this date on (YYYY-MM-DD)",
    )
    search.add_argument(
        "--limit",
        type=count_of_one_or_more,
        default=20,
        help="how many hits at most, 1 or more (default 20)",
    )
    search.add_argument("--json", action="store_true", help="print JSON")
    search.set_defaults(run=run_search)
    compact = actions.add_parser(
        "compact",
        help="compress the packs and files archived fast at the settled level (the daemon does it "
        "when quiet)",
        description="Compress the packs and the files kept whole that were archived fast at the settled "
        "level (the daemon does it when quiet), then "
        "move an archive made by riffd 0.2 or earlier to 4 KiB pages (searches read them about a third faster) "
        "when nothing else has it open: with the daemon running it says so and leaves the pages; stop the "
        "daemon and run it again. Exit 0 when done, 2 when the config or the archive cannot be read.",
    )
    compact.set_defaults(run=run_compact)
    stats = actions.add_parser("stats", help="sizes, dedup ratio, counts, oldest and newest")
    stats.add_argument("--json", action="store_true", help="print JSON")
    stats.set_defaults(run=run_stats)
    export = actions.add_parser("export", help="print a session's messages as JSON")
    export.add_argument(
        "session", metavar="SESSION", help="a session id, or an archived file's path"
    )
    export.set_defaults(run=run_export)
    verify = actions.add_parser(
        "verify",
        help="check the archive against the transcripts and session files that still exist",
        description="Compare, byte for byte, what the archive holds of each transcript with the file (the "
        "archive as of one moment, the file line by line), and of each file kept whole (saved tool outputs, "
        "subagents' settings, checkpoints, task lists, plans) with its newest version. A file whose archive differs "
        "from it (a hole, a damaged pack) is named with the line or byte where they part; --fix archives it again "
        "(a transcript as a new generation; the old one is kept). Files changed since they were archived, or with "
        "lines not archived yet, are counted, not faults: the daemon archives them. Without PATH, every pack and "
        "every file kept whole is read back too, and each damaged one is named with the archived files (deleted "
        "sessions too) it holds, and what can be done for each. Exit 0: no file differs (or --fix mended each) and "
        "nothing is damaged; 1: some differ, or something is damaged; 2: an error.",
    )
    verify.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="transcripts or folders, with their sessions' files kept whole (default: every archived "
        "transcript that still exists, and every session file)",
    )
    verify.add_argument(
        "--fix",
        action="store_true",
        help="archive each file that differs again (a transcript as a new generation)",
    )
    verify.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per file (the summary stays on stderr)",
    )
    verify.set_defaults(run=run_verify)
    recover = actions.add_parser(
        "recover",
        help="copy every readable line of a damaged archive into the current one",
        description="When riffd finds its archive damaged, it moves it aside (<state dir>/archive.db.damaged-<time>) "
        "and starts a new one. This copies every file and generation that can still be read from the old one into "
        "the new one and names what cannot be read; the old file is then renamed to archive.db.recovered-<time>. "
        "Exit 0: all of it recovered; 1: some parts were unreadable (named); 2: an error.",
    )
    recover.add_argument(
        "damaged",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="damaged archives to read (default: every archive.db.damaged-* in the state folder)",
    )
    recover.set_defaults(run=run_recover)
    for parser in actions.choices.values():
        parser.set_defaults(run=_one_line_errors(parser.get_default("run")))


def _one_line_errors(
    run: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """Wrap an archive command so a database error is one line naming the archive and what helps,
    exit 2."""

    @functools.wraps(run)
    def guarded(args: argparse.Namespace) -> int:
        import zstandard  # late: riffd's start-up imports no compression library

        from riffd.archive.packs import PackDamaged

        try:
            return run(args)
        except (
            ArchiveError
        ) as exc:  # a format this riffd cannot read (an archive, or one to recover)
            print(f"riffd: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except PackDamaged as exc:
            print(
                f"riffd: error: {getattr(args, 'archive_path', None) or 'the archive'}: {exc}; `{riffd_advice(args)} archive "
                "verify` names every damaged pack, the sessions whose lines it holds and what can be done for "
                "each",
                file=sys.stderr,
            )
            return EXIT_ERROR
        except (sqlite3.Error, zstandard.ZstdError) as exc:
            where = getattr(args, "archive_path", None)
            if is_busy_error(exc):
                print(
                    f"riffd: error: {where or 'the archive'}: {exc} ({BUSY}); run the command again (an ingest "
                    "goes on from where it stopped)",
                    file=sys.stderr,
                )
            elif is_full_error(exc, where.parent if where is not None else None):
                note = full_disk_note(where.parent) if where is not None else "the disk is full"
                print(
                    f"riffd: error: {where or 'the archive'}: {exc}; {note}. The archive is not damaged: what was "
                    "archived before is kept, nothing of the step that failed is. Free some space and run the "
                    "command again (an ingest goes on from where it stopped)",
                    file=sys.stderr,
                )
            # a pack that cannot be read
            elif is_damage_error(exc) or isinstance(exc, zstandard.ZstdError):
                print(
                    f"riffd: error: {where or 'the archive'} cannot be read ({exc}); "
                    + started_as(RECOVER_ADVICE, riffd_advice(args)),
                    file=sys.stderr,
                )
            else:
                print(
                    f"riffd: error: {where or 'the archive'}: {exc}; check that the state folder is yours and "
                    "writable, then run the command again",
                    file=sys.stderr,
                )
            return EXIT_ERROR

    return guarded


def run_ingest(args: argparse.Namespace) -> int:
    """`riffd archive ingest`: archive what is new in each transcript and the files kept whole
    beside them (riffd.commands.archive_ingest); exit 0, or 2 when a file failed."""
    from riffd.commands.archive_ingest import run_ingest as ingest

    archive = open_archive(args, existing=False)
    return EXIT_ERROR if archive is None else ingest(args, archive)


def run_compact(args: argparse.Namespace) -> int:
    """`riffd archive compact`: compress the packs and files archived fast at the settled level; exit 0 (2: no
    archive)."""
    from riffd.commands.archive_ingest import run_compact as compact

    archive = open_archive(args)
    return EXIT_ERROR if archive is None else compact(args, archive)


def run_verify(args: argparse.Namespace) -> int:
    """`riffd archive verify`: compare the archive with the transcripts and the files kept whole
    (riffd.commands.archive_verify); exit 0, 1 (files differ), 2 (error)."""
    from riffd.commands.archive_verify import run_verify as verify

    archive = open_archive(args)
    return EXIT_ERROR if archive is None else verify(args, archive)


def run_restore(args: argparse.Namespace) -> int:
    """`riffd archive restore SESSION`: write the archived transcript(s) back
    (riffd.commands.archive_restore)."""
    from riffd.commands.archive_restore import restore_files

    archive = open_archive(args)
    if archive is None:
        return EXIT_ERROR
    try:
        return restore_files(archive, args)
    finally:
        archive.close()


def run_search(args: argparse.Namespace) -> int:
    """`riffd archive search QUERY`: print session, time and a snippet per hit
    (riffd.commands.archive_search); exit 0 with hits, 1 without ("no matches" on stderr), 2 for a
    query that holds no word."""
    from riffd.archive.search import query_words
    from riffd.commands.archive_search import print_hits

    if not query_words(args.query):
        print(
            f"riffd: error: {args.query!r} holds no word to search for: a search finds the lines "
            "holding every word (letters and digits) of its query",
            file=sys.stderr,
        )
        return EXIT_ERROR
    archive = open_archive(args)
    if archive is None:
        return EXIT_ERROR
    try:
        return print_hits(archive, args)
    finally:
        archive.close()


def run_export(args: argparse.Namespace) -> int:
    """`riffd archive export SESSION`: print the documented JSON form of the session's archived
    messages."""

    archive = open_archive(args)
    if archive is None:
        return EXIT_ERROR
    sessions = archive.export(args.session)
    archive.close()
    if not sessions:
        print(f"riffd: error: nothing archived for {args.session!r}", file=sys.stderr)
        return EXIT_ERROR
    sys.stdout.write(display_json(sessions, orjson.OPT_INDENT_2).decode() + "\n")
    return EXIT_OK


def run_recover(args: argparse.Namespace) -> int:
    """`riffd archive recover [FILE...]`: copy what is readable of damaged archives into the current
    one; exit 0 when all of it was, 1 when parts were unreadable (named), 2 on an error."""
    from riffd.archive.recover import recover
    from riffd.archive.store import Archive
    from riffd.daemon.lock import running_pid

    config = load_or_report(args)
    if config is None:
        return EXIT_ERROR
    args.archive_path = path = config.state_dir / ARCHIVE_NAME
    sources = list(args.damaged) or damaged_copies(path)
    if not sources:
        if running_pid(config.state_dir) is not None:
            print(
                f"riffd: nothing to recover: no {path.name}{DAMAGED}* in {config.state_dir} (the running daemon "
                "moves a damaged archive aside as soon as it meets it)",
                file=sys.stderr,
            )
            return EXIT_OK
        if not path.exists():  # (opening it would make an empty archive, then call it checked)
            print(
                f"riffd: nothing to recover: no archive at {path} and no {path.name}{DAMAGED}* in "
                f"{config.state_dir}",
                file=sys.stderr,
            )
            return EXIT_OK
        archive = Archive(path, heal=True, check=True)  # moves a damaged archive aside, if it is
        sources = [archive.moved_aside] if archive.moved_aside else []
        archive.close()
        if not sources:
            print(
                f"riffd: nothing to recover: {path} passes SQLite's check and there is no {path.name}{DAMAGED}* "
                f"in {config.state_dir} (a damaged pack inside it, which SQLite's check does not see, is named by "
                "`riffd archive verify`)",
                file=sys.stderr,
            )
            return EXIT_OK
    why = move_waits(config.state_dir, path)
    if why is not None:
        print(f"riffd: error: {why}", file=sys.stderr)
        return EXIT_ERROR
    into = Archive(path)
    partial = False
    try:
        for source in sources:
            if not source.is_file():
                what = (
                    "a folder; name the archive file in it (archive.db, or a moved-aside "
                    "archive.db.damaged-*)"
                    if source.is_dir()
                    else "no such file"
                )
                print(f"riffd: error: {source}: {what}", file=sys.stderr)
                return EXIT_ERROR
            result = recover(source, into)
            for part in result.unreadable:
                print(f"riffd: unreadable in {source}: {part}", file=sys.stderr)
            partial = partial or bool(result.unreadable)
            done = source.with_name(source.name.replace(DAMAGED, ".recovered-", 1))
            if DAMAGED in source.name and not done.exists():
                for suffix in ("", *SIDECARS):
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(f"{source}{suffix}", f"{done}{suffix}")
            print(
                f"recovered {result.lines} line(s) in {result.generations} generation(s) of {result.files} file(s) "
                f"from {source} into {path}"
                + (
                    f"; {result.already_there} generation(s) were there already"
                    if result.already_there
                    else ""
                )
                + (f"; {result.versions} version(s) of files kept whole" if result.versions else "")
                + (f"; {len(result.unreadable)} part(s) unreadable" if result.unreadable else "")
                + (
                    f"; the old file is now {done}"
                    if DAMAGED in source.name and done.exists()
                    else ""
                )
            )
        into.settle()
    finally:
        into.close()
    return EXIT_FINDINGS if partial else EXIT_OK
