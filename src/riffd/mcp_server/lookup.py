"""The read-only tools that list: `search` over every archived conversation (deleted sessions
too) and `list_sessions`, newest first, each as typed results the server returns as they are."""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path
from typing import Any

from riffd.archive.packs import PackDamaged
from riffd.archive.search import query_words
from riffd.claude_code.projects import find_project_folders
from riffd.commands.arguments import date_seconds
from riffd.commands.sessions import health_counts
from riffd.mcp_server.memory import (
    Memory,
    ToolProblem,
    archive_problem,
    resume_command,
    transcript_exists,
)
from riffd.mcp_server.results import SearchResult, SessionSummary
from riffd.state.database import STATE_NAME
from riffd.transcript.sessions import describe_file, last_activity, local_time, session_files

MAX_LIMIT = 200


def checked_limit(limit: int, name: str = "limit") -> int:
    """`limit` when it is 1 to MAX_LIMIT; else raise ToolProblem."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ToolProblem(f"{name} must be between 1 and {MAX_LIMIT}, not {limit}.")
    return limit


def search(
    memory: Memory,
    query: str,
    project: str | None = None,
    session: str | None = None,
    since: str | None = None,
    limit: int = 10,
) -> list[SearchResult]:
    """Up to `limit` places where every word of `query` occurs in the archive, newest first (see
    riffd.archive.search), filtered by project path prefix, session and date."""
    checked_limit(limit)
    if not query_words(query):
        raise ToolProblem(
            f"query {query!r} holds no word: give the words to look for (letters and digits; "
            "punctuation only parts them)."
        )
    try:
        after = None if since is None else date_seconds(since)
    except argparse.ArgumentTypeError as exc:
        raise ToolProblem(f"since: {exc}.") from None
    session_id = None if session is None else memory.find(session).session_id
    archive = memory.archive()
    try:
        hits = archive.search(query, project=project, session=session_id, since=after, limit=limit)
    except (sqlite3.Error, PackDamaged) as exc:
        memory.forget_archive()
        raise archive_problem(memory.archive_path, exc, memory.riffd) from exc
    results = []
    for hit in hits:
        exists = transcript_exists(hit.path)
        results.append(
            SearchResult(
                hit.session_id,
                hit.project,
                hit.title,
                local_time(hit.timestamp) if hit.timestamp else None,
                hit.role,
                hit.snippet,
                hit.path,
                hit.line,
                exists,
                resume_command(hit.session_id, hit.project, None, hit.path, riffd=memory.riffd),
            )
        )
    return results


def list_sessions(
    memory: Memory, project: str | None = None, deleted: bool = False, limit: int = 20
) -> list[SessionSummary]:
    """The newest `limit` sessions on disk (or, with `deleted`, those only the archive holds),
    newest first."""
    checked_limit(limit)
    wanted = str(Path(project).expanduser().absolute()) if project else None
    try:
        archived = memory.archived_sessions()
    except (sqlite3.Error, PackDamaged, ToolProblem) as exc:
        memory.forget_archive()
        if deleted and isinstance(exc, ToolProblem):
            raise
        if deleted:
            raise archive_problem(memory.archive_path, exc, memory.riffd) from exc
        archived = []  # the sessions on disk are listed all the same, as not archived
    if deleted:
        memory.archive()  # (without an archive: says there is none)
        return _deleted(archived, wanted, limit, memory.riffd)
    files = (
        session_files(find_project_folders(wanted, memory.config.roots))
        if wanted
        else memory.disk_sessions()
    )
    newest = sorted(files, key=last_activity, reverse=True)[:limit]
    held = {item["path"] for item in archived}
    health = health_counts(memory.config.state_dir / STATE_NAME)
    rows = []
    for path in newest:
        try:
            info = describe_file(path)
            status = path.stat()
        except OSError:
            continue
        known = health.get(str(path))
        words = (
            "not checked by the daemon yet"
            if known is None
            else f"{known.findings} finding(s): session_health names them"
            if known.findings
            else "ok"
        )
        if known is not None and not known.current(status):
            words += "; the file changed after the daemon read it (session_health checks it as it is now)"
        rows.append(
            SessionSummary(
                info.session_id,
                info.title,
                info.project,
                local_time(info.last_ts),
                status.st_size,
                words,
                str(path) in held,
                False,
                str(path),
                resume_command(info.session_id, info.project, True, path, riffd=memory.riffd),
            )
        )
    return rows


def _deleted(
    archived: list[dict[str, Any]], wanted: str | None, limit: int, riffd: str
) -> list[SessionSummary]:
    """The archived sessions whose transcript is gone, newest first."""
    gone = [
        item
        for item in archived
        if not os.path.exists(item["path"]) and (not wanted or item["project"] == wanted)
    ]
    gone.sort(key=lambda item: item["last_ts"] or 0, reverse=True)
    rows = []
    for item in gone[:limit]:
        session = item["session_id"] or Path(item["path"]).stem
        rows.append(
            SessionSummary(
                session,
                item["title"],
                item["project"],
                local_time(item["last_ts"]) if item["last_ts"] is not None else None,
                item["raw_bytes"],
                "deleted (restore_session brings it back)",
                True,
                True,
                item["path"],
                resume_command(session, item["project"], False, item["path"], riffd=riffd),
            )
        )
    return rows
