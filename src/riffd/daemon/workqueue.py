"""A coalescing work queue keyed by path: a burst of events on one file is processed once.

Each `put` pushes the file's due time to `debounce` seconds after the latest event, but never past
`max_delay` after the first one, so a file written continuously is still looked at regularly. The
time of the first event is kept, so the worker can report latency from event to done. A path the
worker has looked at and queues `again` (a repair waiting for its session to go quiet, maybe for
hours) is told apart from one not looked at yet (`unread`: what the start-up pass waits for).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class _Entry:
    due: float
    first_event: float
    again: bool = False  # looked at before: queued for another look


class WorkQueue:
    """Paths waiting to be processed, each once, in order of due time."""

    def __init__(self, debounce: float, max_delay_factor: float = 10.0) -> None:
        self._entries: dict[str, _Entry] = {}
        self._changed = threading.Condition()
        self.debounce = debounce
        self.max_delay_factor = max_delay_factor
        self.puts = 0

    def put(self, path: str, delay: float | None = None, *, again: bool = False) -> None:
        """Queue `path` after the debounce (or exactly `delay` seconds from now, for a scheduled
        retry); `again`: the worker has looked at it and wants another look."""
        now = time.monotonic()
        with self._changed:
            self.puts += 1
            entry = self._entries.get(path)
            before = None if entry is None else entry.due
            if delay is not None:
                due = now + delay
                if entry is None or due < entry.due:
                    self._entries[path] = _Entry(
                        due,
                        entry.first_event if entry else now,
                        again and (entry is None or entry.again),
                    )
            elif entry is None:
                self._entries[path] = _Entry(now + self.debounce, now, again)
            else:
                # Trailing debounce, capped: a new event also brings a far-off scheduled retry
                # forward.
                entry.due = min(
                    now + self.debounce, entry.first_event + self.debounce * self.max_delay_factor
                )
            # A waiting `get` wakes at the due time it saw, or earlier when told: told only when a
            # path came due sooner than before (the second event of an append, which only pushes
            # its due time on, wakes nobody)
            if before is None or self._entries[path].due < before:
                self._changed.notify()

    def get(self, timeout: float, stop: threading.Event | None = None) -> tuple[str, float] | None:
        """Wait up to `timeout` seconds for the next due path; return (path, time of its first
        event) or None."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                if stop is not None and stop.is_set():
                    return None
                now = time.monotonic()
                if self._entries:
                    path, entry = min(self._entries.items(), key=lambda item: item[1].due)
                    if entry.due <= now:
                        del self._entries[path]
                        return path, entry.first_event
                    wait = min(entry.due, deadline) - now
                else:
                    wait = deadline - now
                if wait <= 0:
                    return None
                self._changed.wait(wait)

    def take_all(self) -> list[str]:
        """Remove and return every queued path, due or not (for draining at shutdown)."""
        with self._changed:
            paths = sorted(self._entries, key=lambda path: self._entries[path].due)
            self._entries.clear()
            return paths

    def wake(self) -> None:
        """Wake a waiting `get` (so it can see a stop request)."""
        with self._changed:
            self._changed.notify_all()

    def unread(self) -> int:
        """How many queued paths are not queued `again`: not looked at since they were queued."""
        with self._changed:
            return sum(1 for entry in self._entries.values() if not entry.again)

    def __len__(self) -> int:
        with self._changed:
            return len(self._entries)
