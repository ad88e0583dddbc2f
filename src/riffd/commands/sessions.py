"""`riffd sessions`: one line per session, on disk and in the archive, with the ones Claude Code
deleted."""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riffd.archive.holdings import Holdings, whole_when_deleted
from riffd.archive.packs import PackDamaged
from riffd.archive.schema import ARCHIVE_NAME, ArchiveError
from riffd.archive.store import Archive
from riffd.claude_code.projects import find_project_folders
from riffd.claude_code.session_files import config_folders
from riffd.commands.arguments import Parser
from riffd.commands.config_loading import config_for_folders
from riffd.commands.output import EXIT_ERROR, EXIT_OK, print_json, riffd_advice
from riffd.database import DatabaseDamaged
from riffd.display import shell_command
from riffd.state.database import STATE_NAME
from riffd.state.store import StateStore
from riffd.transcript.acks import acknowledged_in
from riffd.transcript.findings import INFORMATIONAL
from riffd.transcript.sessions import (
    claude_resume,
    describe_file,
    describe_lines,
    local_time,
    project_folders,
    session_files,
)


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd sessions` to the riffd subcommands."""
    sessions = commands.add_parser(
        "sessions",
        help="list sessions: id, project, title, dates, size, health, what the archive holds",
        description="List the sessions under the transcript roots, newest first: id, last activity (local time), "
        "project, size, health (riffd's findings, from the daemon's state; 'changed since' when the file changed after the daemon read it), what the archive holds of it "
        "(transcript, subagents, saved outputs, checkpoints, task files, plans) and whether that is all of it, and "
        "its title (a title Claude Code gave it, else its first prompt). --deleted lists the sessions whose transcript "
        "is gone (Claude Code deletes them after cleanupPeriodDays, 30 by default) but the archive holds, with the "
        "command that brings each back. Any SESSION argument of riffd also takes a unique prefix of an id, and "
        "`latest` (the newest session of the project in the current folder).",
    )
    sessions.add_argument(
        "--project", metavar="PATH", help="only this project's sessions (its working directory)"
    )
    sessions.add_argument(
        "--deleted",
        action="store_true",
        help="the sessions Claude Code deleted that the archive holds",
    )
    sessions.add_argument("--json", action="store_true", help="one JSON document")
    sessions.set_defaults(run=run_sessions)


def run_sessions(args: argparse.Namespace) -> int:
    """`riffd sessions`: exit 0; 2 when a transcript or folder cannot be read (each named; the rest
    is listed), or when there is an archive that cannot be read (the sessions on disk are listed,
    what it holds of them unknown), or none and --deleted needs it, or --project names a project
    with no folder here (without --deleted)."""
    config = config_for_folders(args)
    archive_path = config.state_dir / ARCHIVE_NAME
    view, problem = _archived(archive_path, args.deleted)
    if view is None and args.deleted:
        print(
            f"riffd: error: the archive {archive_path} cannot be read ({problem}); nothing deleted can be listed"
            if problem
            else f"riffd: error: no archive at {archive_path} (the daemon makes it); nothing deleted can be listed",
            file=sys.stderr,
        )
        return EXIT_ERROR

    unread: list[str] = []

    def unfollowed(exc: OSError) -> None:
        unread.append(f"{exc.filename}: {exc.strerror}")

    folders = (
        find_project_folders(Path(args.project).expanduser().absolute(), config.roots)
        if args.project
        else project_folders(config.roots, unfollowed)
    )
    if args.project and not folders and not args.deleted:
        # (--deleted lists a project whose folder went with its sessions: none is needed there)
        print(
            f"riffd: error: {args.project}: no Claude Code project folder for it under "
            f"{', '.join(map(str, config.roots)) or 'no root'} (`{riffd_advice(args)} sessions "
            "--deleted --project PATH` lists the archived sessions of a project whose folder is gone)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    configs = config_folders(config.roots, config.claude_dir)
    rows = (
        _deleted(view, args.project, riffd_advice(args))
        if args.deleted and view is not None
        else _on_disk(
            session_files(folders, unfollowed),
            view,
            health_counts(config.state_dir / STATE_NAME),
            list(config.roots),
            configs,
            unfollowed,
            problem is not None,
        )
    )
    rows.sort(key=lambda row: row.get("last_ts") or 0, reverse=True)
    if problem and not args.deleted:
        # (said first: a long listing does not hide it)
        print(
            f"riffd: error: the archive {archive_path} cannot be read ({problem}); what it holds is "
            "not shown",
            file=sys.stderr,
        )
    if args.json:
        print_json({"sessions": rows})
        return EXIT_ERROR if problem else _unread(unread)
    archived = (
        {item["session_id"] or Path(item["path"]).stem for item in view.items}
        if args.deleted and view is not None
        else set()
    )
    for row in rows:
        size = f"{row['bytes'] / 1e6:.1f} MB" if row.get("bytes") is not None else "-"
        print(
            f"{row['session_id']}  {local_time(row.get('last_ts'))}  {row.get('project') or '-'}  {size}  "
            f"{row['health']}  {_held_words(row)}  {row.get('title') or '-'}"
        )
        if args.deleted:
            print(
                "    deleted; "
                f"`{riffd_advice(args)} "
                f"{shell_command('archive', 'restore', unique_prefix(row['session_id'], archived))}`"
                f" brings it back to {row['path']}"
            )
    what = "deleted session(s) the archive holds" if args.deleted else "session(s)"
    if args.deleted or view is not None:
        archive_words = ""
    elif problem:
        archive_words = "; the archive cannot be read (above)"
    else:
        archive_words = "; no archive yet (the daemon makes it)"
    print(f"riffd: {len(rows)} {what}{archive_words}", file=sys.stderr)
    return EXIT_ERROR if problem else _unread(unread)


def unique_prefix(session: str, sessions: set[str], least: int = 8) -> str:
    """The shortest start of `session`, at least `least` characters, that no other of `sessions`
    starts with (the whole id when another holds it all)."""
    others = [other for other in sessions if other != session]
    for length in range(least, len(session)):
        prefix = session[:length]
        if not any(other.startswith(prefix) for other in others):
            return prefix
    return session


def _unread(unread: list[str]) -> int:
    """Name each file or folder `sessions` could not read (its sessions are not listed): exit 2 when
    there is one, else 0."""
    for what in unread:
        print(
            f"riffd: error: {what}; its sessions are not listed (check that it is yours and "
            "readable)",
            file=sys.stderr,
        )
    return EXIT_ERROR if unread else EXIT_OK


@dataclass
class ArchiveView:
    """The archive's session files (`items`), what it holds of each session, and for deleted ones
    whether whole."""

    items: list[dict[str, Any]]
    holdings: Holdings
    deleted_whole: dict[str, bool]


def _archived(path: Path, deleted: bool) -> tuple[ArchiveView | None, str | None]:
    """What the archive at `path` holds, or None, with why when there is an archive that cannot be
    read (None: there is none)."""
    if not path.exists():
        return None, None
    try:
        archive = Archive(path, read_only=True)
    except (ArchiveError, DatabaseDamaged, sqlite3.Error, OSError) as exc:
        return None, str(exc)
    try:
        items, holdings = _with_titles(archive), Holdings.of(archive)
        gone = {
            item["session_id"]
            for item in items
            if deleted and item["session_id"] and not os.path.exists(item["path"])
        }
        return ArchiveView(
            items,
            holdings,
            {session: whole_when_deleted(archive, session, holdings) for session in gone},
        ), None
    except (sqlite3.Error, OSError, PackDamaged) as exc:
        return None, str(exc)
    finally:
        archive.close()


def _with_titles(archive: Archive) -> list[dict[str, Any]]:
    """The archive's session files; a deleted one without a title gets its first prompt from the
    archived lines."""
    items = archive.sessions()
    for item in items:
        if not item["title"] and not os.path.exists(item["path"]):
            lines = []
            # (it holds the lock while open)
            with contextlib.closing(archive.iter_file(item["file_id"])) as archived:
                for line in archived:
                    lines.append(line)
                    if len(lines) >= 400:
                        break
            item["title"] = describe_lines(lines, item["session_id"] or "").title
    return items


def _held_words(row: dict[str, Any]) -> str:
    """What the archive holds of a session, in words: `archived whole (transcript, 2 subagents,
    ...)`."""
    if row["archived"] is None:
        return "archive unreadable"
    if not row["archived"]:
        return "not archived"
    holds = row["holds"]
    parts = [
        f"{name.replace('_', ' ')}: {count}"
        for name, count in holds.items()
        if name != "transcript" and count
    ]
    return (
        "archived whole" if row["whole"] else "archived, not whole"
    ) + f" ({', '.join(['transcript', *parts])})"


@dataclass(frozen=True)
class Health:
    """What the daemon's state says of one file: the findings that count, and the file as the daemon
    last read it (inode, size, mtime), to tell whether it changed since."""

    findings: int
    ino: int
    size: int
    mtime_ns: int

    def current(self, status: os.stat_result) -> bool:
        """Whether the file, as `status` shows it now, is the one the daemon last read."""
        return (self.ino, self.size, self.mtime_ns) == (
            status.st_ino,
            status.st_size,
            status.st_mtime_ns,
        )


def health_counts(path: Path) -> dict[str, Health]:
    """Path -> the number of findings that count (neither informational nor acknowledged with
    `riffd ack`, as the health report counts them) in the daemon's state, with the file as the
    daemon last read it, for every file the daemon has read (0 findings: none); a file it has not
    read is not in it ({} without a state)."""
    if not path.exists():
        return {}
    acks = acknowledged_in(path.parent)
    try:
        store = StateStore(path, read_only=True)
    except (DatabaseDamaged, sqlite3.Error, OSError):
        return {}
    try:
        known = store.known_files()
        counts = dict.fromkeys(known, 0)
        for name, item, _waiting in store.all_findings():
            if item.get("class") not in INFORMATIONAL and acks.of(name, item) is None:
                counts[name] = counts.get(name, 0) + 1
        return {
            name: Health(counts[name], ino, size, mtime_ns)
            for name, (_dev, ino, size, mtime_ns) in known.items()
        }
    finally:
        store.close()


# said after a file's health when it changed since the daemon last read it (`riffd fix` with the daemon
# stopped, Claude Code writing it before the daemon looked)
CHANGED_SINCE = "changed since"


def health_words(health: Health | None, status: os.stat_result) -> str:
    """A file's health as `riffd sessions` shows it: `-` (the daemon has not read it), `ok` or `N
    finding(s)`, followed by `; changed since` when the file is no longer what the daemon read."""
    if health is None:
        return "-"
    words = f"{health.findings} finding(s)" if health.findings else "ok"
    return words if health.current(status) else f"{words}; {CHANGED_SINCE}"


def _on_disk(
    files: list[Path],
    view: ArchiveView | None,
    health: dict[str, Health],
    roots: list[Path],
    configs: list[Path],
    on_error: Callable[[OSError], None],
    unreadable: bool = False,
) -> list[dict[str, Any]]:
    """A row for each of `files` (`archived` None when the archive exists but is `unreadable`)."""
    archived = {item["path"] for item in view.items} if view is not None else set()
    rows = []
    for path in files:
        try:
            info = describe_file(path)
            status = path.stat()
        except FileNotFoundError:
            continue  # deleted since it was listed: not a session any more
        except OSError as exc:
            on_error(exc if exc.filename else OSError(exc.errno, exc.strerror, str(path)))
            continue
        held = str(path) in archived
        rows.append(
            {
                "session_id": info.session_id,
                "path": str(path),
                "project": info.project,
                "title": info.title,
                "first_ts": info.first_ts,
                "last_ts": info.last_ts,
                "bytes": status.st_size,
                "health": health_words(health.get(str(path)), status),
                "archived": None if unreadable else held,
                "resume": claude_resume(path, info.session_id),
                "holds": view.holdings.holds(info.session_id, held) if view is not None else None,
                "whole": held
                and view is not None
                and view.holdings.whole_on_disk(path.stem, path, roots, configs),
            }
        )
    return rows


def _deleted(view: ArchiveView, project: str | None, riffd: str) -> list[dict[str, Any]]:
    wanted = str(Path(project).expanduser().absolute()) if project else None
    rows = []
    for item in view.items:
        if os.path.exists(item["path"]) or (wanted and item["project"] != wanted):
            continue
        session = item["session_id"] or Path(item["path"]).stem
        rows.append(
            {
                "session_id": session,
                "path": item["path"],
                "project": item["project"],
                "title": item["title"],
                "first_ts": item["first_ts"],
                "last_ts": item["last_ts"],
                "bytes": item["raw_bytes"],
                "health": "deleted",
                "archived": True,
                "restore": f"{riffd} {shell_command('archive', 'restore', session)}",
                "holds": view.holdings.holds(session, True),
                "whole": view.deleted_whole.get(session, False),
            }
        )
    return rows
