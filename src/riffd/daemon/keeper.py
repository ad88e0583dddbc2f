"""The daemon's side of the files kept whole (riffd.archive.wholefiles): each new or changed one
taken into the archive as the worker takes an append, once it has settled, and a rescan that finds
what no event reported.

The watcher queues a session's file like a transcript
(riffd.daemon.watcher.TranscriptFilter.session_file); the worker thread hands it here. A file
modified less than `watcher.file_settle` seconds ago, or that changes while it is read, comes back
to the queue when it may have settled; one taken is hashed, and stored only when its bytes are new
(a new version of its path; the earlier ones stay). What cannot be read now is looked at again at
its next change or the next rescan, which compares every such file with the newest version the
archive holds (one stat each, no read). Nothing here runs per append to a transcript.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from riffd.archive.store import Archive
from riffd.daemon.watcher import TranscriptFilter
from riffd.fsio import REAL_FILES, RetryingFS
from riffd.state.store import StateStore
from riffd.transcript.sessionfiles import SessionFile, all_session_files

log = logging.getLogger(__name__)


@dataclass
class Keeper:
    """Takes sessions' files into the archive for the worker thread; `settle` is
    `watcher.file_settle`."""

    settle: float
    store: StateStore
    on_write_error: Callable[[BaseException], object] | None = None
    # the files, with the config's `retry` policy, as the worker reads transcripts
    fs: RetryingFS = REAL_FILES

    def process(self, archive: Archive | None, found: SessionFile) -> float | None:
        """Archive the file `found` if it settled and is new or changed; return when to look at it
        again (seconds), or None. Without an archive (off for now) nothing is done: the rescan that
        opens it again catches up."""
        if archive is None:
            return None
        try:
            # (riffd.archive retries with the policy itself: it is given the bare seam)
            kept = archive.whole.keep(
                found, settle=self.settle, fs=self.fs.seam, retry=self.fs.policy
            )
        except OSError as exc:
            log.warning(
                "%s: could not read it to archive it: %s; looked at again at its next change or rescan",
                found.path,
                exc,
            )
            self.store.bump({"errors.read": 1})
            return None
        except sqlite3.Error as exc:
            log.error("%s: could not archive it: %s; the next rescan retries", found.path, exc)
            if self.on_write_error is not None:
                self.on_write_error(exc)
            self.store.bump({"archive.errors": 1})
            if archive.reopen_if_damaged(exc):
                self.store.bump({"archive.moved_aside": 1})
            return None
        if kept.outcome in ("stored", "known"):
            self.store.bump(
                {"archive.files_kept": 1, "archive.file_bytes_stored": kept.stored_bytes}
            )
            log.info(
                "%s: archived whole (%s, version %s, %d bytes stored)",
                found.path,
                found.kind,
                kept.version,
                kept.stored_bytes,
                extra={
                    "path": str(found.path),
                    "kind": found.kind,
                    "version": kept.version,
                    "stored_bytes": kept.stored_bytes,
                },
            )
        return kept.retry_after


def reconcile_files(
    transcript_filter: TranscriptFilter,
    archive: Archive | None,
    on_change: Callable[[str], None],
    on_error: Callable[[OSError], None] | None = None,
) -> int:
    """Queue every file of a session kept whole that the archive does not hold as it is now (size,
    modification time and mode of its newest version); return how many. One stat per file, no
    reads."""
    if archive is None:
        return 0
    held = archive.whole.held()
    queued = 0
    roots = [root for root in transcript_filter.roots if os.path.isdir(root)]
    for found in all_session_files(roots, transcript_filter.configs, on_error):
        try:
            status = os.lstat(found.path)
        except OSError:
            continue
        if held.get(str(found.path)) != (status.st_size, status.st_mtime_ns, status.st_mode) and (
            transcript_filter.session_file(found.path) is not None
        ):
            on_change(str(found.path))
            queued += 1
    return queued
