"""Reading pieces of packs for search snippets without decompressing a whole pack.

A search shows about 17 snippets from about 5 packs; in a short-lived process (`riffd archive
search`) decompressing each pack whole costs its page faults, more than the decompression. A pack
compressed whole is decompressed only as far as the last piece it needs; a pack still in its
segments (the open pack as committed, a full pack not compressed whole yet) gives only the segments
its pieces lie in. The frames are read and decompressed side by side in two threads (zstd and
SQLite let go of the interpreter's lock while they work; the threads take turns on the connection):
reading and decompressing are nearly all of a slow search's time, and two threads did eight packs'
worth in 7 ms where one took 12.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import zstandard

from riffd.archive.packs import SEGMENT_BYTES, PackDamaged, PackStore, unpack
from riffd.forking import usable_cpus

SPAN_STEP = 64 * 1024  # what a frame is decompressed by at a time
THREADS = 2  # decompressing side by side, at most (and no more than the CPUs this process may use)


def read_spans(store: PackStore, wanted: list[tuple[int, int, int]]) -> list[bytes | PackDamaged]:
    """Return the bytes of each (pack, offset, length) of `wanted`, for search snippets
    (PackDamaged for those of a pack that cannot be read): each pack not held in memory is read
    from the database once, only the segments its pieces lie in, or its frame decompressed only as
    far as the last of them (in threads, one pack each); it is not cached."""
    by_pack: dict[int, list[int]] = {}
    for number, (pack, _offset, _length) in enumerate(wanted):
        by_pack.setdefault(pack, []).append(number)
    found: list[bytes | PackDamaged] = [b""] * len(wanted)
    framed: list[tuple[int, list[tuple[int, int]]]] = []
    for pack, numbers in by_pack.items():
        ranges = [(wanted[number][1], wanted[number][1] + wanted[number][2]) for number in numbers]
        parts = _at_hand(store, pack, ranges)
        if parts is None:
            framed.append((pack, ranges))
        else:
            _put(found, numbers, parts)
    threads = min(THREADS, usable_cpus(), len(framed))
    # The caller holds the archive's lock, so nothing else of this process uses its connection
    # meanwhile; the threads take turns on it (`turns`), each through a blob of its own, while
    # decompressing side by side
    turns = threading.Lock()
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            decoded = list(pool.map(lambda job: _from_blob(store.db, turns, *job), framed))
    else:
        decoded = [_from_blob(store.db, turns, pack, ranges) for pack, ranges in framed]
    for (pack, ranges), parts in zip(framed, decoded, strict=True):
        # (no frame now, or one that cannot be read: the pack is read whole, which names a
        # damaged pack)
        _put(found, by_pack[pack], parts if parts is not None else _whole(store, pack, ranges))
    return found


class _TakingTurns:
    """A blob read in turns with the other threads of one connection."""

    def __init__(self, blob: sqlite3.Blob, turns: threading.Lock) -> None:
        self.blob, self.turns = blob, turns

    def read(self, size: int = -1) -> bytes:
        with self.turns:
            return self.blob.read(size)


def _from_blob(
    db: sqlite3.Connection, turns: threading.Lock, pack: int, ranges: list[tuple[int, int]]
) -> list[bytes] | None:
    """The ranges of a pack's frame, read through an incremental blob (in turns on `db`) and
    decompressed only as far as the last of them; None when it has no frame, or it cannot be
    read or ends before."""
    try:
        with turns:
            blob = db.blobopen("packs", "data", pack, readonly=True)
    except sqlite3.Error:
        return None
    try:
        return _from_frame(_TakingTurns(blob, turns), ranges)
    finally:
        with turns:
            blob.close()


def _put(
    found: list[bytes | PackDamaged], numbers: list[int], parts: list[bytes] | PackDamaged
) -> None:
    for index, number in enumerate(numbers):
        found[number] = parts if isinstance(parts, PackDamaged) else parts[index]


def _at_hand(store: PackStore, pack: int, ranges: list[tuple[int, int]]) -> list[bytes] | None:
    """The ranges of a pack held in memory or kept in its segments; None when it has a frame."""
    held = store.in_memory(pack)
    source = held if held is not None else store.cache.get(pack)
    if source is not None:
        return [bytes(source[start:end]) for start, end in ranges]
    return _from_segments(store, pack, ranges)


def _whole(store: PackStore, pack: int, ranges: list[tuple[int, int]]) -> list[bytes] | PackDamaged:
    """The ranges from the whole pack (PackDamaged when it cannot be read)."""
    try:
        whole = store.pack(pack)
    except PackDamaged as exc:
        return exc
    return [whole[start:end] for start, end in ranges]


def _from_frame(frame: Any, ranges: list[tuple[int, int]]) -> list[bytes] | None:
    """The ranges of a pack's frame (`frame`: what its compressed bytes are read from, in steps of
    SPAN_STEP), decompressed only as far as the last of them; None when it cannot be read or ends
    before."""
    parts: list[list[bytes]] = [[] for _ in ranges]
    position, last = 0, max(end for _start, end in ranges)
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            frame, read_size=SPAN_STEP, closefd=False
        ) as reader:
            while position < last:
                chunk = reader.read(min(SPAN_STEP, last - position))
                if not chunk:
                    break
                after = position + len(chunk)
                for (start, end), into in zip(ranges, parts, strict=True):
                    if start < after and end > position:
                        into.append(chunk[max(0, start - position) : end - position])
                position = after
    except (zstandard.ZstdError, sqlite3.Error):
        return None
    found = [b"".join(into) for into in parts]
    if all(len(data) == end - start for data, (start, end) in zip(found, ranges, strict=True)):
        return found
    return None


def _from_segments(
    store: PackStore, pack: int, ranges: list[tuple[int, int]]
) -> list[bytes] | None:
    """The bytes of each range of a pack kept in its segments (the open pack as committed, a
    full pack not compressed whole yet), from only the segments they lie in; None when it has a
    frame, or a segment is missing or cannot be read (the pack is then read whole, which names
    a damaged pack)."""
    numbers = sorted(
        {
            n
            for start, end in ranges
            for n in range(start // SEGMENT_BYTES, -(-end // SEGMENT_BYTES))
        }
    )
    rows = store.db.execute(
        "SELECT segments.number, segments.data FROM packs JOIN segments ON segments.pack = "
        f"packs.id WHERE packs.id = ? AND LENGTH(packs.data) = 0 AND segments.number IN "
        f"({','.join('?' * len(numbers))})",
        (pack, *numbers),
    ).fetchall()
    if len(rows) != len(numbers):
        return None
    try:
        body = {number: unpack(data) for number, data in rows}
    except zstandard.ZstdError:
        return None
    found = []
    for start, end in ranges:
        data = b"".join(
            body[n][max(0, start - n * SEGMENT_BYTES) : end - n * SEGMENT_BYTES]
            for n in range(start // SEGMENT_BYTES, -(-end // SEGMENT_BYTES))
        )
        if len(data) != end - start:
            return None
        found.append(data)
    return found
