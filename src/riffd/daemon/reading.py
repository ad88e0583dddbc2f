"""Reading one transcript from its watermark: its status (one stat: an unchanged file costs no
more), where to read from, its new complete lines in chunks, and the watermark that records them.

Only the bytes after the stored watermark are read, fed to the file's index kept in memory
(riffd.daemon.cache); a file whose index was evicted, or that was truncated, rewritten or replaced
by someone else, is read again from the start: never silently skipped. Only complete lines are
consumed: an unfinished last line waits for its newline.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any, NamedTuple

from riffd.daemon.cache import IndexCache
from riffd.fsio import RetryingFS
from riffd.state.records import FINGERPRINT_BYTES, FileState, Watermark
from riffd.transcript.incremental import GrowingIndex
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.reader import Unparsed, close_read, iter_chunks, read_at, read_span
from riffd.transcript.records import read_record

log = logging.getLogger("riffd.daemon.worker")  # the worker's own lines
# How much of the start and of the end of what a read took is compared with the file once read
VERIFY_BYTES = 1 << 20
# and on each side of the place where one read of the file ended and the next began
SEAM_BYTES = 1024


class Gone(Exception):
    """Nothing is at the path any more."""


class Replaced(Exception):
    """Another file took the name between its status and its read (a repair's swap, an editor's
    save): it is looked at again as the file it now is."""


class ChangedUnderRead(Replaced):
    """The file changed under the read: what was read is not what it holds (truncated and written
    again in place, as Claude Code's truncate to drop a line does): read again, never kept."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class PassedBy(Exception):
    """A path the worker does not read now; `why` says why, and `error` that it is a read error (in
    the log and the counters)."""

    def __init__(self, why: str, *, error: bool = False) -> None:
        super().__init__(why)
        self.why, self.error = why, error


def status_of(name: str, fs: RetryingFS) -> os.stat_result:
    """Return the status of the regular file `name`, through a symlink the walk reached it by; raise
    Gone when nothing is there, PassedBy when its status cannot be read or it is no regular file."""
    try:
        status = fs.stat(name)
    except FileNotFoundError:
        raise Gone(name) from None
    except OSError as exc:  # EIO on every try: look again at the next change or rescan
        log.error("%s: could not read its status: %s", name, exc)
        raise PassedBy(str(exc), error=True) from exc
    if stat.S_ISLNK(status.st_mode):
        # A link to a transcript the walk reaches by no other path (riffd.claude_code.walk): read
        # and archived through the link; its repair is skipped as `symlink` (the planner), so the
        # report names it.
        try:
            status = fs.attempt(partial(os.stat, name), f"the status of {name}")
        except OSError as exc:
            raise PassedBy(f"a symlink to nothing readable ({exc})") from exc
    if not stat.S_ISREG(status.st_mode):
        raise PassedBy("not a regular file")
    return status


class Message(NamedTuple):
    """A message line as the index parsed it: its line number (0-based), the record, and the
    session id the index knew when it reached it."""

    line: int
    record: dict[str, Any]
    session_id: str | None


@dataclass(frozen=True)
class Chunk:
    """Complete lines of a transcript, in file order: `lines` (without their newlines) start at
    byte `offset`; `messages` are filled by the index as it parses them, for the sinks after it."""

    offset: int
    lines: list[bytes]
    messages: list[Message] = field(default_factory=list)

    @cached_property  # (the archive's sink and the read's check each ask)
    def end(self) -> int:
        """The byte after the last line's newline."""
        return self.offset + sum(map(len, self.lines)) + len(self.lines)


@dataclass
class Reading:
    """One file being read: from byte `start` into `growing`, the index the daemon keeps of it
    (`already` of its lines were processed
    before: a rebuild reads them again, but does not process them again); `kind` is appended /
    rebuilt / read, `why` says why it is read from the start; `tail` counts the bytes of an
    unfinished last line once the chunks are read, and `tail_torn` says it is no record (not a JSON
    object, as `riffd scan` judges a last line without its newline)."""

    name: str
    status: os.stat_result
    state: FileState | None
    growing: GrowingIndex
    start: int = 0
    already: int = 0
    kind: str = "read"
    why: str = ""
    tail: int = 0
    tail_torn: bool = False
    # the file open for reading (the one `status` is of): judged, read and fingerprinted through it
    fd: int | None = None
    # the first chunk read and the last ones (VERIFY_BYTES of them at least): compared with the
    # file once read (changed_under_read), which keeps (offset, bytes) of what it found as read
    first: Chunk | None = None
    last: list[Chunk] = field(default_factory=list)
    held: list[tuple[int, bytes]] = field(default_factory=list)
    # (offset, bytes) around each place where one read of the file ended and the next began: where
    # a change under the read splices old bytes with new ones
    seams: list[tuple[int, bytes]] = field(default_factory=list)
    _raw_end: int = 0
    _raw_tail: bytes = b""

    @property
    def index(self) -> TranscriptIndex:
        """The index of the lines read so far."""
        return self.growing.index

    @property
    def rewritten(self) -> bool:
        """Whether the file is no longer the one its watermark describes (rewritten, replaced)."""
        return self.state is not None and bool(self.why) and self.kind == "read"

    @property
    def at_end(self) -> bool:
        """Whether the index ends where the file ended when it was looked at."""
        return self.index.end == self.status.st_size

    def chunks(self, fs: RetryingFS) -> Iterator[Chunk]:
        """Yield the complete new lines in chunks; an unfinished last line is only measured."""
        assert self.fd is not None
        self._raw_end = self.start
        for offset, lines, terminated in iter_chunks(
            self.name, fs=fs, start=self.start, fd=self.fd, hasher=self
        ):
            if terminated:
                chunk = Chunk(offset, lines)
                self._keep(chunk)
                yield chunk
            else:  # an unfinished last line: wait for its newline
                self.tail = len(lines[0])
                self.tail_torn = isinstance(read_record(lines[0]), Unparsed)

    def update(self, data: bytes) -> None:
        """Take note of one read of the file (iter_chunks calls it with each, in order): the bytes
        on both sides of where it began."""
        if self._raw_end > self.start:
            self.seams.append(
                (self._raw_end - len(self._raw_tail), self._raw_tail + data[:SEAM_BYTES])
            )
        self._raw_end += len(data)
        self._raw_tail = data[-SEAM_BYTES:]

    def _keep(self, chunk: Chunk) -> None:
        """Keep the first chunk and enough of the last ones to compare with the file once read."""
        if self.first is None:
            self.first = chunk
        self.last.append(chunk)
        end = chunk.end
        while len(self.last) > 1 and end - self.last[1].offset >= VERIFY_BYTES:
            del self.last[0]

    def changed_under_read(self, fs: RetryingFS) -> str:
        """Why the file no longer holds what this read took from it, '' when it does. A file is
        appended to, never changed in place, but by a rewrite: Claude Code's own truncate at an
        offset to drop a line, then its next appends, or a copy over it. One that lands behind the
        read while it reads splices the old bytes read with the new ones after them (a line cut in
        two, a line gone from the archive). So, once read: the watermark the read started from must
        still hold (the bytes before it are as they were), and the first and the last VERIFY_BYTES
        of what was read, and the SEAM_BYTES on each side of every place where one read of the
        file ended and the next began (where such a splice lies), must still be the file's."""
        assert self.fd is not None
        if self.state is not None and self.kind != "read":  # from the watermark, or rebuilt
            watermark = self.state.watermark
            tail_start = watermark.offset - watermark.tail_len
            before = self._now(tail_start, watermark.tail_len, fs)
            if hashlib.sha256(before).hexdigest() != watermark.tail_sha:
                return "bytes before the watermark changed as it was read"
            self.held.append((tail_start, before))
        for offset, data in [*_windows(self.first, self.last), *self.seams]:
            if self._now(offset, len(data), fs) != data:
                return f"bytes {offset}-{offset + len(data)} changed as they were read"
            self.held.append((offset, data))
        return ""

    def _now(self, offset: int, length: int, fs: RetryingFS) -> bytes:
        """The file's `length` bytes at `offset` now, through the read's open (shorter when the
        file is). A read that fails at every try raises: it is a read error (counted, logged and
        looked at again), not a change."""
        assert self.fd is not None
        return read_at(fs, self.fd, length, offset)

    def held_bytes(self, offset: int, length: int) -> bytes | None:
        """The `length` bytes at `offset` as changed_under_read found them, when it held them all:
        the new watermark is fingerprinted on those, not on a read after it (a change landing in
        between would be fingerprinted as if it had been read)."""
        if length <= 0:
            return b""
        end, at, found = offset + length, offset, []
        for start, data in sorted(self.held, key=lambda piece: piece[0]):
            stop = start + len(data)
            if start <= at < stop:
                found.append(data[at - start : min(end, stop) - start])
                at = min(end, stop)
                if at == end:
                    return b"".join(found)
        return None

    def close(self, fs: RetryingFS) -> None:
        """Close the file (once read, its watermark taken)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            close_read(fs, fd)


def _windows(first: Chunk | None, last: list[Chunk]) -> list[tuple[int, bytes]]:
    """(offset, bytes) of the first VERIFY_BYTES of the `first` chunk read and of the last
    VERIFY_BYTES of the consecutive `last` chunks (the first among them, when they are all)."""
    if first is None or not last:
        return []
    head = (b"\n".join(first.lines) + b"\n")[:VERIFY_BYTES]
    tail = b"".join(b"\n".join(chunk.lines) + b"\n" for chunk in last)[-VERIFY_BYTES:]
    end = last[-1].end
    windows = [(first.offset, head), (end - len(tail), tail)]
    return windows[1:] if first.offset == end - len(tail) else windows


def open_reading(
    name: str,
    status: os.stat_result,
    state: FileState | None,
    cache: IndexCache,
    fs: RetryingFS,
    *,
    settle_tail: bool = False,
) -> Reading | None:
    """Given a file's status and its stored state, return where to read it from, or None when its
    watermark says nothing changed (one stat, no read: what a restart costs per untouched file).
    With `settle_tail`, an unchanged file that ends in an unfinished line is read again from its
    watermark (that line, to be judged and archived once the file is idle). The Reading holds the
    file open, judged and read through that one open (`close` it); raise Replaced when the name no
    longer holds the file `status` is of."""
    watermark = state.watermark if state else None
    if watermark is not None and (
        (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        == (watermark.dev, watermark.ino, watermark.size, watermark.mtime_ns)
        and not (settle_tail and watermark.size > watermark.offset)
    ):
        return None
    fd, status = open_as(name, status, fs)
    try:
        reading = _where_from(name, status, state, cache, fs, fd)
    except BaseException:
        close_read(fs, fd)
        raise
    reading.fd = fd
    return reading


def open_as(name: str, status: os.stat_result, fs: RetryingFS) -> tuple[int, os.stat_result]:
    """Open `name` for reading; return the descriptor and the status of the file it is open on.
    Raise Replaced (having closed it) when that is not the file `status` is of: what was judged on
    that file is read from it, or not at all."""
    fd = fs.open_file(name)
    try:
        opened = fs.fstat(fd)
    except BaseException:
        close_read(fs, fd)
        raise
    if (opened.st_dev, opened.st_ino) != (status.st_dev, status.st_ino):
        close_read(fs, fd)
        raise Replaced(name)
    return fd, opened


def _where_from(
    name: str,
    status: os.stat_result,
    state: FileState | None,
    cache: IndexCache,
    fs: RetryingFS,
    fd: int,
) -> Reading:
    """Where to read the changed file open on `fd` from (see open_reading)."""
    watermark = state.watermark if state else None
    if watermark is None:
        cache.drop(name)
        return Reading(name, status, state, GrowingIndex(name), why="new file")
    why = still_same_file(name, status, watermark, fs, fd)
    if why:
        cache.drop(name)
        return Reading(name, status, state, GrowingIndex(name), why=why)
    growing = cache.get(name, watermark.offset)
    if growing is not None:
        return Reading(name, status, state, growing, watermark.offset, watermark.lines, "appended")
    cache.drop(name)
    why = "no index in memory: read from the start to rebuild it"
    return Reading(name, status, state, GrowingIndex(name), 0, watermark.lines, "rebuilt", why)


def still_same_file(
    name: str, status: os.stat_result, watermark: Watermark, fs: RetryingFS, fd: int
) -> str:
    """Return why `name` (open on `fd`, of `status`) is no longer the file the watermark
    describes, or '' if it still is."""
    if (status.st_dev, status.st_ino) != (watermark.dev, watermark.ino):
        return "it was replaced by another file"
    if status.st_size < watermark.offset:
        return f"it shrank below the {watermark.offset} bytes already read (truncated)"
    if digest(name, 0, watermark.head_len, fs, fd) != watermark.head_sha:
        return "its first line changed (rewritten)"
    tail_start = watermark.offset - watermark.tail_len
    if digest(name, tail_start, watermark.tail_len, fs, fd) != watermark.tail_sha:
        return "bytes before the watermark changed (rewritten)"
    return ""


def watermark_of(reading: Reading, fs: RetryingFS) -> Watermark:
    """Return the watermark that records what `reading` read (fingerprinted through its open file,
    before it is closed)."""
    name, status, index = reading.name, reading.status, reading.index
    offset = index.end
    head_len = min(index.span(0)[1], FINGERPRINT_BYTES) if len(index) else 0
    tail_len = min(offset, FINGERPRINT_BYTES)
    before = reading.state.watermark if reading.state is not None else None
    if reading.kind == "appended" and before is not None and before.head_len == head_len:
        head_sha = before.head_sha  # checked at the open; the read began after it
    else:
        head_sha = _fingerprint(reading, 0, head_len, fs)
    return Watermark(
        path=name,
        dev=status.st_dev,
        ino=status.st_ino,
        offset=offset,
        lines=len(index),
        head_len=head_len,
        head_sha=head_sha,
        tail_len=tail_len,
        tail_sha=_fingerprint(reading, offset - tail_len, tail_len, fs),
        size=status.st_size,
        mtime_ns=status.st_mtime_ns,
    )


def _fingerprint(reading: Reading, offset: int, length: int, fs: RetryingFS) -> str:
    """The sha256 of `length` bytes at `offset` of what `reading` read and found still there (read
    again only where it did not hold them)."""
    held = reading.held_bytes(offset, length)
    if held is not None:
        return hashlib.sha256(held).hexdigest()
    return digest(reading.name, offset, length, fs, reading.fd)


def digest(name: str, offset: int, length: int, fs: RetryingFS, fd: int | None) -> str:
    """The sha256 of `length` bytes of `name` (open on `fd`, when given) at `offset`."""
    if length <= 0:
        return hashlib.sha256(b"").hexdigest()
    data = read_span(name, offset, length, fs=fs, fd=fd)
    return hashlib.sha256(data).hexdigest()
