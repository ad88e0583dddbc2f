"""Where the worker feeds a transcript's new complete lines: sinks of one shape (`LineSink`), each
fed every chunk in file order, then told the reading is done.

The index comes first: it parses each line once, and leaves the message records it parsed on the
chunk. The tracker looks for repeated tool calls among them. The archive takes every complete line
exactly once: the lines of a new or rewritten file before the state store commits the watermark past
them, the lines appended to a file it has a few seconds later in a batch (riffd.daemon.archive_batch);
what it has not taken when the watermark moved on (a batch still waiting when the daemon was killed,
a full disk, a locked database, lines read while it was off) it catches up from its own watermark,
read from the file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from riffd.archive.generation import still_appended
from riffd.archive.ingest import ingest_file
from riffd.archive.packs import PackDamaged
from riffd.archive.store import Archive
from riffd.daemon.archive_batch import ARCHIVE_ERRORS, ArchiveBatches, archive_lines
from riffd.daemon.reading import Chunk, Message, Reading
from riffd.fsio import RetryingFS
from riffd.state.store import StateStore
from riffd.tracker.tracker import RedundantCall, ToolCallTracker
from riffd.transcript.incremental import GrowingIndex

log = logging.getLogger("riffd.daemon.worker")  # the worker's own lines
HELD_BYTES = 8 << 20  # bytes of lines an ArchiveSink holds until the read is done, at most


class LineSink(Protocol):
    """What the worker feeds each chunk of a file's new complete lines to, in file order."""

    def feed(self, chunk: Chunk) -> None:
        """Take the chunk's lines."""

    def done(self) -> None:
        """The last chunk was fed."""


class IndexSink:
    """Adds each chunk to the file's index; with `keep_messages`, leaves the message records the
    index parsed on the chunk (the tracker's food: each line is parsed once)."""

    def __init__(self, growing: GrowingIndex, keep_messages: bool) -> None:
        self.growing = growing
        self.keep_messages = keep_messages

    def feed(self, chunk: Chunk) -> None:
        """Add the chunk's lines to the index."""
        growing = self.growing
        if self.keep_messages:
            messages = chunk.messages
            index = growing.index

            def observe(line: int, record: dict[str, Any]) -> None:
                messages.append(Message(line, record, index.session_id))

            growing.builder.observe = observe
        growing.add_lines(chunk.offset, chunk.lines, True)

    def done(self) -> None:
        """Let go of the chunk the observer held."""
        self.growing.builder.observe = None


class TrackerSink:
    """Feeds the tracker each message record of one file, keeping the redundant calls it finds (by
    the repeat's tool_use id). Lines read again from the start are fed again: the tracker ignores
    tool_use ids it has seen."""

    def __init__(self, tracker: ToolCallTracker, name: str) -> None:
        self.tracker = tracker
        self.name = name
        self.fallback = os.path.basename(name).removesuffix(".jsonl")
        self.repeats: dict[str, RedundantCall] = {}

    def feed(self, chunk: Chunk) -> None:
        """Feed the chunk's message records to the tracker."""
        for line, record, known_session in chunk.messages:
            session_id = record.get("sessionId")
            if not isinstance(session_id, str):
                session_id = known_session or self.fallback
            for found in self.tracker.feed(session_id, record, line=line, path=self.name):
                self.repeats[found.later_id] = found

    def done(self) -> None:
        """Sessions read from history are quiet: forget them at once."""
        self.tracker.prune(time.time())


@dataclass(frozen=True)
class ArchiveErrors:
    """What a failure of the archive does. Detection and repairs go on whatever the archive does;
    it catches up later from its own watermark (the daemon's rescan). The error goes to the log, to
    `on_write_error` (the daemon's DiskWatch: a full disk is followed by a rescan once there is room) and
    to the store's counters; a damaged archive is moved aside and a new one started at once."""

    store: StateStore
    on_write_error: Callable[[BaseException], object] | None = None

    def failed(self, archive: Archive, name: str, what: str, exc: Exception) -> None:
        """Say that the archive could not do `what` for the file `name`."""
        log.error("%s: could not %s: %s; the next rescan retries", name, what, exc)
        if self.on_write_error is not None:
            self.on_write_error(exc)
        self.store.bump({"archive.errors": 1})
        if archive.reopen_if_damaged(exc):
            self.store.bump({"archive.moved_aside": 1})

    def take_file(
        self, archive: Archive, path: Path, what: str, fs: RetryingFS
    ) -> Exception | None:
        """Archive `path` from the archive's own watermark to its end (an unfinished last line
        too), read through `fs`; return the error that prevented it, or None."""
        try:
            ingest_file(archive, path, fs=fs)
        except ARCHIVE_ERRORS as exc:
            self.failed(archive, str(path), what, exc)
            return exc
        return None


class ArchiveSink:
    """Feeds the archive each chunk of one file: a new generation of it from byte 0 when it was
    rewritten, with the file's modification time on the chunk that ends where the file ended. The
    lines are held until the read is `done` (the worker first checks that the file did not change
    under it: riffd.daemon.reading.changed_under_read), or handed over as they come past
    HELD_BYTES: those appended to a file the archive has go to `batches`
    (riffd.daemon.archive_batch), written a few seconds later with the appends that follow; the
    others are written then, after what waited for the file."""

    def __init__(
        self,
        archive: Archive,
        reading: Reading,
        errors: ArchiveErrors,
        batches: ArchiveBatches,
        fs: RetryingFS,
        *,
        new_generation: bool,
    ) -> None:
        self.archive, self.errors, self.batches, self.fs = archive, errors, batches, fs
        self.name, self.status = reading.name, reading.status
        self.end = reading.start
        self.rewritten = self._new_generation(reading, new_generation)
        self.appended = not self.rewritten and reading.state is not None
        # appended lines not handed to the batches yet: (offset, lines, mtime_ns), and their bytes
        self.held: list[tuple[int, list[bytes], int | None]] = []
        self.held_bytes = 0
        self.archived_at_once = False  # lines went to the archive as they came
        if not self.appended:
            batches.flush(self.name)  # the file's older lines first

    def _new_generation(self, reading: Reading, asked: bool) -> bool:
        """Whether the archive must start a new generation of the file (rewritten, by anyone, or
        `asked`: riffd's own rewrite, a read of it thrown away)."""
        if asked or reading.rewritten:
            return True
        if reading.state is None:  # new to the state store: new to the archive, or recreated?
            try:
                _generation, archived = self.archive.cursor(self.name)
                return archived > 0 and not still_appended(
                    self.archive, Path(self.name), archived, fs=self.fs, fd=reading.fd
                )
            except (sqlite3.Error, OSError, PackDamaged) as exc:
                # (whether the file goes on the archive's generation cannot be checked: a new one,
                # never lines glued to a version they did not follow)
                self.errors.failed(self.archive, self.name, "ask the archive about it", exc)
                return True
        return False

    def feed(self, chunk: Chunk) -> None:
        """Hold the chunk's lines until the read is done (`done`), or archive them with those held
        once they pass HELD_BYTES (a long read: in bounded memory)."""
        end = chunk.end
        mtime_ns = self.status.st_mtime_ns if end == self.status.st_size else None
        self.end = end
        self.held.append((chunk.offset, chunk.lines, mtime_ns))
        self.held_bytes += end - chunk.offset
        if self.held_bytes > HELD_BYTES:
            self.archived_at_once = True
            self._hand_over()

    def _hand_over(self) -> None:
        """Give the appended lines held to the batches; archive the others now (from the file
        itself when the archive lacks bytes before them)."""
        for offset, lines, mtime_ns in self.held:
            if self.appended:
                self.batches.add(self.name, offset, lines, mtime_ns)
            else:
                archive_lines(
                    self.archive,
                    self.errors.failed,
                    self.name,
                    offset,
                    lines,
                    mtime_ns,
                    rewritten=self.rewritten and offset == 0,
                )
        self.held, self.held_bytes = [], 0

    def done(self) -> None:
        """Hand the lines held over (`_hand_over`); record the file's modification time when what
        was read ends where the file did (lines waiting in a batch carry it)."""
        self._hand_over()
        if self.end != self.status.st_size or self.appended:
            return
        try:
            self.archive.note_mtime(self.name, self.end, self.status.st_mtime_ns)
        except sqlite3.Error as exc:
            self.errors.failed(self.archive, self.name, "record its modification time", exc)
