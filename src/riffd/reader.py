"""Streaming a transcript line by line: number, byte offset, bytes; parsing each line leniently."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import orjson

from riffd.fsio import DEFAULT_RETRY, REAL_FS, FileSystem, RetryPolicy, retrying_call

CHUNK_SIZE = 1 << 20
BOM = b"\xef\xbb\xbf"


class Unparsed:
    """Why a line did not parse as a JSON object (kept, reported, never dropped)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def parse_line(data: bytes) -> dict[str, Any] | Unparsed | None:
    """Given one line's bytes (no newline), return its object, None for a blank line, or Unparsed.

    orjson first; the standard library only when orjson refuses, because valid JSON that orjson
    does not take (integers beyond 64 bits, lone surrogate escapes) must not be called malformed.
    """
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not data.strip():
            return None
        if b"\x00" in data:
            return Unparsed("contains NUL bytes (a crash or a sync client padded the file)")
        try:
            value = json.loads(data)
        except (ValueError, RecursionError):
            return Unparsed(f"not valid JSON ({exc})")
    if not isinstance(value, dict):
        return Unparsed(f"JSON {type(value).__name__}, not an object")
    return value


def iter_lines(
    path: str | os.PathLike[str],
    *,
    fs: FileSystem = REAL_FS,
    retry: RetryPolicy = DEFAULT_RETRY,
    hasher: Any = None,
    chunk_size: int = CHUNK_SIZE,
    start: int = 0,
    first_number: int = 1,
) -> Iterator[tuple[int, int, bytes, bool]]:
    """Yield (number, offset, bytes, terminated) for each line of `path` from byte `start`.

    `bytes` is the line exactly as stored, without its newline (a UTF-8 BOM stays; `parse_line`
    skips it); `terminated` is False only for a last line with no newline. Memory holds one chunk
    plus the longest line. `hasher` (hashlib-like) is fed every byte read, in order.
    Raise ReadFailed when EIO persists, OSError for other errors.
    """
    fd = retrying_call(partial(fs.open, path, os.O_RDONLY), what=f"{os.fspath(path)} (open)", policy=retry)
    try:
        yield from _iter_fd_lines(fd, os.fspath(path), fs, retry, hasher, chunk_size, start, first_number)
    finally:
        fs.close(fd)


def _iter_fd_lines(
    fd: int,
    name: str,
    fs: FileSystem,
    retry: RetryPolicy,
    hasher: Any,
    chunk_size: int,
    start: int,
    number: int,
) -> Iterator[tuple[int, int, bytes, bool]]:
    position = start
    pending = b""
    pending_offset = start
    while True:
        chunk = retrying_call(partial(fs.pread, fd, chunk_size, position), what=f"{name} at byte {position}",
                              policy=retry)
        if not chunk:
            break
        if hasher is not None:
            hasher.update(chunk)
        position += len(chunk)
        buffer = pending + chunk if pending else chunk
        pieces = buffer.split(b"\n")
        pending = pieces.pop()
        offset = pending_offset
        for piece in pieces:
            yield number, offset, piece, True
            number += 1
            offset += len(piece) + 1
        pending_offset = offset
    if pending:
        yield number, pending_offset, pending, False


def read_span(
    path: str | os.PathLike[str],
    offset: int,
    length: int,
    *,
    fs: FileSystem = REAL_FS,
    retry: RetryPolicy = DEFAULT_RETRY,
) -> bytes:
    """Return `length` bytes of `path` at `offset` (EIO retried); raise OSError if the file is shorter."""
    fd = retrying_call(partial(fs.open, path, os.O_RDONLY), what=f"{os.fspath(path)} (open)", policy=retry)
    try:
        parts: list[bytes] = []
        got = 0
        while got < length:
            at = offset + got
            piece = retrying_call(partial(fs.pread, fd, length - got, at), what=f"{os.fspath(path)} at byte {at}",
                                  policy=retry)
            if not piece:
                raise OSError(f"{os.fspath(path)}: file ended at byte {at}, expected {offset + length}")
            parts.append(piece)
            got += len(piece)
        return b"".join(parts)
    finally:
        fs.close(fd)
