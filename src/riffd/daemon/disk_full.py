"""The state folder's disk running full, as the daemon lives through it.

Every write to `state.db` and `archive.db` may meet a full disk (SQLite's "database or disk is
full", ENOSPC). That is no damage: what was committed stays and the failed step is rolled back
whole. `DiskWatch` keeps what the daemon does about it in one place: the log says the live figures cannot
be stored once (then every STILL_FAILING_LOG_SECONDS, not at every tick), and once the disk has room
again the daemon rescans at once, so the files whose findings or lines could not be stored meanwhile
are looked at and archived again without waiting for the scheduled rescan.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from riffd.database import FULL_BELOW, free_bytes, full_disk_note, is_full_error

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines

# while the live figures cannot be stored, the log says so this often
STILL_FAILING_LOG_SECONDS = 600.0
# after a full-disk error, the disk's room is looked at this often at first,
FIRST_LOOK_SECONDS = 5.0
LAST_LOOK_SECONDS = 600.0  # doubling after each rescan that met a full disk again, up to this
# a full-disk error after this long without one starts again from FIRST_LOOK_SECONDS
QUIET_SECONDS = 600.0


class DiskWatch:
    """Whether the state folder's disk ran full, what the log says about it, and when to rescan."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # ran_out comes from the worker, the scheduler and the main thread
        self._lock = threading.Lock()
        # a write failed for a full disk and no rescan has run since room came back
        self._wanted = False
        self._wait = FIRST_LOOK_SECONDS
        self._looked = 0.0
        self._last_full = float("-inf")
        self.unstored_since: float | None = None  # when storing the live figures began to fail
        self._unstored_logged = 0.0

    def is_full(self, exc: BaseException, written: Path | None = None) -> bool:
        """Whether `exc` comes of the state folder's disk being full (riffd.database.is_full_error):
        a database error (state.db and archive.db live there), or an OSError of a write to the
        folder `written` when that is on the same disk (the reports folder on another disk is the
        caller's to name)."""
        if isinstance(exc, OSError):
            return written is not None and _same_disk(written, self.folder) and is_full_error(exc)
        return is_full_error(exc, self.folder)

    def advice(self, exc: BaseException, otherwise: str, written: Path | None = None) -> str:
        """What to do about `exc`: free space, when it is the state folder's disk that is full; else
        `otherwise`."""
        if self.is_full(exc, written):
            return f"{full_disk_note(self.folder)}: free some space there (riffd goes on by itself and catches up)"
        return otherwise

    def ran_out(self, exc: BaseException, written: Path | None = None) -> bool:
        """Note a failed write (to `written`, when not a database); return whether the state
        folder's disk is full (then a rescan follows once there is room)."""
        if not self.is_full(exc, written):
            return False
        with self._lock:
            now = time.monotonic()
            if now - self._last_full > QUIET_SECONDS:
                self._wait = FIRST_LOOK_SECONDS
            self._last_full, self._wanted = now, True
        return True

    def back(self) -> int | None:
        """Return the bytes free when the disk has room again after a full-disk error and a rescan
        is due (once per wait, the wait doubling each time), else None."""
        with self._lock:
            now = time.monotonic()
            if not self._wanted or now - self._looked < self._wait:
                return None
            self._looked = now
            free = free_bytes(self.folder)
            if free is None or free < FULL_BELOW:
                return None
            self._wanted = False
            self._wait = min(self._wait * 2, LAST_LOOK_SECONDS)
            return free

    def unstored(self, exc: BaseException) -> bool:
        """The live figures could not be stored: log it at once, then every
        STILL_FAILING_LOG_SECONDS; return True the first time (the caller keeps the error for the
        report)."""
        self.ran_out(exc)
        cause = self.advice(exc, "see the errors before this")
        now = time.monotonic()
        if self.unstored_since is None:
            self.unstored_since = self._unstored_logged = now
            log.error(
                "could not store the live figures: %s; %s; `riffd status` shows older ones until then",
                exc,
                cause,
            )
            return True
        if now - self._unstored_logged >= STILL_FAILING_LOG_SECONDS:
            self._unstored_logged = now
            log.error(
                "the live figures still cannot be stored (for %.0f s): %s; %s",
                now - self.unstored_since,
                exc,
                cause,
            )
        return False

    def stored(self) -> bool:
        """The live figures were stored: return True (and log it) when they could not be before."""
        if self.unstored_since is None:
            return False
        log.info(
            "the live figures are stored again (they could not be for %.0f s)",
            time.monotonic() - self.unstored_since,
        )
        self.unstored_since = None
        return True


def _same_disk(folder: Path, other: Path) -> bool:
    try:
        return os.stat(folder).st_dev == os.stat(other).st_dev
    except OSError:
        return False
