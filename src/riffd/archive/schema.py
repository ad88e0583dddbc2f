"""The archive database's tables, and opening it: created private, set up when new, checked by the
daemon.

Tables: `files` (one row per transcript path: its session, project, title, times, generation and the
archive's own watermark), `packs`, `segments` and `loose` (riffd.archive.packs), `runs` (where each
line of a file's generation is in a pack), `contents` (pieces of content, where first seen;
riffd.archive.contents), `seen` (per text and file, the newest line it occurs on) and `search` (the
FTS5 index; riffd.archive.search); for the files of a session kept whole (riffd.archive.wholefiles),
`blobs` and `blob_chunks` (content by SHA-256, in zstd frames), `session_files` (every version of
every path) and `plan_slugs` (the plan names a session's lines carry).

Format 3 keeps each content's lookup key in `content_keys` (key, id), not in a column of `contents`
with an index on it, and writes a content's own text id as 0: 11 bytes less a content, 6.5 MB of 238
on 1 GB of distinct texts. A format 2 archive is moved to it when first opened to write (`_upgrade`,
after SQLite's quick check: a damaged archive is moved aside as it is, riffd.database); in one
transaction, so a kill or a full disk leaves it as it was, to be moved at the next open (half a
second and 40 MB of log for 568,013 contents); its lines, packs and search index are not touched. A
riffd of format 2 fails to open the new archive to write ("no such column: key") and changes none
of its rows. An archive of a format this riffd cannot read (1, or newer than its own) is refused
(ArchiveError, `readable_format`; read-only openers too), never changed.

An archive made before `file_texts` (where each file's texts lie among the text ids, for filtered
searches: riffd.archive.textspans) gains it when first opened to write, filled from `seen` in the
same transaction; opened read-only, such an archive is searched without it.

An archive made before the whole files were kept gains them when first opened for writing: the
missing tables are created (`CREATE TABLE IF NOT EXISTS`) and `files` gets its `mtime_ns` column
(ALTER TABLE ADD COLUMN, which rewrites nothing); what it held stays as it was. Opened read-only,
such an archive holds no whole files (`WholeFiles.present`).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import time
from pathlib import Path

from riffd.archive import textspans

log = logging.getLogger(__name__)

ARCHIVE_NAME = "archive.db"  # in the state folder
FORMAT = "3"


class ArchiveError(Exception):
    """The archive database cannot be used (made by another version of riffd)."""


# Created on a new database after `PRAGMA page_size = 4096` (PAGE_BYTES) and `auto_vacuum =
# INCREMENTAL` (space freed when the open pack is rewritten is given back by `settle`). Pages of
# 1 KiB, as riffd 0.2 and earlier made, kept a small archive about 10% smaller (0.54 against 0.60 MB on
# the real samples), but a search reads a pack's frame a page at a time: on 1 GB of distinct texts
# its p95 was 24 ms through 1 KiB pages, 18 ms through 4 KiB ones, and the big archive was 2%
# smaller (`ArchiveConnection.repage` moves an older archive to them).
PAGE_BYTES = 4096
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, session_id TEXT, project TEXT, title TEXT,
    first_ts INTEGER, last_ts INTEGER, generation INTEGER NOT NULL DEFAULT 0,
    archived_bytes INTEGER NOT NULL DEFAULT 0, lines INTEGER NOT NULL DEFAULT 0,
    raw_bytes INTEGER NOT NULL DEFAULT 0, stored_lines INTEGER NOT NULL DEFAULT 0,
    messages INTEGER NOT NULL DEFAULT 0, mtime_ns INTEGER
);
CREATE INDEX IF NOT EXISTS files_session ON files(session_id);
CREATE TABLE IF NOT EXISTS packs (id INTEGER PRIMARY KEY, data BLOB NOT NULL, raw_size INTEGER NOT NULL);
-- The open pack, while it grows, in zstd segments: a commit rewrites only the last ones. A full pack
-- stays in them until it is compressed whole (loose). Empty once settled.
CREATE TABLE IF NOT EXISTS segments (
    pack INTEGER NOT NULL, number INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (pack, number)
) WITHOUT ROWID;
-- Packs filled while lines were coming in, compressed fast, to be compressed again at the settled level when the
-- archive is quiet (`Archive.compact`). Any riffd reads them: they are ordinary zstd frames.
CREATE TABLE IF NOT EXISTS loose (pack INTEGER PRIMARY KEY);
-- A run: lines first.. of a file's generation held in one pack; `header` (zlib of JSON) has each line's place
-- (gap after the line before it) and length in the pack, its cut pieces (content ids in order), and whether
-- the last line has no newline.
CREATE TABLE IF NOT EXISTS runs (
    file_id INTEGER NOT NULL, generation INTEGER NOT NULL, first INTEGER NOT NULL, pack INTEGER NOT NULL,
    header BLOB NOT NULL, PRIMARY KEY (file_id, generation, first)
) WITHOUT ROWID;
-- A piece of content, where its bytes were first seen; `text`: its FTS row (0: its own id, which
-- SQLite stores in no bytes; NULL: not indexed).
CREATE TABLE IF NOT EXISTS contents (
    id INTEGER PRIMARY KEY, pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    text INTEGER
);
-- The contents by lookup key (riffd.archive.contents.content_key)
CREATE TABLE IF NOT EXISTS content_keys (
    key INTEGER NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (key, id)
) WITHOUT ROWID;
-- Per text and file: the newest line the text occurs on.
CREATE TABLE IF NOT EXISTS seen (
    text INTEGER NOT NULL, file_id INTEGER NOT NULL, generation INTEGER NOT NULL, line INTEGER NOT NULL,
    ts INTEGER, role INTEGER, PRIMARY KEY (text, file_id)
) WITHOUT ROWID;
-- Per file, spans of text ids (lo, hi: inclusive) holding every text it has a `seen` row for
-- (riffd.archive.textspans): what a search filtered by session or project looks through.
CREATE TABLE IF NOT EXISTS file_texts (
    file_id INTEGER NOT NULL, lo INTEGER NOT NULL, hi INTEGER NOT NULL, PRIMARY KEY (file_id, lo)
) WITHOUT ROWID;
-- Words only, no positions (riffd quotes every word as its own term): the smallest FTS5 index.
CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(text, content='', detail='none', columnsize=0);
-- Whole files by the SHA-256 of their bytes; `stored`: the bytes their frames take.
CREATE TABLE IF NOT EXISTS blobs (
    id INTEGER PRIMARY KEY, hash BLOB UNIQUE NOT NULL, size INTEGER NOT NULL, stored INTEGER NOT NULL
);
-- A blob's bytes, 1 MiB of them per zstd frame (with its checksum), in order.
CREATE TABLE IF NOT EXISTS blob_chunks (
    blob INTEGER NOT NULL, number INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (blob, number)
);
-- Every version of every file of a session kept whole: its path is `path` below the folder `base`.
CREATE TABLE IF NOT EXISTS session_files (
    id INTEGER PRIMARY KEY, session_id TEXT, kind TEXT NOT NULL, base TEXT NOT NULL, path TEXT NOT NULL,
    version INTEGER NOT NULL, blob INTEGER NOT NULL, size INTEGER NOT NULL, mode INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, seen INTEGER NOT NULL, UNIQUE (base, path, version)
);
CREATE INDEX IF NOT EXISTS session_files_session ON session_files(session_id);
CREATE TABLE IF NOT EXISTS plan_slugs (
    session_id TEXT NOT NULL, slug TEXT NOT NULL, PRIMARY KEY (session_id, slug)
) WITHOUT ROWID;
"""


# Every table and index _SCHEMA makes (FTS5 adds its own tables beside `search`)
SCHEMA_NAMES = {
    "meta",
    "files",
    "files_session",
    "packs",
    "segments",
    "loose",
    "runs",
    "contents",
    "content_keys",
    "seen",
    "file_texts",
    "search",
    "blobs",
    "blob_chunks",
    "session_files",
    "session_files_session",
    "plan_slugs",
}

RECOVER_ADVICE = (
    "the daemon moves it aside as it starts (`riffd run`; stop a running one first) and starts a "
    "new archive; then `riffd archive recover` copies every readable line of the old one into the "
    "new one"
)


def connect(path: Path, lock_timeout: float, create: bool = False) -> sqlite3.Connection:
    """Connect to the archive at `path`, creating its tables when new; raise ArchiveError for format
    1. With `create` False an absent file is an error, not made (riffd.database makes a new archive
    whole)."""
    db = sqlite3.connect(
        f"{path.absolute().as_uri()}?mode={'rwc' if create else 'rw'}",
        uri=True,
        check_same_thread=False,
        isolation_level=None,
        timeout=lock_timeout,
    )
    try:
        names = names_of(db)
        # (before any setting: an archive of a newer format is left as it is)
        stated = readable_format(db, names)
        if not names:
            db.execute(f"PRAGMA page_size = {PAGE_BYTES}")
            db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        # 32 MiB of pages: the content-key index takes random inserts
        db.execute("PRAGMA cache_size = -32768")
        # Checkpoint at 8,192 pages of WAL (32 MiB of 4 KiB pages; 8 MiB when pages were 1 KiB), not
        # SQLite's 1,000: each checkpoint syncs the database, about a tenth of an ingest's time at
        # 1 MiB
        db.execute("PRAGMA wal_autocheckpoint = 8192")
        # Only a new or older archive is written to here: opening one to read it (`riffd archive
        # search` beside a busy daemon) takes no write lock
        if not names >= SCHEMA_NAMES or stated != FORMAT or not _sessions_named(db):
            _set_up(db)
    except BaseException:
        db.close()
        raise
    return db


def needs_move(path: Path) -> bool:
    """Whether the archive at `path` is of format 2, which `connect` moves to this format (False
    when it is not, or cannot be read: opening it then says why). Changes nothing."""
    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        return "key" in _columns(db, "contents")
    except sqlite3.Error:
        return False
    finally:
        db.close()


def names_of(db: sqlite3.Connection) -> set[str]:
    """The names of the archive's tables and indexes."""
    return {row[0] for row in db.execute("SELECT name FROM sqlite_schema")}


def readable_format(db: sqlite3.Connection, names: set[str]) -> str | None:
    """The archive's format as it says (None: it says none); raise ArchiveError for one this riffd
    cannot read: format 1, or a format newer than its own. Read-only openers check it too."""
    if "lines" in names:
        raise ArchiveError(
            f"{db_name(db)} was made by an earlier development version of riffd (archive format "
            "1), which this version cannot read; move it away and run `riffd archive ingest` to "
            "archive the transcripts that still exist"
        )
    if "meta" not in names:
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    if row is None:
        return None
    value = str(row[0])
    if not value.isdigit() or int(value) > int(FORMAT):
        raise ArchiveError(
            f"the archive {db_name(db)} was made by a newer riffd (archive format {value}; this one "
            f"reads formats up to {FORMAT}), and is left as it is: install that riffd again, or "
            "move the archive away to start a new one"
        )
    return value


def db_name(db: sqlite3.Connection) -> str:
    """The file of `db`'s main database."""
    return str(db.execute("PRAGMA database_list").fetchone()[2])


def _set_up(db: sqlite3.Connection) -> None:
    """Make what a new archive, or one of an older format or made before the whole files were kept,
    lacks: in one transaction, looked at again once it holds the write lock (another riffd may have
    done it meanwhile)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        names = names_of(db)
        readable_format(db, names)
        older = "contents" in names and "key" in _columns(db, "contents")
        if older:
            # A damaged archive is moved aside as it is (riffd.database), never rewritten first
            checked = str(db.execute("PRAGMA quick_check").fetchone()[0])
            if checked != "ok":
                raise sqlite3.DatabaseError(f"database disk image is malformed: {checked}")
            # (its index goes with it; _SCHEMA then makes the tables of this format)
            db.execute("ALTER TABLE contents RENAME TO contents_2")
        for statement in _statements(_SCHEMA):  # (executescript would commit first)
            db.execute(statement)
        if "file_texts" not in names and "seen" in names:  # made before the spans were kept
            started = time.monotonic()
            textspans.fill(db)
            log.info(
                "noted where each file's texts lie in the archive %s, for filtered searches, in %.1f s",
                db_name(db),
                time.monotonic() - started,
            )
        if older:
            started = time.monotonic()
            moved = _upgrade(db)
            log.info(
                "moved the archive %s to format %s (%d contents) in %.1f s",
                db_name(db),
                FORMAT,
                moved,
                time.monotonic() - started,
            )
        if "mtime_ns" not in _columns(db, "files"):
            # made before riffd recorded it
            db.execute("ALTER TABLE files ADD COLUMN mtime_ns INTEGER")
        if not _sessions_named(db):
            _name_sessions(db)
        db.execute(
            "INSERT INTO meta(key, value) VALUES ('format', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (FORMAT,),
        )
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    # The pages a move freed given back now, not at the next settle (which does it when this cannot,
    # another process writing meanwhile)
    with contextlib.suppress(sqlite3.OperationalError):
        db.executescript("PRAGMA incremental_vacuum;")


def _sessions_named(db: sqlite3.Connection) -> bool:
    """Whether every archived main transcript is filed under the session its name gives (riffd
    before 2026-11-28 filed it under the first `sessionId` its lines carry)."""
    try:
        return db.execute("SELECT 1 FROM meta WHERE key = 'sessions_named'").fetchone() is not None
    except sqlite3.OperationalError:  # (no meta table yet: a new archive)
        return False


def _name_sessions(db: sqlite3.Connection) -> None:
    """File each main transcript under its name's session (`named_session`), inside the caller's
    transaction: a file continued from another, whose first lines keep that one's id, was listed
    and restored as that session, without its own saved outputs and checkpoints."""
    from riffd.claude_code.projects import named_session

    moved = [
        (named, file_id)
        for file_id, path, session in db.execute("SELECT id, path, session_id FROM files")
        if (named := named_session(path)) is not None and named != session
    ]
    db.executemany("UPDATE files SET session_id = ? WHERE id = ?", moved)
    db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('sessions_named', '1')")
    if moved:
        log.info("filed %d archived transcript(s) under the session their names give", len(moved))


def _statements(script: str) -> list[str]:
    """The SQL statements of `script`, each whole (a `;` in a comment does not end one)."""
    statements, statement = [], ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            statements.append(statement)
            statement = ""
    assert not statement.strip(), statement
    return statements


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _upgrade(db: sqlite3.Connection) -> int:
    """Copy the contents of format 2 (renamed `contents_2`: their `key` column and index, a
    content's own text id written out) into the tables of format 3, inside the caller's
    transaction; return the contents moved. Every content keeps its id, place and text id; nothing
    else is touched."""
    db.execute("INSERT INTO content_keys(key, id) SELECT key, id FROM contents_2 ORDER BY key, id")
    db.execute(
        "INSERT INTO contents(id, pack, offset, length, text) SELECT id, pack, offset, length, "
        "CASE WHEN text = id THEN 0 ELSE text END FROM contents_2 ORDER BY id"
    )
    db.execute("DROP TABLE contents_2")
    return int(db.execute("SELECT COUNT(*) FROM contents").fetchone()[0])
