"""Packs: the archive's lines as written, about 4 MiB of them per pack, compressed with zstd.

A settled pack is one zstd frame at level 17 (within 5% of lzma preset 6 in size on transcripts, and
decompressed in under 2 ms where lzma takes 20: every search snippet and every dedup check reads a
pack). The open pack, while it still grows, is kept in 128 KiB segments at level 3, so a commit
rewrites only the last ones. A pack filled while lines keep coming is stored whole at level 3
("loose": level 17 compresses about 12 MB/s, level 3 over 1 GB/s, so archiving never waits for it)
and compressed again at level 17 once the archive is quiet (`tighten`); the two differ by about 12%
in size on transcripts. Every frame carries zstd's checksum of its bytes, so a pack whose stored
bytes were damaged (which SQLite's own check does not see in a blob) is refused when read, never
read as other bytes: `PackDamaged` names it. A run header records where each of a file's lines is in
a pack, and a checksum of the file's bytes through its last line, which a restore checks.
`PackStore` holds the packs of one database connection: the open pack in memory (as committed, and
as the running transaction has it) and a few settled packs, decompressed.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import orjson
import zstandard

PACK_BYTES = 4 * 1024 * 1024
SEGMENT_BYTES = 128 * 1024
SETTLED_LEVEL = 17
OPEN_LEVEL = 3
PACK_CACHE = 4  # decompressed packs kept (at most 16 MiB)
RUN_CACHE = 16  # the last runs of this many files kept decoded (a run holds up to a pack's lines: a few thousand)
SPAN_STEP = 64 * 1024  # what `spans` reads and decompresses at a time

log = logging.getLogger(__name__)

_SETTLED = zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True)
_OPEN = zstandard.ZstdCompressor(level=OPEN_LEVEL, write_checksum=True)


class PackDamaged(Exception):
    """Lines of the archive cannot be read as they were archived: a pack that does not decompress
    (or not to the bytes its checksum names), the record of a run of lines that cannot be decoded,
    or lines that read back other than a run's checksum says. `packs` names the packs concerned
    (empty when none is known)."""

    def __init__(self, packs: tuple[int, ...], detail: str) -> None:
        self.packs, self.detail = packs, detail
        super().__init__(detail)


def tightened(data: bytes) -> bytes | None:
    """Given a loose pack's frame, return it compressed at the settled level, checked to decompress
    to the same bytes; None when it does not, or the frame cannot be read (a damaged pack: never
    rewritten)."""
    try:
        raw = unpack(data)
    except zstandard.ZstdError:
        return None
    tight = compress(raw, settled=True)
    return tight if unpack(tight) == raw else None


def compress(data: bytes, *, settled: bool) -> bytes:
    """Compress a pack (`settled`) or a segment of the open pack."""
    return (_SETTLED if settled else _OPEN).compress(data)


def unpack(data: bytes) -> bytes:
    """Decompress a pack or a segment (zstd, its size in its frame header)."""
    return zstandard.ZstdDecompressor().decompress(data)


@dataclass
class OpenPack:
    """The pack lines are added to: its id, its bytes, how many of them are written as segments (-1:
    none, the pack's data holds them all, compressed when it was settled)."""

    pack_id: int
    body: bytearray
    saved: int


class Run:
    """The header of a run: each line's offset and length in the pack, cut pieces by line,
    unterminated last, and `crc`: the CRC-32 of the lines of the file's generation as written,
    without their newlines (which restore adds, as the run says), from its first line through this
    run's last (None: archived by a riffd that did not record it). Raise PackDamaged when the header
    cannot be decoded."""

    def __init__(self, pack: int, first: int, header: bytes | None = None) -> None:
        self.pack, self.first = pack, first
        try:
            data = orjson.loads(zlib.decompress(header)) if header else {}
            self.lengths: list[int] = data.get("n", [])
            # "g": each line's gap after the line before it (the first: its offset); mostly 0, so it
            # packs small
            self.offsets: list[int] = []
            end = 0
            for gap, length in zip(data.get("g", []), self.lengths, strict=True):
                self.offsets.append(end + gap)
                end += gap + length
            self.cuts: dict[int, list[int]] = {
                int(line): ids for line, ids in data.get("c", {}).items()
            }
        except (zlib.error, orjson.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
            raise PackDamaged(
                (pack,),
                f"the record of where lines {first + 1}.. are in pack {pack} cannot be read "
                f"({exc})",
            ) from exc
        self.unterminated = bool(data.get("u"))
        self.crc: int | None = data.get("h")

    def encode(self) -> bytes:
        """Return the header as stored: zlib of JSON with gaps, lengths, cut pieces, the
        unterminated flag and the checksum."""
        ends = [0] + [
            offset + length for offset, length in zip(self.offsets, self.lengths, strict=True)
        ]
        gaps = [offset - end for offset, end in zip(self.offsets, ends, strict=False)]
        header = {
            "g": gaps,
            "n": self.lengths,
            "c": {str(line): ids for line, ids in self.cuts.items()},
            "u": int(self.unterminated),
        }
        if self.crc is not None:
            header["h"] = self.crc
        return zlib.compress(orjson.dumps(header))


class PackStore:
    """The packs of one archive connection: the open pack in memory (as committed, and as the
    running transaction has it) and the last few settled packs read, decompressed. The caller holds
    the archive's lock."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.cache: OrderedDict[int, bytes] = OrderedDict()  # settled packs, decompressed
        # the open pack as committed; None: read it from the database
        self.committed: OpenPack | None = None
        self.pending: OpenPack | None = None  # the open pack inside the running transaction
        # The last run of the (file, generation)s written last through this connection (RUN_CACHE),
        # as committed: decoding its header at every batch cost a fifth of an ingest of big files.
        # Forgotten with the open pack.
        self.runs: OrderedDict[tuple[int, int], Run] = OrderedDict()
        self.version = -1
        self.damaged: set[int] = set()  # packs found unreadable through this connection

    def start(self) -> None:
        """Take the open pack into the running transaction: lines are about to be appended to it."""
        self.pending = self._open_pack()

    def commit(self) -> None:
        """The transaction committed: the open pack as it left it is the committed one."""
        if self.pending is not None:
            self.committed = self.pending
        self.pending = None

    def forget(self) -> None:
        """The transaction rolled back: what was added in memory was not committed (read it again
        when needed: the transaction added to the committed pack's own bytes and runs)."""
        self.committed = self.pending = None
        self.runs.clear()
        self.cache.clear()  # (a copy of the open pack read before it grew would now be read for it)

    def keep_run(self, key: tuple[int, int], run: Run | None) -> None:
        """Remember `run` as the last run of (file, generation) `key` as this transaction leaves it
        (None: it has none in memory)."""
        if run is None:
            self.runs.pop(key, None)
            return
        self.runs[key] = run
        self.runs.move_to_end(key)
        if len(self.runs) > RUN_CACHE:
            self.runs.popitem(last=False)

    def settle_open(self) -> None:
        """Store the open pack whole at the settled level (it stays open: a later line reopens
        it)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'open_pack'").fetchone()
        if row is not None:
            self.start()
            self.store_open(settled=True)

    def refresh(self) -> None:
        """Forget the packs and runs held in memory when another connection (`riffd archive ingest`
        beside the daemon) has written since: the open pack may have grown or been settled there."""
        version = self.db.execute("PRAGMA data_version").fetchone()[0]
        if version != self.version:
            self.committed = None
            self.cache.clear()
            self.runs.clear()
            self.version = version

    def _open_pack(self) -> OpenPack:
        # not copied (4 MiB at most, each transaction): a rollback forgets both
        if self.committed is not None:
            return self.committed
        row = self.db.execute("SELECT value FROM meta WHERE key = 'open_pack'").fetchone()
        if row is None:
            return self._new_pack()
        pack_id = int(row[0])
        try:
            data = self.db.execute("SELECT data FROM packs WHERE id = ?", (pack_id,)).fetchone()[0]
            if data:  # settled while open: its segments are written afresh at the next commit
                return OpenPack(pack_id, bytearray(unpack(data)), -1)
            body = bytearray(
                b"".join(
                    unpack(part)
                    for (part,) in self.db.execute(
                        "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack_id,)
                    )
                )
            )
        except zstandard.ZstdError as exc:
            # Lines are never added to a damaged pack (they would share its fate): it is left as it
            # is, for `riffd archive verify` to name, and a new pack is begun
            log.error(
                "archive: pack %d, the one lines were being added to, cannot be read (%s); lines go to a new "
                "pack from now on; `riffd archive verify` names the sessions it holds lines of",
                pack_id,
                exc,
            )
            self.damaged.add(pack_id)
            return self._new_pack()
        return OpenPack(pack_id, body, len(body))

    def _new_pack(self) -> OpenPack:
        pack_id = self.db.execute("INSERT INTO packs(data, raw_size) VALUES (x'', 0)").lastrowid
        assert pack_id is not None
        self.db.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('open_pack', ?)", (str(pack_id),)
        )
        return OpenPack(pack_id, bytearray(), 0)

    def store_open(self, *, settled: bool, loose: bool = False) -> None:
        """Write the open pack: whole when settled (its segments go), at the settled level, or fast
        and marked loose with `loose`; else only the segments that changed."""
        current = self.pending
        assert current is not None
        db, pack_id, body = self.db, current.pack_id, current.body
        # A copy read before (by `pack`) is out of date now: read after this, it would lack the
        # lines just added, and give another line's bytes (or none) at their places once the pack is
        # no longer held in memory
        self.cache.pop(pack_id, None)
        if settled:
            db.execute(
                "UPDATE packs SET data = ?, raw_size = ? WHERE id = ?",
                (compress(bytes(body), settled=not loose), len(body), pack_id),
            )
            db.execute("DELETE FROM segments WHERE pack = ?", (pack_id,))
            if loose:
                db.execute("INSERT OR IGNORE INTO loose(pack) VALUES (?)", (pack_id,))
            else:
                db.execute("DELETE FROM loose WHERE pack = ?", (pack_id,))
            current.saved = -1
            return
        if current.saved < 0:
            db.execute("UPDATE packs SET data = x'' WHERE id = ?", (pack_id,))
        first = max(current.saved, 0) // SEGMENT_BYTES
        db.executemany(
            "INSERT OR REPLACE INTO segments(pack, number, data) VALUES (?, ?, ?)",
            [
                (
                    pack_id,
                    number,
                    compress(
                        bytes(body[number * SEGMENT_BYTES : (number + 1) * SEGMENT_BYTES]),
                        settled=False,
                    ),
                )
                for number in range(first, -(-len(body) // SEGMENT_BYTES))
            ],
        )
        db.execute("UPDATE packs SET raw_size = ? WHERE id = ?", (len(body), pack_id))
        current.saved = len(body)

    def loose_count(self) -> int:
        """How many packs wait to be compressed at the settled level."""
        return int(self.db.execute("SELECT COUNT(*) FROM loose").fetchone()[0])

    def next_loose(self) -> tuple[int, bytes] | None:
        """The oldest loose pack: (its id, its frame), or None."""
        row = self.db.execute(
            "SELECT loose.pack, packs.data FROM loose JOIN packs ON packs.id = loose.pack "
            "ORDER BY loose.pack LIMIT 1"
        ).fetchone()
        return None if row is None else (int(row[0]), bytes(row[1]))

    def replace_loose(self, pack_id: int, data: bytes, tight: bytes | None) -> None:
        """Inside a write transaction: store `tight` for the loose pack `pack_id` if its frame is
        still `data` (and `tight`, checked by `tightened`, is smaller), and take it off the loose
        list; a pack whose frame changed meanwhile stays on it, to be looked at again."""
        row = self.db.execute("SELECT data FROM packs WHERE id = ?", (pack_id,)).fetchone()
        if row is not None and row[0] != data:
            return
        if row is not None and tight is not None and len(tight) < len(data):
            self.db.execute("UPDATE packs SET data = ? WHERE id = ?", (tight, pack_id))
        self.db.execute("DELETE FROM loose WHERE pack = ?", (pack_id,))

    def append(self, data: bytes) -> tuple[int, int]:
        """Add a stored line to the open pack (settling it first when full); return (pack,
        offset)."""
        assert self.pending is not None
        if len(self.pending.body) + len(data) > PACK_BYTES and self.pending.body:
            self.store_open(settled=True, loose=True)
            self.pending = self._new_pack()
        body = self.pending.body
        body += data
        return self.pending.pack_id, len(body) - len(data)

    def pack(self, pack_id: int) -> bytes:
        """Return a whole pack, decompressed (the last few read are cached)."""
        held = self._in_memory(pack_id)
        if held is not None:
            return bytes(held)
        data = self.cache.get(pack_id)
        if data is None:
            # One statement, so one snapshot: the frame and the segments read apart could straddle
            # another process settling the open pack (its frame read empty, then its segments gone),
            # and give a pack of no bytes
            rows = self.db.execute(
                "SELECT packs.data, segments.data FROM packs LEFT JOIN segments ON "
                "segments.pack = packs.id WHERE packs.id = ? ORDER BY segments.number",
                (pack_id,),
            ).fetchall()
            if not rows:
                raise sqlite3.DatabaseError(f"pack {pack_id} is not in the archive")
            # (the open pack, still in segments, is kept too: `store_open` drops the copy whenever
            # it grows)
            try:
                data = (
                    unpack(rows[0][0])
                    if rows[0][0]
                    else b"".join(unpack(part) for _frame, part in rows if part)
                )
            except zstandard.ZstdError as exc:
                self.damaged.add(pack_id)
                raise PackDamaged(
                    (pack_id,), f"pack {pack_id} of the archive cannot be read ({exc})"
                ) from exc
            self.cache[pack_id] = data
            while len(self.cache) > PACK_CACHE:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(pack_id)
        return data

    def spans(self, wanted: list[tuple[int, int, int]]) -> list[bytes | PackDamaged]:
        """Return the bytes of each (pack, offset, length) of `wanted`, for search snippets
        (PackDamaged for those of a pack that cannot be read): each settled pack not held in memory
        is read from the database once, and decompressed only as far as the last of its pieces, in
        steps of SPAN_STEP; it is not cached. A whole pack (4 MiB) or its frame read at once costs
        its page faults in a short-lived process (`riffd archive search`): about a millisecond a
        snippet, more than decompressing."""
        by_pack: dict[int, list[int]] = {}
        for number, (pack, _offset, _length) in enumerate(wanted):
            by_pack.setdefault(pack, []).append(number)
        found: list[bytes | PackDamaged] = [b""] * len(wanted)
        for pack, numbers in by_pack.items():
            ranges = [
                (wanted[number][1], wanted[number][1] + wanted[number][2]) for number in numbers
            ]
            parts: list[bytes | PackDamaged]
            try:
                parts = list(self._ranges(pack, ranges))
            except PackDamaged as exc:
                parts = [exc] * len(numbers)
            for number, data in zip(numbers, parts, strict=True):
                found[number] = data
        return found

    def _ranges(self, pack: int, ranges: list[tuple[int, int]]) -> list[bytes]:
        held = self._in_memory(pack)
        source = held if held is not None else self.cache.get(pack)
        if source is not None:
            return [bytes(source[start:end]) for start, end in ranges]
        parts: list[list[bytes]] = [[] for _ in ranges]
        position, last = 0, max(end for _start, end in ranges)
        # (no such row: the error is raised below; no frame, the pack still in segments, or a frame
        # that cannot be read: read whole below, which names a damaged pack)
        with (
            contextlib.suppress(sqlite3.OperationalError, zstandard.ZstdError),
            self.db.blobopen("packs", "data", pack, readonly=True) as blob,
            zstandard.ZstdDecompressor().stream_reader(
                blob,  # type: ignore[arg-type]
                read_size=SPAN_STEP,
                closefd=False,
            ) as reader,
        ):
            while position < last:
                chunk = reader.read(min(SPAN_STEP, last - position))
                if not chunk:
                    break
                after = position + len(chunk)
                for (start, end), into in zip(ranges, parts, strict=True):
                    if start < after and end > position:
                        into.append(chunk[max(0, start - position) : end - position])
                position = after
        found = [b"".join(into) for into in parts]
        if all(len(data) == end - start for data, (start, end) in zip(found, ranges, strict=True)):
            return found
        whole = self.pack(pack)
        return [whole[start:end] for start, end in ranges]

    def readable(self, pack_id: int) -> None:
        """Read and decompress a pack (its checksum checked), not kept: raise PackDamaged when it
        cannot be."""
        rows = self.db.execute(
            "SELECT packs.data, segments.data FROM packs LEFT JOIN segments ON segments.pack = "
            "packs.id WHERE packs.id = ? ORDER BY segments.number",
            (pack_id,),
        ).fetchall()
        try:
            for frame in (
                [rows[0][0]] if rows and rows[0][0] else [part for _frame, part in rows if part]
            ):
                unpack(frame)
        except zstandard.ZstdError as exc:
            self.damaged.add(pack_id)
            raise PackDamaged(
                (pack_id,), f"pack {pack_id} of the archive cannot be read ({exc})"
            ) from exc

    def read(self, pack: int, offset: int, length: int) -> bytes:
        """Return `length` bytes of a pack from `offset`."""
        held = self._in_memory(pack)
        if held is not None:
            return bytes(held[offset : offset + length])
        return self.pack(pack)[offset : offset + length]

    def _in_memory(self, pack: int) -> bytearray | None:
        """The bytes of `pack` when it is the open pack (as this transaction has it, else as
        committed)."""
        for current in (self.pending, self.committed):
            if current is not None and current.pack_id == pack:
                return current.body
        return None
