"""The archive: every line of every transcript kept, deduplicated, compressed and searchable.

Claude Code deletes transcripts after 30 days; the archive (SQLite, `<state dir>/archive.db`) keeps them.

How a line is stored, losslessly:
- Lines go, as written, into packs: about 4 MiB of lines (of any file, in the order they are archived), compressed
  with zstd level 17 once settled (level 3 while the open pack still grows). Runs of a file's lines in a pack are
  recorded with their offsets and lengths, so `restore` rebuilds a transcript byte for byte as it was last
  archived, also after Claude Code deleted it.
- A line's pieces of content (each text, thinking, tool input and tool result block of `message.content`, or the
  content string; and its `toolUseResult`) are found in the line's bytes exactly as written. The first time a
  piece is seen, it stays in its line and is recorded as a content: its place in the pack, and a key, the first
  8 bytes of the SHA-256 of its role and its normalised text (trimmed, CRLF as LF, runs of spaces and tabs as
  one space; the exact bytes when it has no text). When the same bytes come again (a resumed copy, the same file
  read in another session), they are cut out of the new line and a NUL byte (never in a JSON line) marks the
  place: they are stored once. Two pieces are the same only when their bytes compare equal, never on the key
  alone.
- Search: each normalised text is one FTS5 document (rowid = the id of its first content; copies that differ
  only in whitespace join it), with a token naming its role. `seen` holds, per text and file, the newest
  line it occurs on, with its time: that is what search filters and reports.

Exactly once: the archive keeps its own watermark per file (generation, bytes archived) and commits it in
the same transaction as the lines, skipping lines below it, so a restart, a re-read or a crash in the
middle archives every line once. A file rewritten by anyone (riffd's repairs included) starts a new
generation; earlier generations are never erased.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import zstandard

from riffd.reader import iter_chunks, parse_line, read_span

FORMAT = "2"
PACK_BYTES = 4 * 1024 * 1024
SEGMENT_BYTES = 128 * 1024
# zstd level 17 on a 4 MiB pack of transcripts: within 5% of lzma preset 6 in size, as fast to compress (about
# 8 MB/s; a pack is compressed once, when settled), and decompressed in under 2 ms where lzma takes 20: every
# search snippet and every dedup check reads a pack. Level 3 for the segments rewritten at each commit.
SETTLED_LEVEL = 17
OPEN_LEVEL = 3
MARK = b"\x00"
MIN_PIECE = 128  # a piece without text shorter than this stays in its line without a content of its own
PACK_CACHE = 4  # decompressed packs kept (at most 16 MiB)
ROLES = {"user": 1, "assistant": 2, "system": 3, "summary": 4}
ROLE_NAMES = {value: name for name, value in ROLES.items()}
ROLE_TOKEN = "riffdrole{}"  # added to each indexed text: a role filter is one more FTS term
BLOCK_FIELDS = (("text", b'"text":'), ("thinking", b'"thinking":'), ("input", b'"input":'),
                ("content", b'"content":'))
_SPACES = re.compile(r"[ \t]+")

# Created on a new database after `PRAGMA page_size = 1024` (small tables take a page each: 4 KiB pages would
# cost more than the data of a small archive) and `auto_vacuum = INCREMENTAL` (space freed when the open pack is
# rewritten is given back by `settle`).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, session_id TEXT, project TEXT, title TEXT,
    first_ts INTEGER, last_ts INTEGER, generation INTEGER NOT NULL DEFAULT 0,
    archived_bytes INTEGER NOT NULL DEFAULT 0, lines INTEGER NOT NULL DEFAULT 0,
    raw_bytes INTEGER NOT NULL DEFAULT 0, stored_lines INTEGER NOT NULL DEFAULT 0,
    messages INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS files_session ON files(session_id);
CREATE TABLE IF NOT EXISTS packs (id INTEGER PRIMARY KEY, data BLOB NOT NULL, raw_size INTEGER NOT NULL);
-- The open pack, while it grows, in zstd segments: a commit rewrites only the last ones. Empty once settled.
CREATE TABLE IF NOT EXISTS segments (
    pack INTEGER NOT NULL, number INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (pack, number)
) WITHOUT ROWID;
-- A run: lines first.. of a file's generation held in one pack; `header` (zlib of JSON) has each line's place
-- (gap after the line before it) and length in the pack, its cut pieces (content ids in order), and whether
-- the last line has no newline.
CREATE TABLE IF NOT EXISTS runs (
    file_id INTEGER NOT NULL, generation INTEGER NOT NULL, first INTEGER NOT NULL, pack INTEGER NOT NULL,
    header BLOB NOT NULL, PRIMARY KEY (file_id, generation, first)
) WITHOUT ROWID;
-- A piece of content, where its bytes were first seen; `text`: its FTS row (NULL: not indexed).
CREATE TABLE IF NOT EXISTS contents (
    id INTEGER PRIMARY KEY, key INTEGER NOT NULL, pack INTEGER NOT NULL, offset INTEGER NOT NULL,
    length INTEGER NOT NULL, text INTEGER
);
CREATE INDEX IF NOT EXISTS contents_key ON contents(key);
-- Per text and file: the newest line the text occurs on.
CREATE TABLE IF NOT EXISTS seen (
    text INTEGER NOT NULL, file_id INTEGER NOT NULL, generation INTEGER NOT NULL, line INTEGER NOT NULL,
    ts INTEGER, role INTEGER, PRIMARY KEY (text, file_id)
) WITHOUT ROWID;
-- Words only, no positions (riffd quotes every word as its own term): the smallest FTS5 index.
CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(text, content='', detail='none', columnsize=0);
"""


class ArchiveError(Exception):
    """The archive database cannot be used (made by another version of riffd)."""


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


@dataclass
class _Piece:
    """A piece of content found in a line: where, its exact bytes, its text and role."""

    start: int
    exact: bytes
    text: str
    role: int


@dataclass
class _New:
    """A piece seen for the first time: it stays in its line, at `offset` of the stored line."""

    key: int
    offset: int
    length: int
    piece: _Piece
    variant: int | None  # the text id of a content with the same role and normalised text


@dataclass
class _Line:
    """A line as stored: its bytes (pieces seen before cut out), the ids cut out in order, the text ids of
    those, its new pieces, its time and role."""

    stored: bytes
    cut: list[int] = field(default_factory=list)
    texts: list[int | None] = field(default_factory=list)
    new: list[_New] = field(default_factory=list)
    ts: int | None = None
    role: int = 0


def _pieces(raw: bytes, obj: dict[str, Any], role: int) -> list[_Piece]:
    """Return the pieces of content of a parsed line, each found exactly once in its bytes, in line order, none
    overlapping another."""
    found: list[tuple[bytes, Any, str]] = []  # (key bytes, value, searchable text)
    message = obj.get("message")
    if isinstance(message, dict) and "content" in message:
        content = message["content"]
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                if isinstance(block.get("text"), str):
                    found.append((b'"text":', block["text"], block["text"]))
                elif isinstance(block.get("thinking"), str):
                    found.append((b'"thinking":', block["thinking"], block["thinking"]))
                elif "input" in block:
                    found.append((b'"input":', block["input"], text_of(block)))
                elif block.get("type") == "tool_result" and "content" in block:
                    found.append((b'"content":', block["content"], text_of(block["content"])))
        else:
            found.append((b'"content":', content, text_of(content)))
    if obj.get("type") == "summary" and isinstance(obj.get("summary"), str):
        found.append((b'"summary":', obj["summary"], obj["summary"]))
    if "toolUseResult" in obj:  # stored, not indexed: it repeats the tool_result block, which is indexed
        found.append((b'"toolUseResult":', obj["toolUseResult"], ""))
    pieces = []
    for key, value, text in found:
        try:
            exact = orjson.dumps(value)
        except TypeError:
            continue
        text = normalise(text)
        if not text and len(exact) < MIN_PIECE:
            continue
        needle = key + exact
        at = raw.find(needle)
        if at < 0 or raw.find(needle, at + 1) >= 0:
            continue  # not verbatim, or ambiguous: it stays in its line as it is, unindexed
        pieces.append(_Piece(at + len(key), exact, text, role))
    pieces.sort(key=lambda piece: piece.start)
    kept: list[_Piece] = []
    for piece in pieces:
        if not kept or kept[-1].start + len(kept[-1].exact) <= piece.start:
            kept.append(piece)
    return kept


def _key(piece: _Piece) -> int:
    """The first 8 bytes of the SHA-256 of the piece's role and normalised text (of its exact bytes without
    text), as a signed integer: the lookup key. Pieces are the same only when their bytes compare equal."""
    data = bytes([piece.role]) + piece.text.encode("utf-8", "surrogatepass") if piece.text else b"\xff" + piece.exact
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big", signed=True)


_SETTLED = zstandard.ZstdCompressor(level=SETTLED_LEVEL)
_OPEN = zstandard.ZstdCompressor(level=OPEN_LEVEL)


def _compress(data: bytes, *, settled: bool) -> bytes:
    return (_SETTLED if settled else _OPEN).compress(data)


def unpack(data: bytes) -> bytes:
    """Decompress a pack or a segment (zstd, its size in its frame header)."""
    return zstandard.ZstdDecompressor().decompress(data)


@dataclass
class _OpenPack:
    """The pack lines are added to: its id, its bytes, how many of them are written as segments (-1: none, the
    pack's data holds them all, compressed when it was settled)."""

    pack_id: int
    body: bytearray
    saved: int


class _Run:
    """The header of a run: each line's offset and length in the pack, cut pieces by line, unterminated last."""

    def __init__(self, pack: int, first: int, header: bytes | None = None) -> None:
        self.pack, self.first = pack, first
        data = orjson.loads(zlib.decompress(header)) if header else {}
        self.lengths: list[int] = data.get("n", [])
        # "g": each line's gap after the line before it (the first: its offset); mostly 0, so it packs small
        self.offsets: list[int] = []
        end = 0
        for gap, length in zip(data.get("g", []), self.lengths, strict=True):
            self.offsets.append(end + gap)
            end += gap + length
        self.cuts: dict[int, list[int]] = {int(line): ids for line, ids in data.get("c", {}).items()}
        self.unterminated = bool(data.get("u"))

    def encode(self) -> bytes:
        ends = [0] + [offset + length for offset, length in zip(self.offsets, self.lengths, strict=True)]
        gaps = [offset - end for offset, end in zip(self.offsets, ends, strict=False)]
        return zlib.compress(orjson.dumps({"g": gaps, "n": self.lengths,
                                           "c": {str(line): ids for line, ids in self.cuts.items()},
                                           "u": int(self.unterminated)}))


class Archive:
    """The archive database; thread-safe (one connection behind a lock, SQLite in WAL mode)."""

    def __init__(self, path: Path, *, lock_timeout: float = 30.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=lock_timeout)
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        if "lines" in tables:
            self._db.close()
            raise ArchiveError(f"{path} was made by an earlier development version of riffd (archive format 1), "
                               "which this version cannot read; move it away and run `riffd archive ingest` to "
                               "archive the transcripts that still exist")
        if not tables:
            self._db.execute("PRAGMA page_size = 1024")
            self._db.execute("PRAGMA auto_vacuum = INCREMENTAL")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('format', ?)", (FORMAT,))
        self._cache: OrderedDict[int, bytes] = OrderedDict()  # settled packs, decompressed
        self._open: _OpenPack | None = None  # the open pack as committed; None: read it from the database
        self._pending: _OpenPack | None = None  # the open pack inside the running transaction
        self._version = -1
        self._dirty = True  # lines added since the last settle (unknown at first)

    def _fresh(self) -> None:
        """Forget the packs held in memory when another connection (`riffd archive ingest` beside the daemon)
        has written since: the open pack may have grown or been settled there."""
        version = self._db.execute("PRAGMA data_version").fetchone()[0]
        if version != self._version:
            self._open = None
            self._cache.clear()
            self._version = version

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
            with self._writing():
                self._pending = self._open_pack()
                added = self._add(path, offset, lines, rewritten, last_terminated)
                self._store_open(settled=False)
            self._dirty = self._dirty or added > 0
        return added

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """One write transaction (the caller holds the lock): on success the open pack as the transaction left
        it is the committed one; on failure it is forgotten (read again from the database when next needed)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._fresh()
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            self._open = self._pending = None  # what was added in memory was not committed
            raise
        self._db.execute("COMMIT")
        if self._pending is not None:
            self._open = self._pending
        self._pending = None

    def _open_pack(self) -> _OpenPack:
        if self._open is not None:
            return _OpenPack(self._open.pack_id, bytearray(self._open.body), self._open.saved)
        row = self._db.execute("SELECT value FROM meta WHERE key = 'open_pack'").fetchone()
        if row is None:
            return self._new_pack()
        pack_id = int(row[0])
        data = self._db.execute("SELECT data FROM packs WHERE id = ?", (pack_id,)).fetchone()[0]
        if data:  # settled while open: its segments are written afresh at the next commit
            return _OpenPack(pack_id, bytearray(unpack(data)), -1)
        body = bytearray(self._segments(pack_id))
        return _OpenPack(pack_id, body, len(body))

    def _segments(self, pack_id: int) -> bytes:
        return b"".join(unpack(data) for (data,) in self._db.execute(
            "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack_id,)))

    def _new_pack(self) -> _OpenPack:
        pack_id = self._db.execute("INSERT INTO packs(data, raw_size) VALUES (x'', 0)").lastrowid
        assert pack_id is not None
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('open_pack', ?)", (str(pack_id),))
        return _OpenPack(pack_id, bytearray(), 0)

    def _store_open(self, *, settled: bool) -> None:
        """Write the open pack: whole, at the settled level, when settled (its segments go); else only the
        segments that changed."""
        current = self._pending
        assert current is not None
        db, pack_id, body = self._db, current.pack_id, current.body
        if settled:
            db.execute("UPDATE packs SET data = ?, raw_size = ? WHERE id = ?",
                       (_compress(bytes(body), settled=True), len(body), pack_id))
            db.execute("DELETE FROM segments WHERE pack = ?", (pack_id,))
            current.saved = -1
            return
        if current.saved < 0:
            db.execute("UPDATE packs SET data = x'' WHERE id = ?", (pack_id,))
        first = max(current.saved, 0) // SEGMENT_BYTES
        db.executemany("INSERT OR REPLACE INTO segments(pack, number, data) VALUES (?, ?, ?)",
                       [(pack_id, number, _compress(bytes(body[number * SEGMENT_BYTES:(number + 1) * SEGMENT_BYTES]),
                                                    settled=False))
                        for number in range(first, -(-len(body) // SEGMENT_BYTES))])
        db.execute("UPDATE packs SET raw_size = ? WHERE id = ?", (len(body), pack_id))
        current.saved = len(body)

    def _append(self, data: bytes) -> tuple[int, int]:
        """Add a stored line to the open pack (settling it first when full); return (pack, offset)."""
        assert self._pending is not None
        if len(self._pending.body) + len(data) > PACK_BYTES and self._pending.body:
            self._store_open(settled=True)
            self._pending = self._new_pack()
        body = self._pending.body
        body += data
        return self._pending.pack_id, len(body) - len(data)

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
        run = self._last_run(file_id, generation)
        # A torn last line (archived without its newline) that the file has completed since: the completed line
        # takes its place, so the archive keeps one line per line of the file, never a fragment plus the rest, and
        # a caller feeding the completed line from its start (below the watermark) does not lose the rest.
        fragment = b""
        if run is not None and run.unterminated and run.lengths:
            fragment = self._line(run, len(run.lengths) - 1)
        torn_at = archived - len(fragment)
        if fragment and lines and offset == archived:  # the bytes after the fragment finish its line
            lines = [fragment + lines[0], *lines[1:]]
            offset = torn_at
        position = offset
        added = added_bytes = messages = 0
        info: dict[str, Any] = {}
        newest: dict[int, tuple[int, int, int | None, int]] = {}  # text id -> (line, generation, ts, role)
        last = len(lines) - 1
        for number, raw in enumerate(lines):
            terminated = last_terminated or number != last
            end = position + len(raw) + terminated
            if fragment and position == torn_at and end > archived:
                assert run is not None
                run.offsets.pop()
                run.lengths.pop()
                run.cuts.pop(len(run.lengths), None)
                run.unterminated = False
                count, archived = count - 1, torn_at
                added, added_bytes = added - 1, added_bytes - len(fragment)  # replaced, not added
                fragment = b""
            if position >= archived:  # below the watermark: archived before (a restart, a re-read)
                line = self._prepare(raw, info)
                pack_id, at = self._append(line.stored)
                if run is None or run.pack != pack_id:
                    if run is not None:
                        self._save_run(file_id, generation, run)
                    run = _Run(pack_id, count)
                run.offsets.append(at)
                run.lengths.append(len(line.stored))
                if line.cut:
                    run.cuts[len(run.lengths) - 1] = line.cut
                run.unterminated = not terminated
                texts = line.texts + [self._record(new, pack_id, at) for new in line.new]
                for text_id in filter(None, texts):
                    newest[text_id] = (count, generation, line.ts, line.role)
                messages += bool(line.cut or line.new)
                count += 1
                added += 1
                added_bytes += end - position
                archived = end
            position = end
        if run is not None:
            self._save_run(file_id, generation, run)
        db.executemany(
            "INSERT INTO seen(text, file_id, generation, line, ts, role) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(text, file_id) DO UPDATE SET generation = excluded.generation, line = excluded.line, "
            "ts = excluded.ts, role = excluded.role WHERE COALESCE(excluded.ts, 0) >= COALESCE(seen.ts, 0)",
            [(text, file_id, gen, line, ts, role) for text, (line, gen, ts, role) in newest.items()])
        db.execute(
            "UPDATE files SET generation = ?, archived_bytes = ?, lines = ?, raw_bytes = raw_bytes + ?, "
            "stored_lines = stored_lines + ?, messages = messages + ?, "
            "session_id = COALESCE(session_id, ?), project = COALESCE(project, ?), title = COALESCE(?, title), "
            "first_ts = COALESCE(first_ts, ?), last_ts = COALESCE(?, last_ts) WHERE id = ?",
            (generation, archived, count, added_bytes, added, messages, info.get("session"), info.get("project"),
             info.get("title"), info.get("first_ts"), info.get("last_ts"), file_id),
        )
        return added

    def _last_run(self, file_id: int, generation: int) -> _Run | None:
        row = self._db.execute("SELECT pack, first, header FROM runs WHERE file_id = ? AND generation = ? "
                               "ORDER BY first DESC LIMIT 1", (file_id, generation)).fetchone()
        return None if row is None else _Run(row[0], row[1], row[2])

    def _save_run(self, file_id: int, generation: int, run: _Run) -> None:
        if run.lengths:
            self._db.execute("INSERT OR REPLACE INTO runs(file_id, generation, first, pack, header) "
                             "VALUES (?, ?, ?, ?, ?)", (file_id, generation, run.first, run.pack, run.encode()))
        else:
            self._db.execute("DELETE FROM runs WHERE file_id = ? AND generation = ? AND first = ?",
                             (file_id, generation, run.first))

    def _prepare(self, raw: bytes, info: dict[str, Any]) -> _Line:
        """Given a line, return it as stored: pieces seen before cut out; note what it says of its file."""
        obj = parse_line(raw)
        if not isinstance(obj, dict):
            return _Line(raw)
        kind = obj.get("type")
        role = ROLES.get(kind, 0) if isinstance(kind, str) else 0
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
        line = _Line(b"", ts=ts, role=role)
        if MARK in raw:
            line.stored = raw  # a NUL byte of its own (not JSON): nothing is cut, so restore never confuses it
            return line
        stored = bytearray()
        done = 0
        for piece in _pieces(raw, obj, role):
            content_key = _key(piece)
            content_id, text_id = self._find(content_key, piece.exact)
            if content_id is not None:
                stored += raw[done:piece.start] + MARK
                line.cut.append(content_id)
                line.texts.append(text_id)
            else:
                stored += raw[done:piece.start + len(piece.exact)]
                line.new.append(_New(content_key, len(stored) - len(piece.exact), len(piece.exact), piece, text_id))
            done = piece.start + len(piece.exact)
        stored += raw[done:]
        line.stored = bytes(stored)
        return line

    def _find(self, key: int, exact: bytes) -> tuple[int | None, int | None]:
        """Return (the id of the content with these exact bytes, or None; the text id of a content with this key,
        which has the same role and normalised text, or None)."""
        text_id = None
        for content_id, pack, offset, length, text in self._db.execute(
                "SELECT id, pack, offset, length, text FROM contents WHERE key = ?", (key,)).fetchall():
            if length == len(exact) and self._bytes(pack, offset, length) == exact:
                return int(content_id), text
            text_id = text_id or text
        return None, text_id

    def _record(self, new: _New, pack: int, line_at: int) -> int | None:
        """Record a new content, now at `line_at + new.offset` of `pack`; index its text unless a variant of it
        is indexed already. Return its text id (None: no text)."""
        content_id = self._db.execute(
            "INSERT INTO contents(key, pack, offset, length, text) VALUES (?, ?, ?, ?, ?)",
            (new.key, pack, line_at + new.offset, new.length, new.variant)).lastrowid
        assert content_id is not None
        if not new.piece.text or new.variant is not None:
            return new.variant
        self._db.execute("UPDATE contents SET text = id WHERE id = ?", (content_id,))
        self._db.execute("INSERT INTO search(rowid, text) VALUES (?, ?)",
                         (content_id, f"{new.piece.text}\n{ROLE_TOKEN.format(new.piece.role)}"))
        return content_id

    # --- reading ----------------------------------------------------------------------------------

    def _pack(self, pack_id: int) -> bytes:
        held = self._in_memory(pack_id)
        if held is not None:
            return bytes(held)
        data = self._cache.get(pack_id)
        if data is None:
            row = self._db.execute("SELECT data FROM packs WHERE id = ?", (pack_id,)).fetchone()
            data = unpack(row[0]) if row[0] else self._segments(pack_id)
            self._cache[pack_id] = data
            while len(self._cache) > PACK_CACHE:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(pack_id)
        return data

    def _head(self, pack: int, end: int) -> bytes:
        """The first `end` bytes of a pack: a pack not held in memory is decompressed only that far (a search
        snippet needs one piece; on average half a pack is saved), and not cached."""
        held = self._in_memory(pack)
        if held is not None:
            return bytes(held[:end])
        if pack in self._cache:
            return self._cache[pack][:end]
        data = self._db.execute("SELECT data FROM packs WHERE id = ?", (pack,)).fetchone()[0]
        if not data:
            return self._pack(pack)[:end]
        head = bytearray()
        with zstandard.ZstdDecompressor().stream_reader(data) as reader:
            while len(head) < end:
                chunk = reader.read(end - len(head))
                if not chunk:
                    break
                head += chunk
        return bytes(head)

    def _bytes(self, pack: int, offset: int, length: int) -> bytes:
        held = self._in_memory(pack)
        if held is not None:
            return bytes(held[offset:offset + length])
        return self._pack(pack)[offset:offset + length]

    def _in_memory(self, pack: int) -> bytearray | None:
        """The bytes of `pack` when it is the open pack (as this transaction has it, else as committed)."""
        for current in (self._pending, self._open):
            if current is not None and current.pack_id == pack:
                return current.body
        return None

    def _line(self, run: _Run, number: int) -> bytes:
        """Line `number` of a run as it was written (cut pieces put back; a newline unless it is unterminated)."""
        offset, length = run.offsets[number], run.lengths[number]
        line = self._bytes(run.pack, offset, length)
        for content_id in run.cuts.get(number, ()):
            pack, at, size = self._db.execute(
                "SELECT pack, offset, length FROM contents WHERE id = ?", (content_id,)).fetchone()
            line = line.replace(MARK, self._bytes(pack, at, size), 1)
        last = number == len(run.lengths) - 1
        return line if last and run.unterminated else line + b"\n"

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
            self._fresh()
            if generation is None:
                generation = self._db.execute("SELECT generation FROM files WHERE id = ?", (file_id,)).fetchone()[0]
            runs = [_Run(pack, first, header) for pack, first, header in self._db.execute(
                "SELECT pack, first, header FROM runs WHERE file_id = ? AND generation = ? ORDER BY first",
                (file_id, generation)).fetchall()]
            for run in runs:
                for number in range(len(run.lengths)):
                    yield self._line(run, number)

    def last_line(self, path: str) -> bytes | None:
        """Return the last archived line (with newline) of `path`'s latest generation, or None."""
        with self._lock:
            self._fresh()
            row = self._db.execute("SELECT id, generation FROM files WHERE path = ?", (path,)).fetchone()
            run = None if row is None else self._last_run(row[0], row[1])
            return None if run is None or not run.lengths else self._line(run, len(run.lengths) - 1)

    def settle(self, *, optimize: bool = True) -> bool:
        """Compress the open pack at the settled level (it stays open: a later line reopens it), merge the search
        index into one segment (`optimize`: it rewrites the whole index) and give freed pages back to the file system.
        For when feeding pauses: the end of an ingest, a quiet daemon. Return False when nothing was added since
        the last settle of this connection."""
        with self._lock:
            if not self._dirty:
                return False
            with self._writing():
                row = self._db.execute("SELECT value FROM meta WHERE key = 'open_pack'").fetchone()
                if row is not None:
                    self._pending = self._open_pack()
                    self._store_open(settled=True)
                if optimize:
                    self._db.execute("INSERT INTO search(search) VALUES ('optimize')")
            self._db.executescript("PRAGMA incremental_vacuum;")  # (execute would free one page only)
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._dirty = False
        return True

    def search(self, query: str, *, project: str | None = None, session: str | None = None,
               role: str | None = None, since: int | None = None, limit: int = 20) -> list[SearchHit]:
        """Return up to `limit` places where every word of `query` occurs, newest first, filtered by project path
        prefix, session id, role and time.

        Each matching text is one hit, at its newest occurrence that passes the filters (twenty resumed copies of
        a message are one hit): the texts archived last are taken first, then the hits are sorted by time."""
        terms = _fts_query(query)
        if role:
            terms += f' "{ROLE_TOKEN.format(ROLES.get(role, 99))}"'
        where = ""
        params: list[Any] = []
        if project:
            where += " AND f.project LIKE ? ESCAPE '\\'"
            params.append(_like_literal(project.rstrip("/")) + "%")
        if session:
            where += " AND f.session_id = ?"
            params.append(session)
        if since is not None:
            where += " AND s.ts >= ?"
            params.append(since)
        best: dict[int, tuple[Any, ...]] = {}
        with self._lock:
            self._fresh()
            rows = self._db.execute(
                "SELECT search.rowid, f.session_id, f.project, f.path, s.line, s.role, s.ts FROM search "
                "JOIN seen s ON s.text = search.rowid JOIN files f ON f.id = s.file_id "
                f"WHERE search MATCH ?{where} ORDER BY search.rowid DESC", [terms, *params])
            for row in rows:
                text_id = row[0]
                if text_id in best:
                    if (row[6] or 0) > (best[text_id][6] or 0):
                        best[text_id] = row
                elif len(best) < limit:
                    best[text_id] = row
                else:
                    break
            results = []
            for text_id, session_id, project_path, path, line, role_id, ts in best.values():
                pack, at, size = self._db.execute(
                    "SELECT pack, offset, length FROM contents WHERE id = ?", (text_id,)).fetchone()
                text = normalise(text_of(orjson.loads(self._head(pack, at + size)[at:])))
                results.append(SearchHit(session_id, project_path, path, line + 1, ROLE_NAMES.get(role_id), ts,
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
                             "MIN(first_ts), MAX(last_ts), COALESCE(SUM(stored_lines), 0), "
                             "COALESCE(SUM(messages), 0) FROM files").fetchone()
            unique = db.execute("SELECT COUNT(*), COUNT(*) FILTER (WHERE text = id) FROM contents").fetchone()
        stored = self.path.stat().st_size + sum(
            path.stat().st_size for path in self.path.parent.glob(self.path.name + "-*") if path.exists())
        return {
            "raw_bytes": int(raw[0]),
            "stored_bytes": stored,
            "ratio": round(stored / raw[0], 4) if raw[0] else None,
            "files": int(raw[1]),
            "sessions": int(raw[2]),
            "lines": int(raw[5]),
            "messages": int(raw[6]),
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
                project = self._db.execute("SELECT project FROM files WHERE id = ?", (file_id,)).fetchone()[0]
                messages = []
                for number, raw in enumerate(self.iter_file(file_id)):
                    obj = parse_line(raw.rstrip(b"\n"))
                    message = obj.get("message") if isinstance(obj, dict) else None
                    if not isinstance(message, dict) or "content" not in message:
                        continue
                    assert isinstance(obj, dict)
                    kind = obj.get("type")
                    messages.append({
                        "index": number, "hash": hashlib.sha256(orjson.dumps(message["content"])).hexdigest(),
                        "role": ROLE_NAMES.get(ROLES.get(kind, 0)) if isinstance(kind, str) else None,
                        "timestamp": _iso(_epoch(obj.get("timestamp"))), "content": message["content"]})
            out.append({"session_id": session_id, "project": project, "path": path, "messages": messages})
        return out


def _iso(epoch: int | None) -> str | None:
    return datetime.fromtimestamp(epoch).astimezone().isoformat(timespec="seconds") if epoch else None


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
