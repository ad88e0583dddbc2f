"""Lines appended to a known transcript go to the archive a few seconds later, in one transaction for
all the appends of those seconds.

An archive commit per append cost the daemon most of its CPU per appended line: each one writes
some 17 database pages and compresses the open pack's segment again, whatever the append's size.
The lines wait in memory (`ArchiveBatches`) while the state store's watermark moves past them, as
it does past lines the archive could not take: a daemon killed meanwhile archives them at its next
start or rescan, from the archive's own watermark (riffd.daemon.jobs.catch_up_archive), read from
the file, which still holds them. A waiting batch is written before anything else is done with its
file (a rewrite read, a repair: riffd.daemon.worker), when the file is gone (its lines live only
here then), when it holds MAX_BYTES, when it is `delay` seconds old, and when the daemon stops.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from riffd.archive.ingest import ingest_file
from riffd.archive.packs import PackDamaged
from riffd.archive.store import Archive, ArchiveGap, ArchiveMismatch, ArchiveMovedOn
from riffd.fsio import REAL_FILES, FileSystem

log = logging.getLogger("riffd.daemon.worker")  # the worker's own lines

ARCHIVE_ERRORS = (sqlite3.Error, OSError, ArchiveGap, ArchiveMovedOn, PackDamaged)
MAX_BYTES = 1 << 20  # a batch is written once it holds this many bytes of lines


@dataclass
class Waiting:
    """A file's lines waiting for the archive: consecutive whole lines from byte `offset` to `end`
    that follow the end of the archive's `generation` of the file, the file's modification time when
    they ended it (else None), waiting since `since`."""

    offset: int
    end: int
    since: float
    generation: int
    lines: list[bytes] = field(default_factory=list)
    mtime_ns: int | None = None


def archive_lines(
    archive: Archive,
    failed: Callable[[Archive, str, str, Exception], object],
    name: str,
    offset: int,
    lines: list[bytes],
    mtime_ns: int | None,
    *,
    rewritten: bool = False,
    generation: int | None = None,
) -> None:
    """Archive `lines` of `name` from byte `offset` (`rewritten`: as a new generation from byte 0;
    `generation`: the end of that generation, where the archive had it; from the file itself when
    the archive lacks bytes before them); an error goes to `failed` (the archive catches up
    later)."""
    expect = None if generation is None else (generation, offset)
    try:
        try:
            archive.add_lines(
                name, offset, lines, rewritten=rewritten, mtime_ns=mtime_ns, expect=expect
            )
        except ArchiveMovedOn:
            assert generation is not None
            _kept_apart(archive, name, offset, lines, generation)
        # bytes read before were not archived then, or the archive holds others there: from its
        # watermark
        except ArchiveGap as gap:
            added = ingest_file(archive, Path(name))
            log.info(
                "%s: %s; archived %d line(s) from the file",
                name,
                (
                    f"the archive holds other bytes about byte {gap.offset} (the file was "
                    "rewritten, or archived by another process)"
                    if isinstance(gap, ArchiveMismatch)
                    else f"the archive lacked bytes {gap.archived} to {gap.offset} (not archived "
                    "when they were read)"
                ),
                added,
            )
    except ARCHIVE_ERRORS as exc:
        failed(archive, name, f"archive lines at byte {offset}", exc)


def _kept_apart(
    archive: Archive, name: str, offset: int, lines: list[bytes], generation: int
) -> None:
    """Lines that waited for the end of `generation` of `name` while another process archived the
    file further or anew (`riffd archive ingest`): when that generation holds them there, nothing is
    left to do; when it holds their start and is still the latest, the rest follows; else the file
    as it was with them (that generation up to `offset`, then the lines) is kept as an older
    generation, so no line read is lost."""
    file_id = archive.file_id(name)
    if file_id is None:  # (a new archive since: it takes the file whole)
        ingest_file(archive, Path(name))
        return
    before = b"".join(archive.iter_file(file_id, generation=generation))
    held, waited = before[offset:], b"".join(line + b"\n" for line in lines)
    if held.startswith(waited):
        return
    if waited.startswith(held) and archive.cursor(name) == (generation, len(before)):
        archive.add_lines(name, offset, lines, expect=(generation, len(before)))
        return
    archive.add_older_generation(name, before[:offset].split(b"\n")[:-1] + lines)
    log.warning(
        "%s: %d appended line(s) waited for the archive while another process archived the file "
        "as rewritten since; the file as it was with them is kept as an older generation",
        name,
        len(lines),
    )


class ArchiveBatches:
    """The lines waiting for the archive, per file; `archive()` is the archive at the time they are
    written (None: it is off, and the catch-up archives them once it is on again), `failed` is told
    each write that failed. `delay` 0 writes each append at once. The worker's thread takes and writes
    the batches; the catch-up (a scheduler thread) writes a file's batch before it reads the file
    (`written_first`), under the same lock, so it never archives a rewrite past lines still waiting."""

    def __init__(
        self,
        delay: float,
        archive: Callable[[], Archive | None],
        failed: Callable[[Archive, str, str, Exception], object],
        fs: Callable[[], FileSystem] = lambda: REAL_FILES,
    ) -> None:
        self.delay = delay
        self._archive, self._failed = archive, failed
        self._fs = fs  # what the worker reads files through (its retries on cloud-sync errors)
        self._waiting: dict[str, Waiting] = {}
        # file -> the archive's cursor (generation, bytes) once checked against the file (`_start`)
        self._checked: dict[str, tuple[int, int]] = {}
        # and once that check failed (the file's lines wait for the catch-up)
        self._unchecked: dict[str, tuple[int, int]] = {}
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, name: str, offset: int, lines: list[bytes], mtime_ns: int | None) -> None:
        """Take the whole `lines` of `name` from byte `offset` (`mtime_ns`: the file's modification
        time when they end it); what waited for the file before is written first unless these lines
        follow it."""
        with self._lock:
            waiting = self._waiting.get(name)
            if waiting is not None and waiting.end != offset:
                self.flush(name)
                waiting = None
            if waiting is None:
                waiting = self._start(name, offset, lines, mtime_ns)
                if waiting is None:
                    return
            waiting.lines.extend(lines)
            waiting.end += sum(map(len, lines)) + len(lines)
            waiting.mtime_ns = mtime_ns
            if self.delay <= 0 or waiting.end - waiting.offset >= MAX_BYTES:
                self.flush(name)

    def _start(
        self, name: str, offset: int, lines: list[bytes], mtime_ns: int | None
    ) -> Waiting | None:
        """A new batch of `name` from byte `offset`, when the archive holds the file up to there;
        else the lines are written at once (None), as they come."""
        archive = self._archive()
        if archive is None:
            return None
        try:
            generation, archived = archive.cursor(name)
        except ARCHIVE_ERRORS:
            generation, archived = -1, -1
        if archived > offset and self._checked.get(name) != (generation, archived):
            # The archive holds more of the file than the worker read: lines archived before a
            # kill, or a read thrown away (riffd.daemon.reading.changed_under_read) past
            # HELD_BYTES, which may be a splice. The lines go on that generation only when the file
            # holds every byte of it (ingest_file: else the file as it is, a new generation). When
            # that cannot be checked now, none go: the catch-up archives the file from the
            # archive's watermark, checked, once it can (the same cursor is not tried again here).
            if self._unchecked.get(name) == (generation, archived):
                return None
            try:
                added = ingest_file(archive, Path(name), fs=self._fs())
                self._checked[name] = archive.cursor(name)
            except ARCHIVE_ERRORS as exc:
                self._unchecked[name] = (generation, archived)
                self._failed(archive, name, "check the archive against the file", exc)
                return None
            self._unchecked.pop(name, None)
            log.info("%s: checked the archive against the file: %d line(s) added", name, added)
        if archived != offset or self.delay <= 0:
            archive_lines(archive, self._failed, name, offset, lines, mtime_ns)
            return None
        self._checked.pop(name, None)
        self._unchecked.pop(name, None)
        waiting = self._waiting[name] = Waiting(offset, offset, time.monotonic(), generation)
        return waiting

    def flush(self, name: str) -> None:
        """Write what waits for `name` now."""
        with self._lock:
            waiting = self._waiting.pop(name, None)
            archive = self._archive()
            if waiting is None or archive is None or not waiting.lines:
                return
            archive_lines(
                archive,
                self._failed,
                name,
                waiting.offset,
                waiting.lines,
                waiting.mtime_ns,
                generation=waiting.generation,
            )

    @contextmanager
    def written_first(self, name: str) -> Iterator[None]:
        """Write what waits for `name`, and keep the worker from taking more of it until the block
        ends."""
        with self._lock:
            self.flush(name)
            yield

    def flush_due(self) -> None:
        """Write the batches that waited `delay` seconds."""
        if not self._waiting:
            return
        due = time.monotonic() - self.delay
        with self._lock:
            for name in [name for name, waiting in self._waiting.items() if waiting.since <= due]:
                self.flush(name)

    def flush_all(self) -> None:
        """Write every batch (the daemon stops)."""
        with self._lock:
            for name in list(self._waiting):
                self.flush(name)
