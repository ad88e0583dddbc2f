"""Whether a file still holds the archive's latest generation of it, so that what it holds past it
goes on that generation (`still_appended`); else it is archived as a new one from its start: what
`riffd archive ingest`, the daemon's catch-up and its first read of a file judge with."""

from __future__ import annotations

import logging
import zlib
from pathlib import Path

from riffd.archive.packs import PackDamaged
from riffd.archive.reading import Tip
from riffd.archive.store import Archive
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS
from riffd.transcript.reader import close_read, read_at, retrying

log = logging.getLogger(__name__)

CHECK_BYTES = 1 << 20  # bytes read at a time to check a file against its archived generation


def where_to_start(
    archive: Archive,
    path: Path,
    *,
    fs: FileSystem = REAL_FILES,
    fd: int | None = None,
    whole: bool = True,
) -> tuple[int, bool]:
    """Return (the byte to read `path` from, whether it is to be archived from its start as a new
    generation: it was rewritten since it was last archived, or the archive's last line of it is in
    a damaged pack, so where its generation ends cannot be checked). Judged on `fd` when given
    (`path` open already: the lines are then read from it); `whole`: see still_appended."""
    _generation, archived = archive.cursor(str(path))
    try:
        rewritten = archived > 0 and not still_appended(
            archive, path, archived, fs=fs, fd=fd, whole=whole
        )
    except PackDamaged as exc:
        log.warning("%s: archived from its start as a new generation: %s", path, exc)
        rewritten = True
    return (0 if rewritten else archived), rewritten


def still_appended(
    archive: Archive,
    path: Path,
    archived: int,
    *,
    fs: FileSystem = REAL_FILES,
    fd: int | None = None,
    whole: bool = True,
) -> bool:
    """Return True when `path` (read from `fd` when given) still holds, as its first `archived`
    bytes, the archive's latest generation of it: its last line just before byte `archived`, then
    (`whole`) every byte before it, as the generation's checksum and line count say, or compared
    with the archive's lines where it has no checksum (archived by an earlier riffd). A file
    recreated with other lines and the same last one is a new generation, not more of the old one.
    Raise OSError when the file cannot be read (EIO at every try), PackDamaged when the archive
    cannot give what it compares."""
    tip = archive.tip(str(path))
    if tip is None:
        return False
    fs = retrying(fs)
    # the file the name leads to (through a symlink too), as the read that follows opens it
    opened = fs.open_file(path) if fd is None else None
    try:
        held = fd if opened is None else opened
        assert held is not None
        if not _ends_with(fs, held, archived, tip.line):
            return False
        if not whole:
            return True
        if tip.crc is None:
            return _as_archived(archive, path, fs, held, archived)
        return _crc_holds(fs, held, archived, tip)
    finally:
        if opened is not None:
            close_read(fs, opened)


def ends_as_archived(
    archive: Archive, path: Path, archived: int, *, fs: RetryingFS, fd: int
) -> bool:
    """Whether the file open on `fd` holds the archive's last line of `path` just before byte
    `archived` (what `still_appended` checks first; the bytes before it are not read)."""
    tip = archive.tip(str(path))
    return tip is not None and _ends_with(fs, fd, archived, tip.line)


def _crc_holds(fs: RetryingFS, fd: int, archived: int, tip: Tip) -> bool:
    """Whether the first `archived` bytes of the file open on `fd` have `tip`'s checksum (of the
    lines without their newlines: riffd.archive.packs.Run) and line count."""
    crc = newlines = 0
    for offset in range(0, archived, CHECK_BYTES):
        data = read_at(fs, fd, min(CHECK_BYTES, archived - offset), offset)
        if not data:
            return False
        newlines += data.count(b"\n")
        crc = zlib.crc32(data.replace(b"\n", b""), crc)
    return newlines == tip.lines - tip.unterminated and crc == tip.crc


def _as_archived(archive: Archive, path: Path, fs: RetryingFS, fd: int, archived: int) -> bool:
    """Whether the first `archived` bytes of the file open on `fd` are the archive's latest
    generation of `path`, line for line (read a CHECK_BYTES block at a time)."""
    file_id = archive.file_id(str(path))
    if file_id is None:
        return False
    block, block_at = b"", 0
    position = 0
    for line in archive.iter_file(file_id):
        end = position + len(line)
        if end > block_at + len(block):
            block = read_at(fs, fd, max(CHECK_BYTES, len(line)), position)
            block_at = position
        if block[position - block_at : end - block_at] != line:
            return False
        position = end
    return position == archived


def _ends_with(fs: RetryingFS, fd: int, archived: int, last: bytes) -> bool:
    """Whether the file open on `fd` holds `last` just before byte `archived`."""
    if fs.fstat(fd).st_size < archived:
        return False
    return read_at(fs, fd, len(last), archived - len(last)) == last
