"""Lines as a swap's hand-over sees them: split on b"\\n" only, the uuid each carries, the parent it
hangs from, and the byte ranges of a file that came from elsewhere."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orjson

from riffd.fsio import RetryingFS
from riffd.transcript.reader import iter_fd

Interval = tuple[int, int]


class LineConflict(Exception):
    """A line written after the repair began hangs from a line the repair removed: a client loaded
    the old file."""


def split_lines(data: bytes) -> list[bytes]:
    """Given bytes, return their lines, each with its newline (the last may lack it); only b"\\n"
    ends a line."""
    lines: list[bytes] = []
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end == -1 else end + 1
        lines.append(data[start:end])
        start = end
    return lines


def _record(line: bytes) -> dict[str, object] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def hangs_from(line: bytes, removed: frozenset[str] | set[str]) -> str | None:
    """Given one line and the uuids a repair removed, return the removed uuid it hangs from, or
    None."""
    if not removed:
        return None
    record = _record(line)
    if record is None:
        return None
    for key in ("parentUuid", "logicalParentUuid"):
        parent = record.get(key)
        if isinstance(parent, str) and parent in removed:
            return parent
    return None


def parent_of(line: bytes) -> str | None:
    """Given one line, return its parentUuid, or None."""
    record = _record(line)
    parent = None if record is None else record.get("parentUuid")
    return parent if isinstance(parent, str) else None


def uuid_of(line: bytes) -> str | None:
    """Given one line, return its uuid, or None."""
    record = _record(line)
    value = None if record is None else record.get("uuid")
    return value if isinstance(value, str) else None


def uuids_of(lines: Iterable[bytes]) -> set[str]:
    """Given lines, return the uuids they carry."""
    return {value for value in map(uuid_of, lines) if value is not None}


def read_bytes(fs: RetryingFS, fd: int, start: int, end: int, what: str) -> bytes:
    """Return the bytes of the open file `fd` in [start, end) (fewer when it ends sooner), retrying
    EIO."""
    if end <= start:
        return b""
    return b"".join(iter_fd(fd, what=what, fs=fs, start=start, end=end))


def outside(data: bytes, base: int, excluded: Sequence[Interval]) -> bytes:
    """Given the bytes of a file from offset `base`, return them without the ranges `excluded` (file
    offsets)."""
    kept: list[bytes] = []
    position = base
    for start, end in sorted(excluded):
        if end <= position or start >= base + len(data):
            continue
        kept.append(data[position - base : max(start, position) - base])
        position = max(position, end)
    kept.append(data[position - base :])
    return b"".join(kept)


def inside(data: bytes, base: int, included: Sequence[Interval]) -> bytes:
    """Given the bytes of a file from offset `base`, return those of the ranges `included`, in file
    order."""
    return b"".join(
        data[max(start, base) - base : end - base] for start, end in sorted(included) if end > base
    )
