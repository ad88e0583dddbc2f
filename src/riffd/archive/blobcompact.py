"""The blobs written fast (riffd.archive.blobs) compressed again at the packs' settled level, once
the archive is quiet: at the end of `riffd archive ingest`, by `riffd archive compact`, and by the
daemon after `archive.settle_after` (for at most its two minutes each time).

Blobs are taken in the order of their ids, which only grow (no blob is ever deleted, and an id is
taken under the write lock): `blobs_settled` in `meta` is the last blob settled, and every blob
after it was written fast. Each frame is read, compressed outside the lock, checked to decompress to
the same bytes, and stored in a transaction of its own only when it is smaller and the frame stored
is still the one read (`replace_frame`): a kill -9 leaves either frame, both the same bytes. A
compaction stopped inside a blob (its time was up) records where (`blobs_settling`), so the next
goes on from there instead of starting the blob again: a blob longer than one quiet period's time
would otherwise never be settled. A damaged archive replaced by a new one meanwhile
(`Archive.reopen_if_damaged`) ends the compaction without recording anything in the new one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import zstandard

from riffd.archive.connection import ArchiveConnection
from riffd.archive.packs import SETTLED_LEVEL

SETTLED_KEY = "blobs_settled"  # in `meta`: the last blob settled
POSITION_KEY = (
    "blobs_settling"  # in `meta`: "<blob> <frame>", where a compaction stopped inside one
)


@dataclass(frozen=True)
class Compacted:
    """What one compaction did."""

    blobs: int  # blobs settled: every frame of them looked at
    frames: int  # frames stored smaller
    saved: int  # bytes fewer
    left: int  # blobs still written fast


class BlobCompaction:
    """The compaction of the blobs of one archive connection (its lock held for every statement)."""

    def __init__(self, connection: ArchiveConnection) -> None:
        self._connection = connection

    def waiting(self) -> int:
        """How many blobs wait to be compressed at the settled level."""
        with self._connection.lock:
            return int(
                self._connection.db.execute(
                    "SELECT COUNT(*) FROM blobs WHERE id > ?", (self._meta(SETTLED_KEY) or 0,)
                ).fetchone()[0]
            )

    def _meta(self, key: str) -> int | tuple[int, int] | None:
        row = self._connection.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        numbers = tuple(int(part) for part in str(row[0]).split())
        return numbers[0] if len(numbers) == 1 else (numbers[0], numbers[1])

    def _next(self) -> tuple[int, int] | None:
        """The next blob to settle and the frame to begin at, or None."""
        with self._connection.lock:
            settled = self._meta(SETTLED_KEY)
            row = self._connection.db.execute(
                "SELECT MIN(id) FROM blobs WHERE id > ?", (settled or 0,)
            ).fetchone()
            position = self._meta(POSITION_KEY)
        if row[0] is None:
            return None
        blob = int(row[0])
        return blob, position[1] if isinstance(position, tuple) and position[0] == blob else 0

    def compact(
        self,
        keep_going: Callable[[], bool] = lambda: True,
        progress: Callable[[int, int], None] | None = None,
    ) -> Compacted:
        """Compress the frames of the blobs written fast again at the settled level, oldest blob
        first, while `keep_going()` (asked before each frame); `progress(blobs settled, blobs
        waiting at the start)` after each blob."""
        blobs = frames = saved = 0
        total = self.waiting()
        settled = zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True)
        db, last = self._connection.db, None
        while keep_going() and (found := self._next()) is not None:
            blob, number = found
            if blob == last:  # the mark did not move on (the archive was replaced): never loop
                break
            finished = False
            while keep_going():
                smaller = self._tighten(settled, blob, number)
                if smaller is None:  # no such frame: every frame of the blob was looked at
                    finished = True
                    break
                frames, saved, number = frames + (smaller > 0), saved + smaller, number + 1
            with self._connection.writing():
                if self._connection.db is not db:
                    break  # a new archive: none of this is about it
                if finished:  # (another process may have settled further meanwhile)
                    self._connection.db.execute(
                        "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                        "SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
                        (SETTLED_KEY, str(blob)),
                    )
                else:
                    self._connection.db.execute(
                        "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                        (POSITION_KEY, f"{blob} {number}"),
                    )
            if not finished:
                break
            blobs, last = blobs + 1, blob
            if progress is not None:
                progress(blobs, total)
        if frames:
            with self._connection.lock:
                # the pages the old frames left given back (executescript: execute frees one page)
                self._connection.db.executescript("PRAGMA incremental_vacuum;")
        return Compacted(blobs, frames, saved, self.waiting())

    def _tighten(self, settled: zstandard.ZstdCompressor, blob: int, number: int) -> int | None:
        """Compress frame `number` of `blob` again with `settled` and store the result when it
        reads back as the same bytes and is smaller (`replace_frame`); return the bytes saved (0:
        kept as it was), or None when the blob has no such frame. A frame that cannot be read is
        left as it is (`riffd archive verify` names it)."""
        with self._connection.lock:
            row = self._connection.db.execute(
                "SELECT data FROM blob_chunks WHERE blob = ? AND number = ?", (blob, number)
            ).fetchone()
        if row is None:
            return None
        frame = bytes(row[0])
        try:
            chunk = zstandard.ZstdDecompressor().decompress(frame)
            tight = settled.compress(chunk)
            if len(tight) >= len(frame) or zstandard.ZstdDecompressor().decompress(tight) != chunk:
                return 0
        except zstandard.ZstdError:
            return 0
        return len(frame) - len(tight) if self.replace_frame(blob, number, frame, tight) else 0

    def replace_frame(self, blob: int, number: int, frame: bytes, tight: bytes) -> bool:
        """In a transaction of its own: store `tight` as frame `number` of `blob`, and the blob's
        `stored` bytes less the difference, only if `frame` is still the frame stored there (the
        frames written afresh meanwhile stay); return whether it was stored."""
        with self._connection.writing():
            db = self._connection.db
            if not db.execute(
                "SELECT 1 FROM blob_chunks WHERE blob = ? AND number = ? AND data = ?",
                (blob, number, frame),
            ).fetchone():
                return False
            # A new row, not the old one updated: rows that shrank in place would leave their pages
            # as full as before (a table's rows lie in the order of their rowids), where rows moved
            # to the end leave the old pages empty, given back at the end of `compact`
            db.execute("DELETE FROM blob_chunks WHERE blob = ? AND number = ?", (blob, number))
            db.execute(
                "INSERT INTO blob_chunks(blob, number, data) VALUES (?, ?, ?)",
                (blob, number, tight),
            )
            db.execute(
                "UPDATE blobs SET stored = stored - ? WHERE id = ?", (len(frame) - len(tight), blob)
            )
        return True
