"""The daemon's archive over its life: opened (and checked) at start; when it cannot be (a full
disk, say), riffd works without it, says why once per reason (`riffd status` says it always), and
tries again at each rescan and settle job; once open again it is caught up from its own watermark.
When lines stop coming it is settled; it is closed last.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from riffd.archive.schema import ArchiveError
from riffd.archive.store import Archive
from riffd.daemon.archive_batch import ArchiveBatches
from riffd.daemon.counters import Counters
from riffd.daemon.disk_full import DiskWatch
from riffd.daemon.jobs import catch_up_archive, settle_archive
from riffd.state.store import StateStore

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines

ARCHIVE_COMPACT_SECONDS = 120.0  # loose packs compressed again at most this long per quiet period


class ArchiveSlot:
    """Holds the daemon's archive at `path` when it is open (`archive`, else None); its troubles go
    to `stats` (and a full disk to `room`)."""

    def __init__(self, path: Path, counters: Counters, disk: DiskWatch) -> None:
        self.path = path
        self.counters = counters
        self.disk = disk
        self.archive: Archive | None = None
        self._off = ""  # why the archive could not be opened, as the log said it

    def open(self, retry_every: float) -> bool:
        """Open (and check) the archive; return whether it is open now. When it cannot be, say so
        (the log once per reason: it is tried again every `retry_every` seconds)."""
        try:
            self.archive = Archive(self.path, heal=True, check=True)
        except (ArchiveError, sqlite3.Error, OSError) as exc:
            if str(exc) != self._off:
                log.error(
                    "the archive is off: %s; riffd tries to open it again at each rescan and "
                    "every %g s (archive.settle_after)",
                    exc,
                    retry_every,
                )
            self._off = str(exc)
            self.disk.ran_out(exc)
            self.counters.resolved("archive")
            self.counters.error(
                f"the archive is off: {exc}",
                self.disk.advice(exc, "see the message; repairs and reports go on without it"),
                about="archive",
            )
            return False
        self._off = ""
        self.counters.resolved("archive")
        return True

    def catch_up(
        self,
        store: StateStore | None,
        batches: ArchiveBatches | None = None,
        quiet_period: float | None = None,
    ) -> None:
        """Archive what the archive missed (read while it was off, or not written for a full
        disk, or waiting in the worker's `batches` when a daemon was killed, or a file's unfinished
        last line once it is quiet for `quiet_period`), from its own watermark."""
        if self.archive is not None and store is not None:
            catch_up_archive(self.archive, store, self.disk.ran_out, batches, quiet_period)

    def settle(self, settle_after: float, keep_going: Callable[[], bool]) -> None:
        """Once lines stopped coming for `settle_after` seconds (the worker made no progress since):
        compress the packs filled meanwhile for at most ARCHIVE_COMPACT_SECONDS, while nothing comes
        and `keep_going()`, then settle the open pack."""
        progress = self.counters.progress
        if self.archive is None or time.monotonic() - progress < settle_after:
            return
        deadline = time.monotonic() + ARCHIVE_COMPACT_SECONDS
        settle_archive(
            self.archive,
            lambda: (
                keep_going() and self.counters.progress == progress and time.monotonic() < deadline
            ),
        )

    def close(self) -> None:
        """Settle and close the archive (at shutdown)."""
        if self.archive is None:
            return
        try:
            self.archive.settle(optimize=False)
        except (sqlite3.Error, OSError) as exc:
            log.error("could not settle the archive: %s", exc)
        self.archive.close()
        self.archive = None
