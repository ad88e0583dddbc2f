"""The worker's cache of transcript indexes: what lets an append be read from its watermark, not
from the start."""

from __future__ import annotations

import time
from collections import OrderedDict

from riffd.transcript.incremental import GrowingIndex

# lines of indexes kept in memory (about 230 bytes a line, 60 more for its detector)
INDEX_CACHE_LINES = 300_000
ACTIVE_SECONDS = 600.0  # an index used this recently is never evicted (its session is active)


class IndexCache:
    """Indexes of recently processed files, bounded by `max_lines` lines in all.

    Past the budget the least recently used indexes go first, but never one used within
    `active_seconds`: evicting a live session's index would make each of its appends read the whole
    file again (and two active files would evict each other on every append). So memory stays
    bounded by the sessions that are actually active, plus the budget.
    """

    def __init__(
        self, max_lines: int = INDEX_CACHE_LINES, active_seconds: float = ACTIVE_SECONDS
    ) -> None:
        self.max_lines = max_lines
        self.active_seconds = active_seconds
        # path -> (index, when last used, its lines when it was put: an index grows in place as
        # appends are read, and is counted again when put back)
        self._indexes: OrderedDict[str, tuple[GrowingIndex, float, int]] = OrderedDict()
        self._lines = 0

    def get(self, path: str, end: int) -> GrowingIndex | None:
        """Return the index of `path` if it covers exactly the bytes up to `end`, else None."""
        entry = self._indexes.get(path)
        if entry is None or entry[0].end != end:
            return None
        self._indexes[path] = (entry[0], time.monotonic(), entry[2])
        self._indexes.move_to_end(path)
        return entry[0]

    def put(self, path: str, index: GrowingIndex) -> None:
        """Keep `index` for `path`, then evict least recently used, inactive indexes past the line
        budget."""
        self.drop(path)
        now = time.monotonic()
        self._indexes[path] = (index, now, len(index))
        self._lines += len(index)
        if self._lines <= self.max_lines:
            return
        for name, (_old, used, counted) in list(self._indexes.items()):
            if self._lines <= self.max_lines:
                break
            if name != path and now - used >= self.active_seconds:
                del self._indexes[name]
                self._lines -= counted

    def drop(self, path: str) -> None:
        """Forget the index of `path`."""
        entry = self._indexes.pop(path, None)
        if entry is not None:
            self._lines -= entry[2]

    def clear(self) -> None:
        """Forget every index."""
        self._indexes.clear()
        self._lines = 0

    @property
    def lines(self) -> int:
        """Lines held in all cached indexes."""
        return self._lines
