"""Streaming a transcript line by line: number, byte offset, bytes; parsing each line leniently.

Files are read through one `fs`, a RetryingFS that carries its retry policy (riffd.fsio): reads
are positional, and EIO is retried per that policy. A plain seam passed alone (a test's faults)
gets the default policy (`retrying`).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import orjson

from riffd.fsio import REAL_FILES, FileSystem, RetryingFS

log = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20
BOM = b"\xef\xbb\xbf"
RECORD_IDS = ("uuid", "sessionId", "leafUuid", "messageId")  # what a record has and a block has not


class Unparsed:
    """Why a line did not parse as a JSON object (kept, reported, never dropped), and where the
    whole record glued after a torn one starts in it (`glued_at`, None when there is none)."""

    __slots__ = ("glued_at", "reason")

    def __init__(self, reason: str, glued_at: int | None = None) -> None:
        self.reason = reason
        self.glued_at = glued_at


def parse_line(data: bytes) -> dict[str, Any] | Unparsed | None:
    """Given one line's bytes (no newline), return its object, None for a blank line, or Unparsed.

    orjson first; the standard library only when orjson refuses, because valid JSON that orjson
    does not take (integers beyond 64 bits, lone surrogate escapes) must not be called malformed.
    Bytes that are not UTF-8 read as U+FFFD, as Claude Code reads them (riffd.transcript.characters
    reports them). A line that does not parse says where a whole record glued after a torn one
    starts (`split_glued`).
    """
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not data.strip():
            return None
        if b"\x00" in data:
            return Unparsed(
                "contains NUL bytes (a crash or a sync client padded the file)", split_glued(data)
            )
        try:
            value = json.loads(data)
        except UnicodeDecodeError:
            value = _replaced(data)
            if value is None:
                return Unparsed(f"not valid JSON ({exc})", split_glued(data))
        except (ValueError, RecursionError):
            return Unparsed(f"not valid JSON ({exc})", split_glued(data))
    if not isinstance(value, dict):
        return Unparsed(f"JSON {type(value).__name__}, not an object")
    return value


def _replaced(data: bytes) -> Any:
    """`data` parsed with each invalid UTF-8 sequence read as U+FFFD, None when it does not parse."""
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return None


def last_record_start(body: bytes) -> int | None:
    """The offset of the `{` that opens the JSON object ending `body`, found by matching brackets
    backwards from the last `}` (string-aware: a quote preceded by an even number of backslashes
    toggles the string state); None when `body` does not end with one. Linear, and it never looks
    at the bytes before that object (NULs, a fragment, bytes that are not UTF-8)."""
    body = body.rstrip(b"\r\n")
    if not body.endswith(b"}"):
        return None
    depth, in_string, at = 0, False, len(body) - 1
    while at >= 0:
        byte = body[at]
        if byte == 0x22:  # "
            slashes = 0
            while at - 1 - slashes >= 0 and body[at - 1 - slashes] == 0x5C:
                slashes += 1
            if slashes % 2 == 0:
                in_string = not in_string
        elif not in_string:
            if byte in (0x7D, 0x5D):  # } ]
                depth += 1
            elif byte in (0x7B, 0x5B):  # { [
                depth -= 1
                if depth == 0:
                    return at if byte == 0x7B else None
                if depth < 0:
                    return None
        at -= 1
    return None


def split_glued(data: bytes) -> int | None:
    """Where a line that does not parse holds a whole record glued after a torn one (or after
    NULs): the offset of the last whole record it holds, or None. Accepted only past offset 0 and
    when the rest parses as an object with a string `type` and an id of a Claude Code record
    (`uuid`, `sessionId`, `leafUuid` or `messageId`): a torn record that ends right after one of
    its content blocks (`{"type":"text",...}`) is no record glued after another."""
    at = last_record_start(data)
    if not at:
        return None
    tail = parse_line(data[at:].rstrip(b"\r\n"))
    if not isinstance(tail, dict) or not isinstance(tail.get("type"), str):
        return None
    return at if any(isinstance(tail.get(key), str) for key in RECORD_IDS) else None


def retrying(fs: FileSystem = REAL_FILES) -> RetryingFS:
    """`fs` as a RetryingFS: itself when it is one, else `fs` with the default policy (a test's
    fault seam passed alone)."""
    return fs if isinstance(fs, RetryingFS) else RetryingFS(fs)


def close_read(fs: FileSystem, fd: int) -> None:
    """Close a descriptor opened for reading. An error there loses nothing (the descriptor is closed
    all the same, and nothing was written through it): it is logged, not raised, so a read that
    is done is not reported failed (a cloud folder's EIO at close)."""
    try:
        fs.close(fd)
    except OSError as exc:
        log.debug("closing a file read: %s", exc)


def iter_fd(
    fd: int,
    *,
    what: str,
    fs: FileSystem = REAL_FILES,
    start: int = 0,
    end: int | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[bytes]:
    """Yield the bytes of the open file `fd` from `start` up to `end` (None: to its end) in chunks.

    Reads are positional and EIO is retried per `fs`'s policy (see `retrying`; `what` names the
    file in errors). The file may end before `end`: callers that need exactly that many
    bytes count them. Raise ReadFailed when EIO persists, OSError for other errors.
    """
    fs = retrying(fs)
    pread = fs.seam.pread  # retried below, naming the file as `what` says (it was opened elsewhere)
    position = start
    while end is None or position < end:
        wanted = chunk_size if end is None else min(chunk_size, end - position)
        chunk = fs.attempt(partial(pread, fd, wanted, position), f"{what} at byte {position}")
        if not chunk:
            return
        position += len(chunk)
        yield chunk


def iter_raw(
    path: str | os.PathLike[str],
    *,
    fs: FileSystem = REAL_FILES,
    chunk_size: int = CHUNK_SIZE,
    start: int = 0,
) -> Iterator[bytes]:
    """Yield `path`'s bytes from `start` to its end in chunks of up to `chunk_size` (see
    iter_fd)."""
    fs = retrying(fs)
    fd = fs.open_file(path)
    try:
        yield from iter_fd(fd, what=os.fspath(path), fs=fs, start=start, chunk_size=chunk_size)
    finally:
        close_read(fs, fd)


def iter_chunks(
    path: str | os.PathLike[str],
    *,
    fs: FileSystem = REAL_FILES,
    hasher: Any = None,
    chunk_size: int = CHUNK_SIZE,
    start: int = 0,
    fd: int | None = None,
) -> Iterator[tuple[int, list[bytes], bool]]:
    """Yield (offset, lines, terminated) batches of `path`'s lines from byte `start`, in order
    (read from `fd` when given: `path` open already, which stays open).

    `lines` are the lines' bytes exactly as stored, without their newlines (a UTF-8 BOM stays;
    `parse_line` skips it), starting at byte `offset`. Every batch is newline-terminated but a
    last one of a single unterminated line (`terminated` False). Memory holds one chunk plus the
    longest line. `hasher` (hashlib-like) is fed every byte read, in order. Raise ReadFailed when
    EIO persists, OSError for other errors.
    """
    position = start
    pending: list[bytes] = []  # pieces of a line not finished yet (no newline read so far)
    pending_offset = start
    chunks = (
        iter_raw(path, fs=retrying(fs), chunk_size=chunk_size, start=start)
        if fd is None
        else iter_fd(fd, what=os.fspath(path), fs=retrying(fs), start=start, chunk_size=chunk_size)
    )
    for chunk in chunks:
        if hasher is not None:
            hasher.update(chunk)
        position += len(chunk)
        if b"\n" not in chunk:
            pending.append(chunk)  # a long line: join once, when its newline comes
            continue
        lines = chunk.split(b"\n")
        # only the first line is joined: copying the whole chunk again cost a tenth of a scan
        if pending:
            lines[0] = b"".join([*pending, lines[0]])
        tail = lines.pop()
        pending = [tail] if tail else []
        yield pending_offset, lines, True
        pending_offset = position - len(tail)
    if pending:
        yield pending_offset, [b"".join(pending)], False


def iter_lines(
    path: str | os.PathLike[str],
    *,
    fs: FileSystem = REAL_FILES,
    hasher: Any = None,
    chunk_size: int = CHUNK_SIZE,
    start: int = 0,
    first_number: int = 1,
) -> Iterator[tuple[int, int, bytes, bool]]:
    """Yield (number, offset, bytes, terminated) for each line of `path` from byte `start`.

    The same lines as `iter_chunks`, one at a time, numbered from `first_number`; `terminated` is
    False only for a last line with no newline.
    """
    number = first_number
    for offset, lines, terminated in iter_chunks(
        path, fs=retrying(fs), hasher=hasher, chunk_size=chunk_size, start=start
    ):
        for raw in lines:
            yield number, offset, raw, terminated
            number += 1
            offset += len(raw) + 1


def read_span(
    path: str | os.PathLike[str],
    offset: int,
    length: int,
    *,
    fs: FileSystem = REAL_FILES,
    fd: int | None = None,
) -> bytes:
    """Return `length` bytes of `path` at `offset` (EIO retried; read from `fd` when given: `path`
    open already, which stays open); raise OSError if the file is shorter."""
    fs = retrying(fs)
    opened = fs.open_file(path) if fd is None else None
    source = opened if opened is not None else fd
    assert source is not None
    try:
        data = read_at(fs, source, length, offset)
    finally:
        if opened is not None:
            close_read(fs, opened)
    if len(data) < length:
        raise OSError(
            f"{os.fspath(path)}: file ended at byte {offset + len(data)}, expected "
            f"{offset + length}"
        )
    return data


def read_at(fs: RetryingFS, fd: int, length: int, offset: int) -> bytes:
    """`length` bytes of the file open on `fd` at `offset` (EIO retried), fewer where it ends."""
    parts: list[bytes] = []
    got = 0
    while got < length:
        piece = fs.pread(fd, length - got, offset + got)
        if not piece:
            break
        parts.append(piece)
        got += len(piece)
    return b"".join(parts)
