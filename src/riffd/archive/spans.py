"""Reading pieces of packs for search snippets without decompressing a whole pack.

A search shows about 17 snippets from about 5 packs; in a short-lived process (`riffd archive
search`) decompressing each pack whole costs its page faults, more than the decompression. A pack
compressed whole is decompressed once per query and only as far as the last piece it needs; a pack
still in its segments (the open pack as committed, a full pack not compressed whole yet) gives only
the segments its pieces lie in.
"""

from __future__ import annotations

import contextlib
import sqlite3

import zstandard

from riffd.archive.packs import SEGMENT_BYTES, PackDamaged, PackStore, unpack

SPAN_STEP = 64 * 1024  # what `read_spans` reads and decompresses at a time


def read_spans(store: PackStore, wanted: list[tuple[int, int, int]]) -> list[bytes | PackDamaged]:
    """Return the bytes of each (pack, offset, length) of `wanted`, for search snippets
    (PackDamaged for those of a pack that cannot be read): each pack not held in memory is read
    from the database once, only the segments its pieces lie in, or its frame decompressed only as
    far as the last of them, in steps of SPAN_STEP; it is not cached. A whole pack (4 MiB) or its
    frame read at once costs its page faults in a short-lived process (`riffd archive search`):
    about a millisecond a snippet, more than decompressing."""
    by_pack: dict[int, list[int]] = {}
    for number, (pack, _offset, _length) in enumerate(wanted):
        by_pack.setdefault(pack, []).append(number)
    found: list[bytes | PackDamaged] = [b""] * len(wanted)
    for pack, numbers in by_pack.items():
        ranges = [(wanted[number][1], wanted[number][1] + wanted[number][2]) for number in numbers]
        parts: list[bytes | PackDamaged]
        try:
            parts = list(_ranges(store, pack, ranges))
        except PackDamaged as exc:
            parts = [exc] * len(numbers)
        for number, data in zip(numbers, parts, strict=True):
            found[number] = data
    return found


def _ranges(store: PackStore, pack: int, ranges: list[tuple[int, int]]) -> list[bytes]:
    held = store.in_memory(pack)
    source = held if held is not None else store.cache.get(pack)
    if source is not None:
        return [bytes(source[start:end]) for start, end in ranges]
    in_segments = _from_segments(store, pack, ranges)
    if in_segments is not None:
        return in_segments
    parts: list[list[bytes]] = [[] for _ in ranges]
    position, last = 0, max(end for _start, end in ranges)
    # (no such row: the error is raised below; no frame, the pack still in segments, or a frame
    # that cannot be read: read whole below, which names a damaged pack)
    with (
        contextlib.suppress(sqlite3.OperationalError, zstandard.ZstdError),
        store.db.blobopen("packs", "data", pack, readonly=True) as blob,
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
    whole = store.pack(pack)
    return [whole[start:end] for start, end in ranges]


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
        f"packs.id WHERE packs.id = ? AND packs.data = x'' AND segments.number IN "
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
