"""What a running daemon counts (the live part of its health report), the advice that goes with an
error, and the parts of the daemon that change while it runs (`DaemonNow`)."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from riffd.archive.store import Archive
    from riffd.config import Config
    from riffd.daemon.watcher import Watcher

ERRORS_KEPT = 50  # the newest errors a running daemon keeps for its report


def advice(why: str) -> str:
    """Plain-words advice for an error the worker met."""
    if "errno 5" in why or "Input/output error" in why:
        return "a cloud-synced folder? mark it 'always keep on this device'"
    if "Permission denied" in why:
        return "riffd needs read and write access to the transcript and its folder"
    return "run `riffd scan` on the file for details"


@dataclass
class Counters:
    """What the daemon counts while it runs (the live part of the health report). The worker, the
    scheduler's threads and the main thread all keep errors here: `errors` is only changed and
    copied under `_lock`."""

    started: float = field(default_factory=time.time)
    processed: int = 0
    rescans: int = 0
    progress: float = field(default_factory=time.monotonic)  # last time the worker finished an item
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=2000))
    errors: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=ERRORS_KEPT))
    errors_met: int = 0  # every error kept since the start, also those the deque has dropped or that were resolved
    last_reload: dict[str, Any] | None = None
    busy: bool = False  # the worker is processing a file
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def error(self, message: str, suggestion: str = "", about: str | None = None) -> None:
        """Keep an error (the last 50) with what to do about it, for the report's `errors`; `about`
        (a file's path, say) lets `resolved` take it back once that went well."""
        with self._lock:
            self.errors.append(
                {"time": time.time(), "message": message, "suggestion": suggestion, "about": about}
            )
            self.errors_met += 1

    def resolved(self, about: str) -> None:
        """Forget the errors about `about`: what they name went well since (a file looked at without
        error once a full disk was freed, a good configuration loaded), so the report no longer asks
        for attention to them."""
        with self._lock:
            if any(error.get("about") == about for error in self.errors):
                kept = [error for error in self.errors if error.get("about") != about]
                self.errors.clear()
                self.errors.extend(kept)

    def recent_errors(self) -> list[dict[str, Any]]:
        """A copy of the errors kept, oldest first."""
        with self._lock:
            return list(self.errors)


@dataclass(frozen=True)
class DaemonNow:
    """The parts of the daemon that change while it runs, as they are now: its configuration (a
    reload), its watcher (restarted by a reload), its archive (opened again after a failure), and
    whether it is still starting (its start-up pass) or stopping."""

    config: Config
    watcher: Watcher | None
    archive: Archive | None
    starting: bool
    stopping: bool
