"""Back-filling the archive from transcript files: what `riffd archive ingest`, `fix` and the daemon's catch-up use."""

from __future__ import annotations

from pathlib import Path

from riffd.archive.store import Archive
from riffd.transcript.reader import iter_chunks, read_span


def ingest_file(archive: Archive, path: Path) -> int:
    """Back-fill one transcript from where the archive stopped (from the start, as a new generation, when the
    file was rewritten since); return the lines added. Only complete lines are archived."""
    _generation, archived = archive.cursor(str(path))
    rewritten = archived > 0 and not still_appended(archive, path, archived)
    added = 0
    for offset, lines, terminated in iter_chunks(path, start=0 if rewritten else archived):
        # An unterminated last line is kept too (lossless); restore writes it back without a newline.
        added += archive.add_lines(str(path), offset, lines, rewritten=rewritten and offset == 0,
                                   last_terminated=terminated)
    return added


def still_appended(archive: Archive, path: Path, archived: int) -> bool:
    """Return True when `path` still holds, just before byte `archived`, the last line the archive has of it."""
    last = archive.last_line(str(path))
    if last is None or path.stat().st_size < archived:
        return False
    try:
        return read_span(path, archived - len(last), len(last)) == last
    except OSError:
        return False
