"""The archive: every line of every transcript kept, deduplicated, compressed and searchable.

Claude Code deletes transcripts after 30 days; the archive (SQLite, `<state dir>/archive.db`) keeps them.

How a line is stored, losslessly:
- Its `message.content` value and its `toolUseResult` value (the bulk of a transcript: text, tool inputs
  and results) are cut out of the line's bytes exactly as written and stored once each under the SHA-256
  of those bytes: the same content in another session, or in a resumed copy of a session, costs nothing
  more. What is left, the envelope (uuids, timestamps, cwd, ...), keeps a one-byte marker where each cut
  was (a NUL or SOH byte, which a JSON line never holds), so the line is rebuilt byte for byte. A value
  whose bytes cannot be found verbatim in the line stays in the envelope.
- Envelopes and contents are compressed in packs of about 512 KiB of input: lzma once full, zlib while open.
- Each file's lines are recorded in order (file, generation, line number) with role and time (the uuid
  and session are in the envelope): that is how `restore` rebuilds a transcript as it was last archived,
  also after Claude Code deleted it.
- For search, each distinct `message.content` text is normalised (trimmed, CRLF to LF, runs of spaces and tabs
  collapsed to one space) and indexed once per normalised SHA-256 in an FTS5 table, so copies that
  differ only in whitespace are one search entry; the exact bytes are still what is stored and restored.

Exactly once: the archive keeps its own watermark per file (generation, bytes archived) and commits it in
the same transaction as the lines, skipping lines below it, so a restart, a re-read or a crash in the
middle archives every line once. A file rewritten by anyone (riffd's repairs included) starts a new
generation; earlier generations are never erased.
"""

from __future__ import annotations

import hashlib
import lzma
import re
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from riffd.reader import iter_chunks, parse_line, read_span

PACK_BYTES = 512 * 1024
XZ_MAGIC = b"\xfd7zXZ\x00"
SEARCH_BATCH = 200  # matching texts joined to their lines at a time
CONTENT_MARK = b"\x00"
RESULT_MARK = b"\x01"
ROLES = {"user": 1, "assistant": 2, "system": 3, "summary": 4}
ROLE_NAMES = {value: name for name, value in ROLES.items()}
_SPACES = re.compile(r"[ \t]+")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, session_id TEXT, project TEXT, title TEXT,
    first_ts INTEGER, last_ts INTEGER, generation INTEGER NOT NULL DEFAULT 0,
    archived_bytes INTEGER NOT NULL DEFAULT 0, lines INTEGER NOT NULL DEFAULT 0,
    raw_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS files_session ON files(session_id);
CREATE TABLE IF NOT EXISTS packs (id INTEGER PRIMARY KEY, data BLOB NOT NULL, raw_size INTEGER NOT NULL);
-- Looked up by the first 8 bytes of the SHA-256 as an integer (a small index); the full hash is compared.
-- `role`: of the line that first held the content (a content's role hardly ever varies): lets a role-filtered
-- search skip texts of other roles without looking at their lines; each hit's own role is still checked.
CREATE TABLE IF NOT EXISTS contents (
    id INTEGER PRIMARY KEY, key INTEGER NOT NULL, hash BLOB NOT NULL, search_row INTEGER,
    pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL, role INTEGER
);
CREATE INDEX IF NOT EXISTS contents_key ON contents(key);
CREATE INDEX IF NOT EXISTS contents_search ON contents(search_row) WHERE search_row IS NOT NULL;
CREATE TABLE IF NOT EXISTS lines (
    file_id INTEGER NOT NULL, generation INTEGER NOT NULL, number INTEGER NOT NULL,
    pack INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    content_id INTEGER, result_id INTEGER, role INTEGER, ts INTEGER, unterminated INTEGER,
    PRIMARY KEY (file_id, generation, number)
) WITHOUT ROWID;
DROP INDEX IF EXISTS lines_content;
-- Newest occurrence of a content first: search finds each text's latest use with one seek.
CREATE INDEX IF NOT EXISTS lines_content_ts ON lines(content_id, ts) WHERE content_id IS NOT NULL;
-- Words only, no positions (riffd quotes every word as its own term): the smallest FTS5 index.
CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(text, content='', detail='none', columnsize=0);
CREATE TABLE IF NOT EXISTS searchable (row INTEGER PRIMARY KEY, key INTEGER NOT NULL, norm_hash BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS searchable_key ON searchable(key);
"""


def unpack(data: bytes) -> bytes:
    """Decompress a pack, lzma (sealed) or zlib (open), told apart by the xz magic bytes."""
    return lzma.decompress(data) if data.startswith(XZ_MAGIC) else zlib.decompress(data)


def normalise(text: str) -> str:
    """Return `text` as the archive compares it: trimmed, CRLF as LF, runs of spaces and tabs as one space."""
    return _SPACES.sub(" ", text.replace("\r\n", "\n")).strip()


def text_of(value: Any) -> str:
    """Return the searchable text of a content value: strings, text blocks, tool inputs and results."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(filter(None, (text_of(part) for part in value)))
    if isinstance(value, dict):
        kind = value.get("type")
        if kind in ("text", None) and isinstance(value.get("text"), str):
            return str(value["text"])
        if kind == "thinking":
            return str(value.get("thinking", ""))
        if kind == "tool_use":
            return f"{value.get('name', '')} {orjson.dumps(value.get('input')).decode()}"
        if kind == "tool_result":
            return text_of(value.get("content"))
        if isinstance(value.get("content"), (str, list)):
            return text_of(value.get("content"))
        return ""
    return ""


def _epoch(stamp: object) -> int | None:
    if not isinstance(stamp, str):
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


@dataclass(frozen=True)
class SearchHit:
    """One place a match occurs: session, file, line number, role, time, and a snippet of the text."""

    session_id: str | None
    project: str | None
    path: str
    line: int
    role: str | None
    timestamp: int | None
    snippet: str


class _Packer:
    """Appends byte strings to the open pack; stores it at every commit (fast zlib level 1 while it grows),
    and seals it (lzma) once full. The open pack's bytes are kept in memory between commits."""

    def __init__(self, db: sqlite3.Connection, kind: str, cached: tuple[int, bytearray] | None) -> None:
        self.db = db
        self.kind = kind  # "envelope" (read only to restore: lzma) or "content" (read by search: zlib 9)
        self.pack_id: int | None = None
        self.buffer = bytearray()
        if cached is not None:
            self.pack_id, self.buffer = cached[0], bytearray(cached[1])
            return
        row = db.execute("SELECT value FROM meta WHERE key = ?", (f"open_pack_{kind}",)).fetchone()
        if row is not None:
            self.pack_id = int(row[0])
            data = db.execute("SELECT data FROM packs WHERE id = ?", (self.pack_id,)).fetchone()
            self.buffer = bytearray(unpack(data[0])) if data else bytearray()

    def add(self, data: bytes) -> tuple[int, int, int]:
        if self.pack_id is None or (len(self.buffer) + len(data) > PACK_BYTES and self.buffer):
            self._store(sealed=True)  # never written again: worth the better compression
            self.pack_id = self.db.execute("INSERT INTO packs(data, raw_size) VALUES (x'', 0)").lastrowid
            self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                            (f"open_pack_{self.kind}", str(self.pack_id)))
            self.buffer = bytearray()
        assert self.pack_id is not None
        offset = len(self.buffer)
        self.buffer += data
        return self.pack_id, offset, len(data)

    def flush(self) -> tuple[int, bytearray] | None:
        """Store the open pack; return it to be kept in memory for the next commit."""
        self._store(sealed=False)
        return None if self.pack_id is None else (self.pack_id, self.buffer)

    def _store(self, *, sealed: bool) -> None:
        if self.pack_id is not None:
            data = bytes(self.buffer)
            # Sealed envelope packs, read back only to restore: lzma preset 1 (about a quarter smaller than zlib 9
            # on transcripts, as fast to write). Sealed content packs, read by every search: zlib 9 (several times
            # faster to read). The open pack, rewritten at every commit: zlib 1.
            if not sealed:
                packed = zlib.compress(data, 1)
            elif self.kind == "envelope":
                packed = lzma.compress(data, preset=1)
            else:
                packed = zlib.compress(data, 9)
            self.db.execute("UPDATE packs SET data = ?, raw_size = ? WHERE id = ?",
                            (packed, len(self.buffer), self.pack_id))


class Archive:
    """The archive database; thread-safe (one connection behind a lock, SQLite in WAL mode)."""

    def __init__(self, path: Path, *, lock_timeout: float = 30.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=lock_timeout)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(contents)")}
        if "role" not in columns:  # an archive made before contents had a role: the filter then checks lines only
            self._db.execute("ALTER TABLE contents ADD COLUMN role INTEGER")
        self._pack_cache: dict[int, bytes] = {}
        # The open packs as committed, by kind; None: read them from the database.
        self._open_packs: dict[str, tuple[int, bytearray] | None] = {"envelope": None, "content": None}

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # --- feeding ----------------------------------------------------------------------------------

    def cursor(self, path: str) -> tuple[int, int]:
        """Return (generation, bytes archived) for `path` ((0, 0) when it was never archived)."""
        with self._lock:
            row = self._db.execute("SELECT generation, archived_bytes FROM files WHERE path = ?", (path,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def add_lines(self, path: str, offset: int, lines: list[bytes], *, rewritten: bool = False,
                  last_terminated: bool = True) -> int:
        """Archive `lines` of `path` starting at byte `offset` (each without its newline; the last one has none
        in the file when `last_terminated` is False); lines below the file's archive watermark are skipped.
        `rewritten`: the file was rewritten (not appended to) since it was last archived, so start a new
        generation from offset 0. Return how many lines were added."""
        with self._lock:
            # The open pack grows with this batch: a cached copy of it would hide the new lines from readers.
            self._pack_cache.clear()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                added = self._add(path, offset, lines, rewritten, last_terminated)
            except BaseException:
                self._db.execute("ROLLBACK")
                self._open_packs = {"envelope": None, "content": None}  # what was added in memory was not committed
                raise
            self._db.execute("COMMIT")
        return added

    def _add(self, path: str, offset: int, lines: list[bytes], rewritten: bool, last_terminated: bool) -> int:
        db = self._db
        row = db.execute("SELECT id, generation, archived_bytes, lines FROM files WHERE path = ?", (path,)).fetchone()
        if row is None:
            new_id = db.execute("INSERT INTO files(path) VALUES (?)", (path,)).lastrowid
            assert new_id is not None
            file_id, generation, archived, count = new_id, 0, 0, 0
        else:
            file_id, generation, archived, count = row
            if rewritten and offset == 0:
                generation, archived, count = generation + 1, 0, 0
        packers = {kind: _Packer(db, kind, cached) for kind, cached in self._open_packs.items()}
        # A torn last line (archived without its newline) that the file has completed since: the completed line
        # takes its row, so the archive keeps one row per line of the file, never a fragment plus the rest, and a
        # caller feeding the completed line from its start (below the watermark) does not lose the rest.
        torn = db.execute(
            "SELECT pack, offset, length, content_id, result_id, unterminated FROM lines WHERE file_id = ? "
            "AND generation = ? AND number = ? AND unterminated = 1", (file_id, generation, count - 1)).fetchone()
        fragment = b"" if torn is None else self._rebuild(*torn)
        torn_at = archived - len(fragment)
        if torn is not None and lines and offset == archived:  # the bytes after the fragment finish its line
            lines = [fragment + lines[0], *lines[1:]]
            offset = torn_at
        position = offset
        added = added_bytes = 0
        info: dict[str, Any] = {}
        last = len(lines) - 1
        for number, raw in enumerate(lines):
            terminated = last_terminated or number != last
            end = position + len(raw) + terminated
            if torn is not None and position == torn_at and end > archived:
                db.execute("DELETE FROM lines WHERE file_id = ? AND generation = ? AND number = ?",
                           (file_id, generation, count - 1))
                count, archived, torn = count - 1, torn_at, None
                added, added_bytes = added - 1, added_bytes - len(fragment)  # replaced, not added
            if position >= archived:  # below the watermark: archived before (a restart, a re-read)
                self._add_line(db, packers, file_id, generation, count, raw, info, terminated)
                count += 1
                added += 1
                added_bytes += end - position
                archived = end
            position = end
        self._open_packs = {kind: packer.flush() for kind, packer in packers.items()}
        self._pack_cache.clear()  # packs changed (the open one grew, a full one was sealed): cached copies are stale
        db.execute(
            "UPDATE files SET generation = ?, archived_bytes = ?, lines = ?, raw_bytes = raw_bytes + ?, "
            "session_id = COALESCE(session_id, ?), project = COALESCE(project, ?), title = COALESCE(?, title), "
            "first_ts = COALESCE(first_ts, ?), last_ts = COALESCE(?, last_ts) WHERE id = ?",
            (generation, archived, count, added_bytes, info.get("session"), info.get("project"), info.get("title"),
             info.get("first_ts"), info.get("last_ts"), file_id),
        )
        return added

    def _add_line(self, db: sqlite3.Connection, packers: dict[str, _Packer], file_id: int, generation: int,
                  number: int, raw: bytes, info: dict[str, Any], terminated: bool) -> None:
        packer = packers["content"]
        obj = parse_line(raw)
        envelope = raw
        content_id = result_id = None
        role = ts = None
        if isinstance(obj, dict):
            message = obj.get("message")
            kind = obj.get("type")
            role = ROLES.get(kind) if isinstance(kind, str) else None
            if isinstance(message, dict) and "content" in message:
                envelope, content_id = self._cut(db, packer, envelope, b'"content":', message["content"], CONTENT_MARK,
                                                 role)
            if "toolUseResult" in obj:
                # Stored, not indexed: it repeats the tool_result block of message.content, which is indexed.
                envelope, result_id = self._cut(db, packer, envelope, b'"toolUseResult":', obj["toolUseResult"],
                                                RESULT_MARK, role, searchable=False)
            ts = _epoch(obj.get("timestamp"))
            if ts is not None:
                info.setdefault("first_ts", ts)
                info["last_ts"] = ts
            if isinstance(obj.get("sessionId"), str):
                info.setdefault("session", obj["sessionId"])
            if isinstance(obj.get("cwd"), str):
                info.setdefault("project", obj["cwd"])
            for key in ("customTitle", "aiTitle", "title", "summary"):
                if kind in ("custom-title", "ai-title", "summary") and isinstance(obj.get(key), str):
                    info["title"] = obj[key]
            if kind == "summary" and isinstance(obj.get("summary"), str):
                self._index_text(db, obj["summary"])
        pack, offset, length = packers["envelope"].add(envelope)
        db.execute(
            "INSERT INTO lines(file_id, generation, number, pack, offset, length, content_id, result_id, "
            "role, ts, unterminated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (file_id, generation, number, pack, offset, length, content_id, result_id, role, ts,
             None if terminated else 1),
        )

    def _cut(self, db: sqlite3.Connection, packer: _Packer, envelope: bytes, key: bytes, value: Any,
             mark: bytes, role: int | None, *, searchable: bool = True) -> tuple[bytes, int | None]:
        """Cut `value`'s exact bytes (after `key`) out of the envelope; store them once; return both."""
        try:
            exact = orjson.dumps(value)
        except TypeError:
            return envelope, None
        needle = key + exact
        at = envelope.find(needle)
        if at < 0 or envelope.find(needle, at + 1) >= 0 or mark in envelope:
            return envelope, None  # not verbatim, or ambiguous: keep it inline
        start = at + len(key)
        content_id = self._content(db, packer, exact, value, role, searchable)
        return envelope[:start] + mark + envelope[start + len(exact):], content_id

    def _content(self, db: sqlite3.Connection, packer: _Packer, exact: bytes, value: Any, role: int | None,
                 searchable: bool) -> int:
        digest = hashlib.sha256(exact).digest()
        key = _key(digest)
        for content_id, stored, search_row in db.execute(
                "SELECT id, hash, search_row FROM contents WHERE key = ?", (key,)).fetchall():
            if stored == digest:
                if searchable and search_row is None:  # first stored unindexed (a toolUseResult): index it now
                    db.execute("UPDATE contents SET search_row = ? WHERE id = ?",
                               (self._index_text(db, text_of(value)), content_id))
                return int(content_id)
        search_row = self._index_text(db, text_of(value)) if searchable else None
        pack, offset, length = packer.add(exact)
        content_id = db.execute(
            "INSERT INTO contents(key, hash, search_row, pack, offset, length, role) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (key, digest, search_row, pack, offset, length, role),
        ).lastrowid
        assert content_id is not None
        return content_id

    def _index_text(self, db: sqlite3.Connection, text: str) -> int | None:
        """Index a text once per normalised SHA-256; return its search row (None for no text)."""
        text = normalise(text)
        if not text:
            return None
        norm_hash = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        key = _key(norm_hash)
        for search_row, stored in db.execute("SELECT row, norm_hash FROM searchable WHERE key = ?", (key,)):
            if stored == norm_hash:
                return int(search_row)
        search_row = db.execute("INSERT INTO searchable(key, norm_hash) VALUES (?, ?)", (key, norm_hash)).lastrowid
        db.execute("INSERT INTO search(rowid, text) VALUES (?, ?)", (search_row, text))
        return search_row

    # --- reading ----------------------------------------------------------------------------------

    def _pack(self, pack_id: int) -> bytes:
        data = self._pack_cache.get(pack_id)
        if data is None:
            row = self._db.execute("SELECT data FROM packs WHERE id = ?", (pack_id,)).fetchone()
            data = unpack(row[0])
            if len(self._pack_cache) > 64:
                self._pack_cache.clear()
            self._pack_cache[pack_id] = data
        return data

    def _slice(self, pack: int, offset: int, length: int) -> bytes:
        return self._pack(pack)[offset:offset + length]

    def _content_bytes(self, content_id: int) -> bytes:
        pack, offset, length = self._db.execute(
            "SELECT pack, offset, length FROM contents WHERE id = ?", (content_id,)).fetchone()
        return self._slice(pack, offset, length)

    def files_of(self, target: str) -> list[tuple[int, str, str | None]]:
        """Return (id, path, session) of the archived files a session id, path or path suffix names."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, path, session_id FROM files WHERE session_id = ? OR path = ? OR path LIKE ? ESCAPE '\\' "
                "ORDER BY path", (target, target, f"%/{_like_literal(target)}.jsonl")).fetchall()
        return [(int(row[0]), str(row[1]), row[2]) for row in rows]

    def iter_file(self, file_id: int, generation: int | None = None) -> Iterator[bytes]:
        """Yield the lines (with newline) of an archived file's latest (or given) generation, byte for byte."""
        with self._lock:
            self._pack_cache.clear()
            if generation is None:
                generation = self._db.execute("SELECT generation FROM files WHERE id = ?", (file_id,)).fetchone()[0]
            rows = self._db.execute(
                "SELECT pack, offset, length, content_id, result_id, unterminated FROM lines "
                "WHERE file_id = ? AND generation = ? "
                "ORDER BY number", (file_id, generation)).fetchall()
            for row in rows:
                yield self._rebuild(*row)

    def _search_texts_first(self, query: str, where: str, params: list[Any], role: str | None,
                            limit: int) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = []
        seen: set[int] = set()
        below = None
        while len(found) < limit:
            rows = self._db.execute(
                "SELECT rowid FROM search WHERE search MATCH ?" + (" AND rowid < ?" if below else "")
                + " ORDER BY rowid DESC LIMIT ?",
                [_fts_query(query), *([below] if below else []), SEARCH_BATCH]).fetchall()
            if not rows:
                break
            below = rows[-1][0]
            marks = ",".join("?" * len(rows))
            role_test = " AND (c.role = ? OR c.role IS NULL)" if role else ""
            batch = self._db.execute(
                "SELECT f.session_id, f.project, f.path, l.number, l.role, l.ts, c.id, c.search_row FROM contents c "
                "JOIN lines l ON l.content_id = c.id "
                "JOIN files f ON f.id = l.file_id AND f.generation = l.generation "
                f"WHERE c.search_row IN ({marks}){role_test}{where} ORDER BY l.ts DESC",
                [*(row[0] for row in rows), *([ROLES.get(role, -1)] if role else []), *params])
            _newest_per_text(batch, found, seen, limit)
        return found

    def _search_files_first(self, query: str, where: str, params: list[Any], limit: int) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = []
        seen: set[int] = set()
        rows = self._db.execute(
            "SELECT f.session_id, f.project, f.path, l.number, l.role, l.ts, l.content_id, c.search_row "
            "FROM files f JOIN lines l ON l.file_id = f.id AND l.generation = f.generation "
            "JOIN contents c ON c.id = l.content_id "
            "WHERE c.search_row IN (SELECT rowid FROM search WHERE search MATCH ?)" + where + " ORDER BY l.ts DESC",
            [_fts_query(query), *params])
        _newest_per_text(rows, found, seen, limit)
        return found

    def last_line(self, path: str) -> bytes | None:
        """Return the last archived line (with newline) of `path`'s latest generation, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT l.pack, l.offset, l.length, l.content_id, l.result_id, l.unterminated FROM lines l "
                "JOIN files f ON f.id = l.file_id AND f.generation = l.generation WHERE f.path = ? "
                "ORDER BY l.number DESC LIMIT 1",
                (path,)).fetchone()
            if row is None:
                return None
            return self._rebuild(*row)

    def _rebuild(self, pack: int, offset: int, length: int, content_id: int | None, result_id: int | None,
                 unterminated: int | None) -> bytes:
        line = self._slice(pack, offset, length)
        if content_id is not None:
            line = line.replace(CONTENT_MARK, self._content_bytes(content_id), 1)
        if result_id is not None:
            line = line.replace(RESULT_MARK, self._content_bytes(result_id), 1)
        return line if unterminated else line + b"\n"

    def search(self, query: str, *, project: str | None = None, session: str | None = None,
               role: str | None = None, since: int | None = None, limit: int = 20) -> list[SearchHit]:
        """Return up to `limit` places where every word of `query` occurs, newest first, filtered by project path
        prefix, session id, role and time.

        Each matching text is one hit, at its newest occurrence that passes the filters (twenty resumed copies of
        a message are one hit). Two plans: with a project or session filter, the lines of those files are taken
        newest first and kept when their text matches (bounded by the files' size); without, matching texts are
        taken newest first (by the order they were archived) in batches, each joined to its lines, until `limit`
        hits are found."""
        where = ""
        params: list[Any] = []
        if project:
            where += " AND f.project LIKE ? ESCAPE '\\'"
            params.append(_like_literal(project.rstrip("/")) + "%")
        if session:
            where += " AND f.session_id = ?"
            params.append(session)
        if role:
            where += " AND l.role = ?"
            params.append(ROLES.get(role, -1))
        if since is not None:
            where += " AND l.ts >= ?"
            params.append(since)
        with self._lock:
            if project or session:
                found = self._search_files_first(query, where, params, limit)
            else:
                found = self._search_texts_first(query, where, params, role, limit)
            results = []
            for session_id, project_path, path, number, role_id, ts, content_id in found[:limit]:
                text = normalise(text_of(orjson.loads(self._content_bytes(content_id))))
                results.append(SearchHit(session_id, project_path, path, number + 1, ROLE_NAMES.get(role_id), ts,
                                         _snippet(text, query)))
        results.sort(key=lambda hit: hit.timestamp or 0, reverse=True)
        return results

    def behind(self, files: dict[str, int]) -> tuple[int, int]:
        """Given path -> bytes the daemon has read, return (files, bytes) not archived yet."""
        lagging = lagging_bytes = 0
        for path, offset in files.items():
            _generation, archived = self.cursor(path)
            if archived < offset:
                lagging += 1
                lagging_bytes += offset - archived
        return lagging, lagging_bytes

    def stats(self) -> dict[str, Any]:
        """Return sizes and counts: raw bytes seen, bytes stored, ratio, messages, sessions, oldest, newest."""
        with self._lock:
            db = self._db
            raw = db.execute("SELECT COALESCE(SUM(raw_bytes), 0), COUNT(*), COUNT(DISTINCT session_id), "
                             "MIN(first_ts), MAX(last_ts) FROM files").fetchone()
            lines = db.execute("SELECT COUNT(*), COUNT(content_id) FROM lines").fetchone()[0:2]
            unique = db.execute("SELECT COUNT(*), COUNT(DISTINCT search_row) FROM contents").fetchone()
        stored = self.path.stat().st_size + sum(
            path.stat().st_size for path in self.path.parent.glob(self.path.name + "-*") if path.exists())
        return {
            "raw_bytes": int(raw[0]),
            "stored_bytes": stored,
            "ratio": round(stored / raw[0], 4) if raw[0] else None,
            "files": int(raw[1]),
            "sessions": int(raw[2]),
            "lines": int(lines[0]),
            "messages": int(lines[1]),
            "unique_contents": int(unique[0]),
            "unique_texts": int(unique[1]),
            "oldest": _iso(raw[3]),
            "newest": _iso(raw[4]),
        }

    def export(self, target: str) -> list[dict[str, Any]]:
        """Return each archived file of a session as the documented JSON form: session id, project, path, and
        messages with index, hash (SHA-256 of the content's exact bytes), role, timestamp and content."""
        out = []
        for file_id, path, session_id in self.files_of(target):
            with self._lock:
                project, generation = self._db.execute(
                    "SELECT project, generation FROM files WHERE id = ?", (file_id,)).fetchone()
                rows = self._db.execute(
                    "SELECT l.number, l.role, l.ts, c.hash, c.id FROM lines l JOIN contents c "
                    "ON c.id = l.content_id WHERE l.file_id = ? AND l.generation = ? ORDER BY l.number",
                    (file_id, generation)).fetchall()
                messages = [
                    {"index": number, "hash": digest.hex(), "role": ROLE_NAMES.get(role), "timestamp": _iso(ts),
                     "content": orjson.loads(self._content_bytes(content_id))}
                    for number, role, ts, digest, content_id in rows
                ]
            out.append({"session_id": session_id, "project": project, "path": path, "messages": messages})
        return out


def _iso(epoch: int | None) -> str | None:
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds") if epoch else None


def _newest_per_text(rows: Iterable[tuple[Any, ...]], found: list[tuple[Any, ...]], seen: set[int],
                     limit: int) -> None:
    """Add to `found` the first row (the newest: rows come newest first) of each text not `seen`, up to `limit`;
    a row is the hit's seven fields followed by its text's search row."""
    for row in rows:
        if len(found) >= limit:
            return
        if row[7] not in seen:
            seen.add(row[7])
            found.append(row[:7])


def _key(digest: bytes) -> int:
    """The first 8 bytes of a SHA-256 as a signed integer: the index key (the full hash is still compared)."""
    return int.from_bytes(digest[:8], "big", signed=True)


def _like_literal(text: str) -> str:
    """Escape LIKE's wildcards so user text matches only itself (a session id such as `test_session`)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _fts_query(query: str) -> str:
    """Quote each word so user text never breaks FTS5 syntax (plain words: all must match)."""
    words = re.findall(r"\w+", query)
    return " ".join(f'"{word}"' for word in words) or '""'


def _snippet(text: str, query: str, width: int = 80) -> str:
    words = re.findall(r"\w+", query.lower())
    lowered = text.lower()
    at = min((lowered.find(word) for word in words if word in lowered), default=0)
    start = max(0, at - width // 2)
    piece = text[start:start + width].replace("\n", " ")
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def ingest_file(archive: Archive, path: Path) -> int:
    """Back-fill one transcript from where the archive stopped (from the start, as a new generation, when the
    file was rewritten since); return the lines added. Only complete lines are archived."""
    _generation, archived = archive.cursor(str(path))
    rewritten = archived > 0 and not still_appended(archive, path, archived)
    added = 0
    for offset, lines, terminated in iter_chunks(path, start=0 if rewritten else archived):
        # An unterminated last line is kept too (lossless); restore writes it back without a newline.
        added += archive.add_lines(str(path), offset, lines, rewritten=rewritten and offset == 0,
                                   last_terminated=terminated)
    return added


def still_appended(archive: Archive, path: Path, archived: int) -> bool:
    """Return True when `path` still holds, just before byte `archived`, the last line the archive has of it."""
    last = archive.last_line(str(path))
    if last is None or path.stat().st_size < archived:
        return False
    try:
        return read_span(path, archived - len(last), len(last)) == last
    except OSError:
        return False
