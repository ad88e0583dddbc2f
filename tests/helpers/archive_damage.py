"""Damaging an archive as a disk would: bytes of a stored frame changed in place, through SQLite, for
tests of what riffd reads back and what it leaves alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def flip_frame_byte(archive_path: Path, blob: int, number: int = 0) -> bytes:
    """Flip every bit of the middle byte of frame `number` of `blob` (a whole file kept) in the
    archive at `archive_path`; return the frame as it is now stored."""
    with sqlite3.connect(archive_path) as db:
        (frame,) = db.execute(
            "SELECT data FROM blob_chunks WHERE blob = ? AND number = ?", (blob, number)
        ).fetchone()
        damaged = bytearray(frame)
        damaged[len(damaged) // 2] ^= 0xFF
        db.execute(
            "UPDATE blob_chunks SET data = ? WHERE blob = ? AND number = ?",
            (bytes(damaged), blob, number),
        )
    return bytes(damaged)
