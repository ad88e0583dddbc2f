"""Search in the archive: every word of a query, filtered by project, session, role and time.

Each normalised text is one FTS5 document (rowid = the id of its first content; copies that differ
only in whitespace join it), with a token naming its role; `seen` holds, per text and file, the
newest line it occurs on, with its time. One FTS-driven query applies every filter exactly; each
matching text is one hit, at its newest occurrence that passes the filters.

How the index merges its segments, and how many words it holds before it writes them out, are
settings it keeps in the archive (`fts_settings`): FTS5's own (a merge whenever 4 segments share a
level, 1 MiB of words) as committed, always. A bulk ingest sets its own inside each of its
transactions and takes them back before it commits (`bulk_begin`, `bulk_end`): no merge until 64
segments share a level and 16 MiB of words, since the ingest merges the whole index into one at its
end (`settle`: optimize) and the merges on the way were work thrown away. Another process writing
between two of its transactions (the daemon) meets FTS5's own settings, so its write merges the
ingest's segments once 16 share a level: about 0.4 s for one write after a killed ingest left 60 of
them on 1 GB of texts (searches meanwhile give the same answers, about 0.5 ms slower), a median of
80 ms for the daemon's writes during a live 1 GB ingest (6 ms when the ingest's settings were
committed, as a first version did, which left them behind when killed).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from riffd.archive import textspans
from riffd.archive.contents import ROLE_NAMES, ROLE_TOKEN, ROLES, normalise, text_of
from riffd.archive.packs import PackDamaged
from riffd.display import key_path

# FTS5's `automerge`, `crisismerge` and `hashsize` (bytes of words it holds before it writes them
# out as a segment, which it also does at each commit): its defaults, and a bulk ingest's
FTS_DEFAULT = {"automerge": 4, "crisismerge": 16, "hashsize": 1 << 20}
FTS_BULK = {"automerge": 0, "crisismerge": 64, "hashsize": 16 << 20}


def bulk_begin(db: sqlite3.Connection) -> None:
    """At the start of each of a bulk ingest's transactions: the search index takes the bulk
    settings (FTS_BULK), which `bulk_end` takes back before the transaction commits. So no other
    process ever sees them, and a killed ingest (whose transaction rolls back) never leaves them."""
    fts_settings(db, FTS_BULK)


def bulk_end(db: sqlite3.Connection) -> None:
    """Before a bulk ingest's transaction commits: write the index's pending words out under the
    bulk settings (FTS5 does at a savepoint; left to the commit, it would under FTS5's own, and
    merge), then give it FTS5's own settings back."""
    db.execute("SAVEPOINT riffd_words")
    db.execute("RELEASE riffd_words")
    fts_settings(db, FTS_DEFAULT)


def fts_settings(db: sqlite3.Connection, settings: dict[str, int]) -> None:
    """Inside a write transaction: make `settings` the search index's, unless they are already."""
    held = dict(
        db.execute(
            "SELECT k, v FROM search_config WHERE k IN ('automerge', 'crisismerge', 'hashsize')"
        )
    )
    for key, value in settings.items():
        if held.get(key, FTS_DEFAULT[key]) != value:
            db.execute("INSERT INTO search(search, rank) VALUES (?, ?)", (key, value))


@dataclass(frozen=True)
class SearchHit:
    """One place a match occurs: session, file, line number, role, time, and a snippet of the
    text."""

    session_id: str | None
    project: str | None
    path: str
    line: int
    role: str | None
    timestamp: int | None
    snippet: str
    title: str | None = None  # the session's: a title Claude Code gave it, else its first prompt


def search(
    db: sqlite3.Connection,
    spans: Callable[[list[tuple[int, int, int]]], list[bytes | PackDamaged]],
    query: str,
    *,
    project: str | None = None,
    session: str | None = None,
    role: str | None = None,
    since: int | None = None,
    limit: int = 20,
) -> list[SearchHit]:
    """Given the archive's connection and a reader of packs' bytes (each (pack, offset, length);
    PackDamaged for a pack that cannot be read), return up to `limit` places where every word of
    `query` occurs, newest first, filtered by project path prefix, session id, role and time (a hit
    whose text is in a damaged pack says so as its snippet).

    Each matching text is one hit, at its newest occurrence that passes the filters (twenty resumed
    copies of a message are one hit): the texts archived last are taken first, then the hits are
    sorted by time."""
    terms = fts_query(query)
    if role:
        terms += f' "{ROLE_TOKEN.format(ROLES.get(role, 99))}"'
    # the files: their project and session
    of_files = ""
    params: list[Any] = []
    if project:
        of_files += " AND f.project LIKE ? ESCAPE '\\'"
        params.append(like_literal(project.rstrip("/")) + "%")
    if session:
        of_files += " AND f.session_id = ?"
        params.append(session)
    # (a filter's files' spans of text ids; None: all of them)
    ranges = textspans.spans_of(db, of_files, params) if of_files else None
    where = of_files
    if since is not None:
        where += " AND s.ts >= ?"
        params.append(since)
    best: dict[int, tuple[Any, ...]] = {}
    rows = _matches(db, terms, where, params, ranges)
    for row in rows:
        text_id = row[0]
        if text_id in best:
            if (row[6] or 0) > (best[text_id][6] or 0):
                best[text_id] = row
        elif len(best) < limit:
            best[text_id] = row
        else:
            break
    chosen = list(best.values())
    places = [
        db.execute("SELECT pack, offset, length FROM contents WHERE id = ?", (row[0],)).fetchone()
        for row in chosen
    ]
    results = []
    for (_text, session_id, project_path, path, line, role_id, ts, title), piece in zip(
        chosen, spans(places), strict=True
    ):
        try:
            if isinstance(piece, PackDamaged):
                raise piece
            shown = snippet(normalise(shown_text(orjson.loads(piece))), query)
        # (a damaged pack archived without checksums)
        except (
            PackDamaged,
            orjson.JSONDecodeError,
        ) as exc:
            shown = (
                f"(the text cannot be shown: {exc}; `riffd archive verify` names the damaged packs)"
            )
        results.append(
            SearchHit(
                session_id,
                project_path,
                key_path(path),
                line + 1,
                ROLE_NAMES.get(role_id),
                ts,
                shown,
                title,
            )
        )
    results.sort(key=lambda hit: hit.timestamp or 0, reverse=True)
    return results


def _matches(
    db: sqlite3.Connection,
    terms: str,
    where: str,
    params: list[Any],
    ranges: list[tuple[int, int]] | None,
) -> Iterator[tuple[Any, ...]]:
    """The places of the texts matching `terms` that pass `where`, newest text first: looked for
    only in `ranges` of text ids (highest first) when given, which yields the same rows in the same
    order."""
    query = (
        "SELECT search.rowid, f.session_id, f.project, f.path, s.line, s.role, s.ts, f.title FROM search "
        "JOIN seen s ON s.text = search.rowid JOIN files f ON f.id = s.file_id "
        f"WHERE search MATCH ?{where}{{}} ORDER BY search.rowid DESC"
    )
    if ranges is None:
        yield from db.execute(query.format(""), [terms, *params])
        return
    for low, high in ranges:
        yield from db.execute(
            query.format(" AND search.rowid BETWEEN ? AND ?"), [terms, *params, low, high]
        )


def shown_text(value: object) -> str:
    """The text a hit's snippet is cut from: the piece's searchable text (`text_of`), except for a
    tool call's input (the only piece that is an object), whose JSON was indexed (after the tool's
    name, which is not in the piece): `text_of` finds no text in most inputs (an Edit's, a
    WebFetch's), and a Write's gives only the file's content, not its path."""
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    return text_of(value)


def like_literal(text: str) -> str:
    """Escape LIKE's wildcards so user text matches only itself (a session id such as
    `test_session`)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def query_words(query: str) -> list[str]:
    """The words a search looks for: each run of letters and digits (punctuation and spaces only
    part them)."""
    return re.findall(r"\w+", query)


def fts_query(query: str) -> str:
    """Quote each word so user text never breaks FTS5 syntax (plain words: all must match)."""
    return " ".join(f'"{word}"' for word in query_words(query)) or '""'


def snippet(text: str, query: str, width: int = 80) -> str:
    """Return about `width` characters of `text` around the first word of `query` it holds."""
    words = re.findall(r"\w+", query.lower())
    lowered = text.lower()
    at = min((lowered.find(word) for word in words if word in lowered), default=0)
    start = max(0, at - width // 2)
    piece = text[start : start + width].replace("\n", " ")
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")
