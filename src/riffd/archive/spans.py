"""Reading pieces of packs for search snippets without decompressing a whole pack.

A search shows about 17 snippets from about 5 packs; in a short-lived process (`riffd archive
search`) decompressing each pack whole costs its page faults, more than the decompression. A pack
compressed whole is decompressed only as far as the last piece it needs; a pack still in its
segments (the open pack as committed, a full pack not compressed whole yet) gives only the segments
its pieces lie in. The frames are decompressed side by side in two threads (zstd lets go of the
interpreter's lock while it works): decompressing is nearly all of a slow search's time, and two
threads did eight packs' worth in 7 ms where one took 12.
"""

from __future__ import annotations

import io
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import zstandard

from riffd.archive.packs import SEGMENT_BYTES, PackDamaged, PackStore, unpack
from riffd.forking import usable_cpus

SPAN_STEP = 64 * 1024  # what a frame is decompressed by at a time
FRAME_HEADER = 18  # a zstd frame header's bytes at most
FRAME_MARGIN = 128 * 1024  # compressed bytes read past the share a frame's start is estimated at
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
    framed: list[tuple[int, list[tuple[int, int]], bytes, int]] = []
    for pack, numbers in by_pack.items():
        ranges = [(wanted[number][1], wanted[number][1] + wanted[number][2]) for number in numbers]
        parts = _at_hand(store, pack, ranges)
        if parts is None:
            start = _frame_start(store, pack, max(end for _start, end in ranges))
            if start is not None:
                framed.append((pack, ranges, *start))
                continue
        _put(found, by_pack[pack], parts if parts is not None else _whole(store, pack, ranges))
    threads = min(THREADS, usable_cpus(), len(framed))
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            decoded = list(pool.map(lambda job: _from_frame(job[2], job[1]), framed))
    else:
        decoded = [_from_frame(frame, ranges) for _pack, ranges, frame, _size in framed]
    for (pack, ranges, frame, size), parts in zip(framed, decoded, strict=True):
        if parts is None and len(frame) < size:
            # The start read was too short (the pack's first bytes compress worse than the rest: a
            # pasted image): the whole frame, decompressed as far as needed again
            parts = _from_frame(_whole_frame(store, pack), ranges)
        # (a frame that cannot be read is read whole as a pack: that names a damaged pack)
        _put(found, by_pack[pack], parts if parts is not None else _whole(store, pack, ranges))
    return found


def _frame_start(store: PackStore, pack: int, last: int) -> tuple[bytes, int] | None:
    """The start of a pack's frame that should hold its first `last` bytes (the share of the
    frame they are of the pack, by the size its frame header names, and a margin: a frame's bytes
    mostly follow its pack's closely), and the frame's size; None when the pack has no frame (or no
    row: read whole, which says so). Read here, since SQLite is read in this thread only: a whole
    frame read costs its page faults, about 0.7 ms a pack, which the threads would wait for. The
    pack's `raw_size` column is not asked: it lies after the frame in the row, so SQLite would
    walk every page of it."""
    try:
        blob = store.db.blobopen("packs", "data", pack, readonly=True)
    except sqlite3.OperationalError:
        return None
    with blob:
        size = len(blob)
        if not size:
            return None
        try:
            raw_size = zstandard.frame_content_size(blob.read(FRAME_HEADER))
        except zstandard.ZstdError:
            raw_size = -1
        blob.seek(0)
        if raw_size <= 0:
            return blob.read(), size
        return blob.read(min(size, int(size * last / raw_size * 1.25) + FRAME_MARGIN)), size


def _whole_frame(store: PackStore, pack: int) -> bytes:
    """A pack's whole frame, as stored (empty when it has none now)."""
    row = store.db.execute("SELECT data FROM packs WHERE id = ?", (pack,)).fetchone()
    return bytes(row[0]) if row is not None and row[0] else b""


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


def _from_frame(frame: bytes, ranges: list[tuple[int, int]]) -> list[bytes] | None:
    """The ranges of a pack's frame, decompressed only as far as the last of them; None when it
    cannot be read or ends before."""
    parts: list[list[bytes]] = [[] for _ in ranges]
    position, last = 0, max(end for _start, end in ranges)
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(frame), read_size=SPAN_STEP
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
    except zstandard.ZstdError:
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
