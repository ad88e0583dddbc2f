"""The daemon's side of the files kept whole (riffd.archive.wholefiles): each new or changed one
taken into the archive as the worker takes an append, once it has settled, and a rescan that finds
what no event reported.

The watcher queues a session's file like a transcript
(riffd.daemon.watcher.TranscriptFilter.session_file); the worker thread hands it here. A file has
settled when it has not changed for `watcher.file_settle` seconds: its modification time says so when
that is longer ago, else two looks that far apart find the same size, time and inode (a time ahead of
the clock, or a file still written to, is looked at again then). One that changes while it is read
comes back to the queue too; one taken is hashed, and stored only when its bytes are new (a new
version of its path; the earlier ones stay). What cannot be read now is looked at again at its next
change or the next rescan, which compares every such file with the newest version the archive holds
(one stat each, no read). A symlinked folder riffd does not follow
(riffd.claude_code.session_files.linked_folder) is named once in the log. Nothing here runs per append
to a transcript.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from riffd.archive.store import Archive
from riffd.claude_code.session_files import (
    SessionFile,
    all_session_files,
    file_state,
    linked_folder,
)
from riffd.daemon.watcher import TranscriptFilter
from riffd.fsio import REAL_FILES, RetryingFS
from riffd.state.store import StateStore

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
    # path -> (size, mtime_ns, inode) at the first look that found it so, and when (monotonic)
    looks: dict[str, tuple[tuple[int, int, int], float]] = field(default_factory=dict)
    links: set[Path] = field(default_factory=set)  # the symlinks named in the log so far

    def process(self, archive: Archive | None, found: SessionFile) -> float | None:
        """Archive the file `found` if it settled and is new or changed; return when to look at it
        again (seconds), or None. Without an archive (off for now) nothing is done: the rescan that
        opens it again catches up."""
        if archive is None:
            return None
        wait = self.settling(found.path)
        if wait is not None:
            return wait
        try:
            kept = archive.whole.keep(found, fs=self.fs)
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
        if kept.outcome == "linked":
            self.note_link(linked_folder(found) or found.path)
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
        return max(self.settle, 0.5) if kept.outcome == "changing" else None

    def settling(self, path: Path, now: float | None = None) -> float | None:
        """Return how long to wait before `path` may have settled (see the module), or None when it
        has (or cannot be looked at: `keep` says why). `now`: the monotonic time of this look."""
        key = str(path)
        try:
            status = os.lstat(path)
        except OSError:
            self.looks.pop(key, None)
            return None
        age = time.time() - status.st_mtime_ns / 1e9
        if age >= self.settle:  # (never for a time ahead of the clock: a negative age)
            self.looks.pop(key, None)
            return None
        now = time.monotonic() if now is None else now
        state = (status.st_size, status.st_mtime_ns, status.st_ino)
        first = self.looks.get(key)
        if first is None or first[0] != state:
            self.looks[key] = (state, now)
            return max(self.settle - age, 0.05) if age >= 0 else self.settle
        if now - first[1] >= self.settle:
            del self.looks[key]
            return None
        return max(self.settle - (now - first[1]), 0.05)

    def note_link(self, link: Path) -> None:
        """Name a symlink riffd does not follow in a session's folders, once."""
        if link not in self.links:
            self.links.add(link)
            log.warning(
                "%s: a symlink (to %s) in a session's folders; not followed: riffd archives only the "
                "files in the sessions' own folders",
                link,
                os.path.realpath(link),
            )


def reconcile_files(
    transcript_filter: TranscriptFilter,
    archive: Archive | None,
    on_change: Callable[[str], None],
    on_error: Callable[[OSError], None] | None = None,
    on_link: Callable[[Path], None] | None = None,
) -> int:
    """Queue every file of a session kept whole that the archive does not hold as it is now (size,
    modification time and kept mode of its newest version); return how many. One stat per file, no
    reads. The symlinks met that are not followed go to `on_link`."""
    if archive is None:
        return 0
    held = archive.versions.held()
    queued = 0
    roots = [root for root in transcript_filter.roots if os.path.isdir(root)]
    for found in all_session_files(roots, transcript_filter.configs, on_error, on_link):
        try:
            status = os.lstat(found.path)
        except OSError:
            continue
        if held.get(str(found.path)) != file_state(status) and (
            transcript_filter.session_file(found.path) is not None
        ):
            on_change(str(found.path))
            queued += 1
    return queued
