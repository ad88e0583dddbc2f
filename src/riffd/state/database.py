"""The state database itself: its file name and schema, opening it (made whole, healed when
damaged, read-only for `status`), and the JSON its columns hold (paths that are not UTF-8 kept
exactly).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

STATE_NAME = "state.db"  # in the state folder


SCHEMA_VERSION = 1


SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    dev INTEGER NOT NULL, ino INTEGER NOT NULL,
    offset INTEGER NOT NULL, lines INTEGER NOT NULL,
    head_len INTEGER NOT NULL, head_sha TEXT NOT NULL,
    tail_len INTEGER NOT NULL, tail_sha TEXT NOT NULL,
    size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    session_id TEXT,
    findings TEXT NOT NULL DEFAULT '[]',
    repairable INTEGER NOT NULL DEFAULT 0,
    processed_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS repairs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL, path TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT,
    backup_id TEXT, fixes TEXT NOT NULL DEFAULT '{}', detail TEXT
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
-- One point per hour (the last report of that hour) for the charts of latest.html: HISTORY_DAYS of them.
CREATE TABLE IF NOT EXISTS history (hour INTEGER PRIMARY KEY, point TEXT NOT NULL);
"""


HEAL_ADVICE = (
    "the daemon moves it aside as it starts (`riffd run`; stop a running one first) and makes a new "
    "one, filled again by a rescan (it holds nothing that cannot be derived again from the "
    "transcripts)"
)


# seconds SQLite waits for another process's lock before it calls the database busy
LOCK_TIMEOUT = 30.0


def connect(path: Path, create: bool, lock_timeout: float = LOCK_TIMEOUT) -> sqlite3.Connection:
    """Connect to the store at `path`, setting it up; with `create` False an absent file is an
    error, not made."""
    db = sqlite3.connect(
        f"{path.absolute().as_uri()}?mode={'rwc' if create else 'rw'}",
        uri=True,
        check_same_thread=False,
        isolation_level=None,
        timeout=lock_timeout,
    )
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
        db.execute(
            "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
        )
    except BaseException:
        db.close()
        raise
    return db


def connect_read_only(
    path: Path, create: bool, lock_timeout: float = LOCK_TIMEOUT
) -> sqlite3.Connection:
    return sqlite3.connect(
        f"{path.absolute().as_uri()}?mode=ro",
        uri=True,
        check_same_thread=False,
        isolation_level=None,
        timeout=lock_timeout,
    )


def dumps(value: Any) -> str:
    """A file's findings as JSON text, for its row: orjson, since the daemon writes them at every
    append of the file (imported where used: commands import this module for its names alone); a
    path that is not UTF-8 (which orjson refuses) by the standard library, as an escaped surrogate
    that reads back as the same path."""
    import orjson

    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def loads(text: str) -> Any:
    """The findings of a file's row (see dumps), or another JSON value the store wrote (a repair's
    fixes)."""
    import orjson

    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # an escaped surrogate (see dumps)
        return json.loads(text)
