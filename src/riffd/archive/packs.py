"""Packs: the archive's lines as written, about 4 MiB of them per pack, compressed with zstd.

A settled pack is one zstd frame at level 17 (within 5% of lzma preset 6 in size on transcripts, and
decompressed in under 2 ms where lzma takes 20: every search snippet and every dedup check reads a
pack). The open pack, while it still grows, is kept in 128 KiB segments at level 1, so a commit
rewrites only the last ones (level 1 compresses the daemon's half-full last segment in about 0.1 ms
with the caches cold, as they are after a pause between appends, where level 3 took 0.24 ms; its
segments are about 3% larger until the pack is tightened). A pack filled while lines keep coming
stays in those segments ("loose": level 17 compresses about 12 MB/s, level 1 over 1 GB/s, so
archiving never waits for it) and is compressed whole at level 17 once the archive is quiet
(`tighten`); the two differ by about 15% in size on transcripts (more for the segments, each
compressed alone). Every frame carries zstd's checksum of its bytes, so a pack whose stored
bytes were damaged (which SQLite's own check does not see in a blob) is refused when read, never
read as other bytes: `PackDamaged` names it. A run header records where each of a file's lines is in
a pack (RUN_LINES lines at most: a file's lines in one pack may take several runs), and a checksum of
the file's bytes through its last line, which a restore checks.
`PackStore` holds the packs of one database connection: the open pack in memory (as committed, and
as the running transaction has it) and a few settled packs, decompressed.
"""

from __future__ import annotations

import logging
import sqlite3
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
import zstandard

PACK_BYTES = 4 * 1024 * 1024
SEGMENT_BYTES = 128 * 1024
SETTLED_LEVEL = 17
OPEN_LEVEL = 1
PACK_CACHE = 4  # decompressed packs kept (at most 16 MiB)
RUN_CACHE = (
    16  # the last runs of this many files kept decoded (a run holds RUN_LINES lines at most)
)
# Lines of a file in one run at most: a run's header is encoded again at each batch that adds to it
# (each append, in the daemon), so a run of every line a pack holds (tens of thousands of short lines
# once their pieces are cut out) cost an append its file's length; a new run starts past this
RUN_LINES = 256

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


def tightened(data: bytes | list[bytes]) -> bytes | None:
    """Given a loose pack's frame (or, for a pack kept in its segments, their frames in order),
    return it compressed at the settled level, checked to decompress to the same bytes; None when it
    does not, or a frame cannot be read (a damaged pack: never rewritten)."""
    try:
        raw = unpack(data) if isinstance(data, bytes) else b"".join(map(unpack, data))
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
        # A 4 KiB window (wbits 12) is as small on headers of a few kB and costs half the time: zlib
        # sets up its whole window at each call (any reader's zlib.decompress takes it)
        return zlib.compress(orjson.dumps(header), 6, 12)


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

    def store_open(self, *, settled: bool) -> None:
        """Write the open pack: whole at the settled level when `settled` (its segments go), else
        only the segments that changed."""
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
                (compress(bytes(body), settled=True), len(body), pack_id),
            )
            db.execute("DELETE FROM segments WHERE pack = ?", (pack_id,))
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

    def next_loose(self) -> tuple[int, bytes | list[bytes]] | None:
        """The oldest loose pack: (its id, its frame, or its segments' frames in order when it is
        kept in them), or None."""
        row = self.db.execute(
            "SELECT loose.pack, packs.data FROM loose JOIN packs ON packs.id = loose.pack "
            "ORDER BY loose.pack LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        if row[1]:
            return int(row[0]), bytes(row[1])
        return int(row[0]), self._segments(int(row[0]))

    def _segments(self, pack_id: int) -> list[bytes]:
        return [
            bytes(part)
            for (part,) in self.db.execute(
                "SELECT data FROM segments WHERE pack = ? ORDER BY number", (pack_id,)
            )
        ]

    def replace_loose(self, pack_id: int, data: bytes | list[bytes], tight: bytes | None) -> None:
        """Inside a write transaction: store `tight` for the loose pack `pack_id` if it is still
        stored as `data` (and `tight`, checked by `tightened`, is smaller; its segments then go),
        and take it off the loose list; a pack stored otherwise meanwhile stays on it, to be looked
        at again."""
        row = self.db.execute("SELECT data FROM packs WHERE id = ?", (pack_id,)).fetchone()
        if row is not None and (
            row[0] != data if isinstance(data, bytes) else row[0] or self._segments(pack_id) != data
        ):
            return
        size = len(data) if isinstance(data, bytes) else sum(map(len, data))
        if row is not None and tight is not None and len(tight) < size:
            self.db.execute("UPDATE packs SET data = ? WHERE id = ?", (tight, pack_id))
            self.db.execute("DELETE FROM segments WHERE pack = ?", (pack_id,))
        self.db.execute("DELETE FROM loose WHERE pack = ?", (pack_id,))

    def append(self, data: bytes) -> tuple[int, int]:
        """Add a stored line to the open pack (settling it first when full); return (pack,
        offset)."""
        assert self.pending is not None
        if len(self.pending.body) + len(data) > PACK_BYTES and self.pending.body:
            # Full: it stays in its segments, each compressed once (at the commit that wrote it),
            # marked loose; compressing it whole again at the fast level cost an ingest a tenth of
            # its time
            self.store_open(settled=False)
            self.db.execute("INSERT OR IGNORE INTO loose(pack) VALUES (?)", (self.pending.pack_id,))
            self.pending = self._new_pack()
        body = self.pending.body
        body += data
        return self.pending.pack_id, len(body) - len(data)

    def pack(self, pack_id: int) -> bytes:
        """Return a whole pack, decompressed (the last few read are cached)."""
        held = self.in_memory(pack_id)
        if held is not None:
            return bytes(held)
        data = self.cache.get(pack_id)
        if data is None:
            parts, raw_size = self._stored(pack_id)
            if raw_size is None:
                raise sqlite3.DatabaseError(f"pack {pack_id} is not in the archive")
            # (the open pack, still in segments, is kept too: `store_open` drops the copy whenever
            # it grows)
            data = b"".join(parts)
            self._sized(pack_id, len(data), raw_size)
            self.cache[pack_id] = data
            while len(self.cache) > PACK_CACHE:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(pack_id)
        return data

    def readable(self, pack_id: int) -> None:
        """Read and decompress a pack (its checksum checked), not kept: raise PackDamaged when it
        cannot be."""
        parts, raw_size = self._stored(pack_id)
        size = sum(map(len, parts))
        if raw_size is not None:
            self._sized(pack_id, size, raw_size)

    def _stored(self, pack_id: int) -> tuple[Iterator[bytes], int | None]:
        """A stored pack's parts, decompressed as they are taken (its frame, or its segments in
        order; PackDamaged for one that cannot be), and the bytes it should hold (None: no such
        pack). One statement, so one snapshot: the frame and the segments read apart could
        straddle another process settling the open pack (its frame read empty, then its segments
        gone), and give a pack of no bytes."""
        rows = self.db.execute(
            "SELECT packs.data, packs.raw_size, segments.data FROM packs LEFT JOIN segments ON "
            "segments.pack = packs.id WHERE packs.id = ? ORDER BY segments.number",
            (pack_id,),
        ).fetchall()
        frames = (
            [rows[0][0]] if rows and rows[0][0] else [part for _frame, _size, part in rows if part]
        )
        return (self._unpacked(pack_id, frame) for frame in frames), rows[0][1] if rows else None

    def _unpacked(self, pack_id: int, frame: bytes) -> bytes:
        try:
            return unpack(frame)
        except zstandard.ZstdError as exc:
            self.damaged.add(pack_id)
            raise PackDamaged(
                (pack_id,), f"pack {pack_id} of the archive cannot be read ({exc})"
            ) from exc

    def _sized(self, pack_id: int, size: int, raw_size: int) -> None:
        """Raise PackDamaged when a pack's bytes do not add up to its size: a segment gone (the rest
        would be read at other places) or a frame of other bytes."""
        if size != raw_size:
            self.damaged.add(pack_id)
            raise PackDamaged(
                (pack_id,),
                f"pack {pack_id} of the archive holds {size} bytes where it should hold {raw_size}",
            )

    def read(self, pack: int, offset: int, length: int) -> bytes:
        """Return `length` bytes of a pack from `offset`."""
        held = self.in_memory(pack)
        if held is not None:
            return bytes(held[offset : offset + length])
        return self.pack(pack)[offset : offset + length]

    def in_memory(self, pack: int) -> bytearray | None:
        """The bytes of `pack` when it is the open pack (as this transaction has it, else as
        committed)."""
        for current in (self.pending, self.committed):
            if current is not None and current.pack_id == pack:
                return current.body
        return None
