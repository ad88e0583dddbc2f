"""Blobs: the bytes of the files kept whole, content-addressed, in checked zstd frames.

A blob is named by the SHA-256 of its bytes (the same bytes, an output read twice or a file in two
sessions, are stored once) and stored in frames of 1 MiB of it each, every frame with its checksum,
so a large file is never held whole in memory. A blob is written inside its caller's transaction
and only when the bytes written hash as named; reading one back checks each frame's checksum, then
the blob's hash and size: bytes that differ raise PackDamaged, never read as other bytes.
(riffd.archive.wholefiles records which versions of which paths a blob holds.)

A new blob's frames are written fast (zstd level 1, FAST_LEVEL), and compressed again at the packs'
settled level once the archive is quiet (riffd.archive.blobcompact); a blob's frames written afresh
(`riffd archive verify --fix`) are written at the settled level at once. Both are ordinary checked
zstd frames: a riffd from before reads either.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator

import zstandard

from riffd.archive.connection import ArchiveConnection
from riffd.archive.packs import SETTLED_LEVEL, PackDamaged
from riffd.fsio import RetryingFS

CHUNK_BYTES = 1024 * 1024
# As the open pack's segments (riffd.archive.packs.OPEN_LEVEL). On the small files of real sessions
# (3.7 MB): level 1 compresses about 390 MB/s, level 3 320 MB/s (6% smaller), level 6 100 MB/s (13%
# smaller), level 17 6 MB/s (19% smaller than level 1), which `compact` pays in the background
FAST_LEVEL = 1
_FAST = zstandard.ZstdCompressor(level=FAST_LEVEL, write_checksum=True)


class BlobStore:
    """The blobs of one archive connection (its lock held for every statement)."""

    def __init__(self, connection: ArchiveConnection) -> None:
        self._connection = connection

    def find(self, sha256: bytes) -> int | None:
        """The id of the blob of these bytes, or None."""
        with self._connection.lock:
            row = self._connection.db.execute(
                "SELECT id FROM blobs WHERE hash = ?", (sha256,)
            ).fetchone()
        return None if row is None else int(row[0])

    def store_file(
        self,
        fs: RetryingFS,
        fd: int,
        status: os.stat_result,
        sha256: bytes,
        blob: int | None,
    ) -> tuple[int | None, int]:
        """Inside the caller's write transaction: the bytes of the open file `fd` (`status` as it
        was hashed) as a new blob's frames (or, given `blob`, as that blob's frames afresh); return
        (its id, bytes stored), or (None, 0) when they no longer hash to `sha256` or the file
        changed meanwhile (the caller rolls back)."""
        again, blob = blob is not None, self._blob_for(sha256, status.st_size, blob)
        digest, stored = self._write_frames(
            blob, file_chunks(fs, fd, status.st_size), settled=again
        )
        if digest != sha256 or moved(status, fs.fstat(fd)):
            return None, 0
        self._set_stored(blob, stored)
        return blob, stored

    def store_chunks(self, sha256: bytes, size: int, chunks: Iterable[bytes], what: str) -> int:
        """Inside the caller's write transaction: `chunks` (bytes read back from another archive) as
        a new blob; return its id. Raise PackDamaged, naming `what`, when they do not hash to
        `sha256` (the caller's transaction then adds nothing)."""
        blob = self._blob_for(sha256, size, None)
        digest, stored = self._write_frames(blob, chunks)
        if digest != sha256:
            raise PackDamaged((), f"{what}: the bytes recovered are not the ones archived")
        self._set_stored(blob, stored)
        return blob

    def _blob_for(self, sha256: bytes, size: int, blob: int | None) -> int:
        """A new blob row for these bytes, or the frames of `blob` removed to be written afresh."""
        db = self._connection.db
        if blob is not None:
            db.execute("DELETE FROM blob_chunks WHERE blob = ?", (blob,))
            return blob
        new = db.execute(
            "INSERT INTO blobs(hash, size, stored) VALUES (?, ?, 0)", (sha256, size)
        ).lastrowid
        assert new is not None
        return new

    def _write_frames(
        self, blob: int, chunks: Iterable[bytes], *, settled: bool = False
    ) -> tuple[bytes, int]:
        """Compress each chunk as a frame of `blob` (fast, or at the settled level); return (the
        SHA-256 of the chunks, bytes stored)."""
        digest, stored = hashlib.sha256(), 0
        compressor = (
            zstandard.ZstdCompressor(level=SETTLED_LEVEL, write_checksum=True) if settled else _FAST
        )
        for number, chunk in enumerate(chunks):
            digest.update(chunk)
            frame = compressor.compress(chunk)
            stored += len(frame)
            self._connection.db.execute(
                "INSERT INTO blob_chunks(blob, number, data) VALUES (?, ?, ?)",
                (blob, number, frame),
            )
        return digest.digest(), stored

    def _set_stored(self, blob: int, stored: int) -> None:
        self._connection.db.execute("UPDATE blobs SET stored = ? WHERE id = ?", (stored, blob))

    def content(self, blob: int, sha256: bytes, size: int, what: str) -> Iterator[bytes]:
        """Yield the bytes of a blob, 1 MiB at a time, checked (each frame's checksum, then the
        hash and size); raise PackDamaged naming `what`, after the bytes read so far, when they
        cannot be read or differ."""
        digest, read, number = hashlib.sha256(), 0, 0
        while True:
            with self._connection.lock:
                row = self._connection.db.execute(
                    "SELECT data FROM blob_chunks WHERE blob = ? AND number = ?", (blob, number)
                ).fetchone()
            if row is None:
                break
            try:
                chunk = zstandard.ZstdDecompressor().decompress(row[0])
            except zstandard.ZstdError as exc:
                raise PackDamaged(
                    (), f"{what}: part {number + 1} of its stored bytes cannot be read ({exc})"
                ) from exc
            digest.update(chunk)
            read += len(chunk)
            number += 1
            yield chunk
        if digest.digest() != sha256 or read != size:
            raise PackDamaged(
                (),
                f"{what}: its stored bytes read back other than they were archived ({read} of "
                f"{size} bytes, or other bytes)",
            )

    def unreadable(self, sha256: bytes) -> bool:
        """Whether the blob of these bytes is held but cannot be read back whole."""
        with self._connection.lock:
            row = self._connection.db.execute(
                "SELECT id, size FROM blobs WHERE hash = ?", (sha256,)
            ).fetchone()
        if row is None:
            return False
        try:
            for _chunk in self.content(int(row[0]), sha256, int(row[1]), ""):
                pass
        except PackDamaged:
            return True
        return False


def file_chunks(fs: RetryingFS, fd: int, size: int) -> Iterator[bytes]:
    """The first `size` bytes of the open file `fd`, CHUNK_BYTES at a time (a read that fails with
    EIO is tried again as `fs` says); fewer when it is shorter now."""
    offset = 0
    while offset < size:
        chunk = fs.pread(fd, min(CHUNK_BYTES, size - offset), offset)
        if not chunk:
            return
        offset += len(chunk)
        yield chunk


def moved(before: os.stat_result, after: os.stat_result) -> bool:
    """Whether a file changed between two looks at it."""
    return (before.st_size, before.st_mtime_ns, before.st_ino) != (
        after.st_size,
        after.st_mtime_ns,
        after.st_ino,
    )
