"""A line as the archive stores it: the pieces of content it holds already cut out, its new ones
recorded.

Given a line and what `riffd.archive.contents.parse` takes from it, `Deduplicator.stored` looks
each piece up by its key and cuts it out (a NUL byte in its place, riffd.archive.contents.MARK) only
where the archive holds those exact bytes, read back from their pack; a piece seen for the first
time stays in its line, and once the line is in a pack `record` makes it a content of its own, its
text indexed for search unless a variant of it is (same role, same normalised text). A piece in a
pack that cannot be read is never cut out again: the line keeps it, and archiving goes on.

Within a batch (one write transaction) the contents of every key looked up are held in memory, the
batch's new ones added as they are recorded, and written at its end in one statement (`flush`): a
batch whose pieces are known beforehand (an ingest's reader process parsed them) looks all its keys
up in a few statements (`prefetch`). One statement per piece cost the distinct-text corpus's ingest
most of its time in SQLite calls. The lines stored are the same as with one lookup per piece.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from riffd.archive.connection import ArchiveConnection
from riffd.archive.contents import MARK, ROLE_TOKEN, Parsed, parse
from riffd.archive.packs import PackDamaged


@dataclass
class NewPiece:
    """A piece seen for the first time: it stays in its line, at `offset` of the stored line."""

    key: int
    offset: int
    length: int
    text: str
    role: int
    variant: int | None  # the text id of a content with the same role and normalised text


@dataclass
class StoredLine:
    """A line as stored: its bytes (pieces seen before cut out), the ids cut out in order, the text
    ids of those, its new pieces, its time and role."""

    stored: bytes
    cut: list[int] = field(default_factory=list)
    texts: list[int | None] = field(default_factory=list)
    new: list[NewPiece] = field(default_factory=list)
    ts: int | None = None
    role: int = 0


# A content as looked up: id, pack, offset, length and text id (the archive writes a content's own
# text id as 0: riffd.archive.schema)
_CONTENT = "id, pack, offset, length, CASE text WHEN 0 THEN id ELSE text END"
PREFETCH_KEYS = 500  # keys per statement of `prefetch` (SQLite allows 32,766 parameters)


class Deduplicator:
    """Cuts the pieces the archive holds out of lines, and records new ones, inside the writer's
    transaction (its lock held)."""

    def __init__(self, connection: ArchiveConnection) -> None:
        self._connection = connection
        self._next_content: int | None = None  # the next content id, within a write transaction
        # key -> its contents (id, pack, offset, length, text id) by id, those of this batch
        # included, for every key looked up in this batch
        self._known: dict[int, list[tuple[int, int, int, int, int | None]]] = {}
        # the contents recorded in this batch, not written yet (`flush`): their rows (a content's own
        # text id written 0) and keys
        self._rows: list[tuple[int, int, int, int, int | None]] = []
        self._keys: list[tuple[int, int]] = []

    def begin(self) -> None:
        """A new batch of lines, in a new write transaction: content ids are looked up afresh."""
        self._next_content = None
        self._known = {}
        self._rows, self._keys = [], []

    def prefetch(self, keys: Iterable[int]) -> None:
        """Look the contents of `keys` up in a few statements, before the batch that names them."""
        wanted = list({key for key in keys if key not in self._known})
        db = self._connection.db
        for start in range(0, len(wanted), PREFETCH_KEYS):
            part = wanted[start : start + PREFETCH_KEYS]
            for key in part:
                self._known[key] = []
            for key, *content in db.execute(
                f"SELECT key, {_CONTENT} FROM content_keys JOIN contents USING (id) WHERE key IN "
                f"({','.join('?' * len(part))}) ORDER BY id",
                part,
            ):
                self._known[key].append(tuple(content))

    def flush(self) -> None:
        """Write the contents recorded in this batch (before the transaction commits)."""
        db = self._connection.db
        db.executemany(
            "INSERT INTO contents(id, pack, offset, length, text) VALUES (?, ?, ?, ?, ?)",
            self._rows,
        )
        db.executemany("INSERT INTO content_keys(key, id) VALUES (?, ?)", self._keys)
        self._rows, self._keys = [], []

    def _contents(self, key: int) -> list[tuple[int, int, int, int, int | None]]:
        """The contents of `key` (those of this batch included), by id."""
        known = self._known.get(key)
        if known is None:
            # (no content of this key was recorded in this batch: it would be known)
            known = self._known[key] = self._connection.db.execute(
                f"SELECT {_CONTENT} FROM content_keys JOIN contents USING (id) WHERE key = ? "
                "ORDER BY id",
                (key,),
            ).fetchall()
        return known

    def stored(self, raw: bytes, info: dict[str, Any], parsed: Parsed | None = None) -> StoredLine:
        """Given a line (and what `parse` takes from it, when a reader process did that), return it
        as stored: pieces seen before cut out; note what it says of its file in `info`."""
        if parsed is None:
            parsed = parse(raw, "prompt" not in info)
        ts = parsed.ts
        if ts is not None:
            info.setdefault("first_ts", ts)
            info["last_ts"] = ts
        if parsed.session is not None:
            info.setdefault("session", parsed.session)
        if parsed.project is not None:
            info.setdefault("project", parsed.project)
        if parsed.title is not None:
            info["title"] = parsed.title
        if parsed.prompt is not None and "prompt" not in info:
            info["prompt"] = parsed.prompt
        if parsed.slug is not None:
            info.setdefault("slugs", set()).add(parsed.slug)
        line = StoredLine(raw, ts=ts, role=parsed.role)
        segments: list[bytes] = []  # the stored line's parts, when a piece is cut out
        # Where the part after the last cut starts; the bytes cut out so far, less their marks
        done = shift = 0
        # key -> span of a new piece: a second copy stays in its line
        fresh: dict[int, tuple[int, int]] = {}
        for start, end, key, text in parsed.pieces or ():
            content_id, text_id = self._find(key, raw[start:end])
            if content_id is not None:
                segments += (raw[done:start], MARK)
                done, shift = end, shift + end - start - len(MARK)
                line.cut.append(content_id)
                line.texts.append(text_id)
            elif key not in fresh or raw[slice(*fresh[key])] != raw[start:end]:
                fresh[key] = (start, end)
                line.new.append(
                    NewPiece(key, start - shift, end - start, text, parsed.role, text_id)
                )
        if segments:
            segments.append(raw[done:])
            line.stored = b"".join(segments)
        return line

    def _find(self, key: int, exact: bytes) -> tuple[int | None, int | None]:
        """Return (the id of the content with these exact bytes, or None; the text id of a content
        with this key, which has the same role and normalised text, or None)."""
        packs = self._connection.packs
        text_id = None
        for content_id, pack, offset, length, text in self._contents(key):
            if length == len(exact) and pack not in packs.damaged:
                try:
                    if packs.read(pack, offset, length) == exact:
                        return int(content_id), text
                except PackDamaged:
                    pass  # never cut out again: the new line keeps the piece, and archiving goes on
            text_id = text_id or text
        return None, text_id

    def record(
        self, new: NewPiece, pack: int, line_at: int, indexed: list[tuple[int, str]]
    ) -> int | None:
        """Record a new content, now at `line_at + new.offset` of `pack`; unless a variant of its
        text is indexed already, add its text to `indexed` (rows for the search index, written once
        per batch). Return its text id (None: no text). Ids are given here, so a content indexed is
        written once, with its text id."""
        db = self._connection.db
        # the write lock is held: no other writer takes ids meanwhile
        if self._next_content is None:
            self._next_content = int(
                db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM contents").fetchone()[0]
            )
        content_id = self._next_content
        self._next_content += 1
        own_text = bool(new.text) and new.variant is None
        text = content_id if own_text else new.variant
        at = line_at + new.offset
        self._contents(new.key).append((content_id, pack, at, new.length, text))
        self._rows.append((content_id, pack, at, new.length, 0 if own_text else text))
        self._keys.append((new.key, content_id))
        if not own_text:
            return new.variant
        indexed.append((content_id, f"{new.text}\n{ROLE_TOKEN.format(new.role)}"))
        return content_id
