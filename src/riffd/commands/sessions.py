"""`riffd sessions`: one line per session, on disk and in the archive, with the ones Claude Code deleted."""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

from riffd.archive.schema import ARCHIVE_NAME, ArchiveError
from riffd.archive.store import Archive
from riffd.commands.common import EXIT_ERROR, EXIT_OK, Parser, print_json
from riffd.commands.configured import config_for_folders
from riffd.daemon.state import STATE_NAME, StateStore
from riffd.database import DatabaseDamaged
from riffd.paths import shell_command
from riffd.transcript.findings import INFORMATIONAL
from riffd.transcript.projects import find_project_folders
from riffd.transcript.sessions import describe_file, describe_lines, local_time, project_folders, session_files


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd sessions` to the riffd subcommands."""
    sessions = commands.add_parser(
        "sessions", help="list sessions: id, project, title, dates, size, health, archived",
        description="List the sessions under the transcript roots, newest first: id, last activity (local time), "
        "project, size, health (riffd's findings, from the daemon's state), whether the archive holds it, and its "
        "title (a title Claude Code gave it, else its first prompt). --deleted lists the sessions whose transcript "
        "is gone (Claude Code deletes them after cleanupPeriodDays, 30 by default) but the archive holds, with the "
        "command that brings each back. Any SESSION argument of riffd also takes a unique prefix of an id, and "
        "`latest` (the newest session of the project in the current folder).",
    )
    sessions.add_argument("--project", metavar="PATH", help="only this project's sessions (its working directory)")
    sessions.add_argument("--deleted", action="store_true",
                          help="the sessions Claude Code deleted that the archive holds")
    sessions.add_argument("--json", action="store_true", help="one JSON document")
    sessions.set_defaults(run=run_sessions)


def run_sessions(args: argparse.Namespace) -> int:
    """`riffd sessions`: exit 0, 2 when the archive is needed (--deleted) and cannot be read."""
    config = config_for_folders(args)
    archived = _archived(config.state_dir / ARCHIVE_NAME)
    if archived is None and args.deleted:
        print(f"riffd: error: no archive at {config.state_dir / ARCHIVE_NAME} (the daemon makes it), or it cannot "
              "be read; nothing deleted can be listed", file=sys.stderr)
        return EXIT_ERROR
    def unfollowed(exc: OSError) -> None:
        print(f"riffd: note: {exc.filename}: {exc.strerror}; its sessions are not listed", file=sys.stderr)

    folders = (find_project_folders(Path(args.project).expanduser().absolute(), config.roots) if args.project
               else project_folders(config.roots, unfollowed))
    rows = (_deleted(archived or [], args.project) if args.deleted
            else _on_disk(session_files(folders), {item["path"] for item in archived or []},
                          _health(config.state_dir / STATE_NAME)))
    rows.sort(key=lambda row: row.get("last_ts") or 0, reverse=True)
    if args.json:
        print_json({"sessions": rows})
        return EXIT_OK
    for row in rows:
        size = f"{row['bytes'] / 1e6:.1f} MB" if row.get("bytes") is not None else "-"
        print(f"{row['session_id']}  {local_time(row.get('last_ts'))}  {row.get('project') or '-'}  {size}  "
              f"{row['health']}  {'archived' if row['archived'] else 'not archived'}  {row.get('title') or '-'}")
        if args.deleted:
            print(f"    deleted; `{shell_command('riffd', 'archive', 'restore', row['session_id'][:8])}` brings it "
                  f"back to {row['path']}")
    what = "deleted session(s) the archive holds" if args.deleted else "session(s)"
    print(f"riffd: {len(rows)} {what}" + ("" if args.deleted or archived is not None else
                                          "; no archive yet (the daemon makes it)"), file=sys.stderr)
    return EXIT_OK


def _archived(path: Path) -> list[dict[str, Any]] | None:
    if not path.exists():
        return None
    try:
        archive = Archive(path, read_only=True)
    except (ArchiveError, DatabaseDamaged, sqlite3.Error, OSError):
        return None
    try:
        return _with_titles(archive)
    except (sqlite3.Error, OSError):
        return None
    finally:
        archive.close()


def _with_titles(archive: Archive) -> list[dict[str, Any]]:
    """The archive's session files; a deleted one without a title gets its first prompt from the archived lines."""
    items = archive.sessions()
    for item in items:
        if not item["title"] and not os.path.exists(item["path"]):
            lines = []
            for line in archive.iter_file(item["file_id"]):
                lines.append(line)
                if len(lines) >= 400:
                    break
            item["title"] = describe_lines(lines, item["session_id"] or "").title
    return items


def _health(path: Path) -> dict[str, int]:
    """Path -> the number of findings that count (not informational) in the daemon's state; {} without one."""
    if not path.exists():
        return {}
    try:
        store = StateStore(path, read_only=True)
    except (DatabaseDamaged, sqlite3.Error, OSError):
        return {}
    try:
        counts: dict[str, int] = {}
        for name, item, _waiting in store.all_findings():
            if item.get("class") not in INFORMATIONAL:
                counts[name] = counts.get(name, 0) + 1
        return counts
    finally:
        store.close()


def _on_disk(files: list[Path], archived: set[str], health: dict[str, int]) -> list[dict[str, Any]]:
    rows = []
    for path in files:
        try:
            info = describe_file(path)
            size = path.stat().st_size
        except OSError:
            continue
        findings = health.get(str(path))
        rows.append({"session_id": info.session_id, "path": str(path), "project": info.project, "title": info.title,
                     "first_ts": info.first_ts, "last_ts": info.last_ts, "bytes": size,
                     "health": "-" if not health else f"{findings} finding(s)" if findings else "ok",
                     "archived": str(path) in archived, "resume": shell_command("claude", "--resume", info.session_id)})
    return rows


def _deleted(archived: list[dict[str, Any]], project: str | None) -> list[dict[str, Any]]:
    wanted = str(Path(project).expanduser().absolute()) if project else None
    rows = []
    for item in archived:
        if os.path.exists(item["path"]) or (wanted and item["project"] != wanted):
            continue
        session = item["session_id"] or Path(item["path"]).stem
        rows.append({"session_id": session, "path": item["path"], "project": item["project"], "title": item["title"],
                     "first_ts": item["first_ts"], "last_ts": item["last_ts"], "bytes": item["raw_bytes"],
                     "health": "deleted", "archived": True,
                     "restore": shell_command("riffd", "archive", "restore", session)})
    return rows
