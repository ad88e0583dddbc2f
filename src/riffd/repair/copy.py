"""The repaired copy: streamed beside the transcript from the plan's segments, every original byte
hashed on the way (the copy provably comes from the bytes that were backed up), sample windows kept
for the checks just before and after the swap, and the original's mode and owner given to it."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from riffd.fsio import (
    NOFOLLOW,
    OffsetWriter,
    RetryingFS,
    is_cloud_sync_error,
    remove_leftover,
)
from riffd.repair.lines import LineConflict, hangs_from, split_lines, uuids_of
from riffd.repair.locks import temp_path_for
from riffd.repair.outcomes import ApplyOptions, FileChanged, FileGone
from riffd.transcript.reader import iter_fd

log = logging.getLogger(__name__)

SAMPLE_WINDOW = 4096
SAMPLE_COUNT = 6


def read_range(
    fs: RetryingFS, fd: int, start: int, end: int, *, path: Path
) -> Iterable[tuple[int, bytes]]:
    """Yield (offset, chunk) over the open file's bytes [start, end); raise FileChanged when it ends
    sooner."""
    offset = start
    for chunk in iter_fd(fd, what=str(path), fs=fs, start=start, end=end):
        yield offset, chunk
        offset += len(chunk)
    if offset < end:
        raise FileChanged(
            f"it is now shorter than {end} bytes (it was truncated while riffd worked)"
        )


def _sample_windows(size: int) -> list[tuple[int, int]]:
    # The first and the last window before the planned size, and a few evenly spread between them.
    if size <= 0:
        return []
    last = max(0, size - SAMPLE_WINDOW)
    starts = {0, last}
    for step in range(1, SAMPLE_COUNT - 1):
        starts.add(last * step // (SAMPLE_COUNT - 1))
    return [(start, min(SAMPLE_WINDOW, size - start)) for start in sorted(starts)]


@dataclass
class Copied:
    """What writing the copy learnt of the original: the sha256 of its planned bytes, its sample
    windows, whether its last line ended, and the uuids of the lines the copy leaves out."""

    sha256: str
    samples: dict[int, bytes]
    ends_with_newline: bool
    removed: frozenset[str]  # uuids of the lines the new content leaves out
    inserted: frozenset[str]  # uuids of the lines it adds


def write_new_content(
    fs: RetryingFS,
    path: Path,
    original_fd: int,
    temp: OffsetWriter,
    segments: Iterable[tuple[int, int] | bytes],
    size: int,
) -> Copied:
    """Stream the new content into the temp copy; hash every original byte in [0, size) in order
    (copied or not), so the copy is proven to come from the bytes that were backed up, and keep the
    sample windows."""
    source_hash = hashlib.sha256()
    windows = _sample_windows(size)
    samples = {start: bytearray(length) for start, length in windows}
    last_byte = b"\n"
    hashed_upto = 0
    left_out: list[bytes] = []  # the original lines the new content drops or replaces
    written: list[bytes] = []  # the new lines it adds

    def consume(start: int, end: int, *, copy: bool) -> None:
        nonlocal last_byte
        for offset, chunk in read_range(fs, original_fd, start, end, path=path):
            source_hash.update(chunk)
            if not copy:
                left_out.append(chunk)
            chunk_end = offset + len(chunk)
            for window_start, window_length in windows:
                overlap_start = max(offset, window_start)
                overlap_end = min(chunk_end, window_start + window_length)
                if overlap_start < overlap_end:
                    samples[window_start][
                        overlap_start - window_start : overlap_end - window_start
                    ] = chunk[overlap_start - offset : overlap_end - offset]
            if copy:
                temp.write(chunk)
            last_byte = chunk[-1:]

    for segment in segments:
        if isinstance(segment, bytes):
            temp.write(segment)
            written.append(segment)
            continue
        start, end = segment
        if start < hashed_upto or start > end or end > size:
            raise ValueError(
                f"copy range {start}..{end} is out of order or beyond the planned size {size}"
            )
        if start > hashed_upto:
            consume(hashed_upto, start, copy=False)
        consume(start, end, copy=True)
        hashed_upto = end
    if hashed_upto < size:
        consume(hashed_upto, size, copy=False)
    return Copied(
        sha256=source_hash.hexdigest(),
        samples={start: bytes(window) for start, window in samples.items()},
        ends_with_newline=last_byte == b"\n",
        removed=frozenset(uuids_of(split_lines(b"".join(left_out))) - uuids_of(written)),
        inserted=frozenset(uuids_of(written) - uuids_of(split_lines(b"".join(left_out)))),
    )


def create_temp(fs: RetryingFS, path: Path) -> tuple[Path, int]:
    """Create riffd's copy beside `path` under a fresh name (a name whose creation failed with EIO
    may exist or not: it is removed, and another name tried)."""
    for attempt in range(1, fs.policy.attempts + 1):
        temp_path = temp_path_for(path)
        try:
            return temp_path, fs.open(
                temp_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600
            )
        except OSError as exc:
            if not is_cloud_sync_error(exc) or attempt == fs.policy.attempts:
                raise
            remove_leftover(fs, temp_path)
            time.sleep(min(fs.policy.first_wait * 2 ** (attempt - 1), fs.policy.max_wait))
    raise AssertionError("unreachable")


def copy_mode_and_owner(fs: RetryingFS, temp_fd: int, original: os.stat_result) -> None:
    """Give riffd's copy the original's mode, and its owner where this process may."""
    fs.fchmod(temp_fd, stat.S_IMODE(original.st_mode))
    try:
        fs.fchown(temp_fd, original.st_uid, original.st_gid)
    except PermissionError:
        # Only root may give a file away; keep at least the group when we are allowed to.
        try:
            fs.fchown(temp_fd, -1, original.st_gid)
        except PermissionError:
            log.debug("cannot copy the owner of %s to its repaired copy", original)


def settle_appends(
    fs: RetryingFS,
    path: Path,
    original_fd: int,
    temp: OffsetWriter,
    planned_size: int,
    copied: Copied,
    options: ApplyOptions,
) -> int:
    """Re-check the original until a round sees nothing new; carry complete appended lines into the
    temp file; return the original's size that the temp file now covers. Raise FileChanged when it
    changed."""
    held = fs.fstat(original_fd)
    carried_end = planned_size
    for round_number in range(options.settle_rounds):
        try:
            current = fs.stat(path)
        except FileNotFoundError as exc:
            raise FileGone("it was deleted while riffd worked") from exc
        if (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
            raise FileChanged("it was replaced by another file while riffd worked")
        size_now = fs.fstat(original_fd).st_size
        if size_now < carried_end:
            raise FileChanged(f"it shrank to {size_now} bytes while riffd worked (truncated)")
        for start, expected in copied.samples.items():
            actual = b"".join(
                chunk
                for _, chunk in read_range(fs, original_fd, start, start + len(expected), path=path)
            )
            if actual != expected:
                raise FileChanged(f"its bytes at offset {start} changed since they were backed up")
        if size_now == carried_end:
            return carried_end
        if not copied.ends_with_newline:
            # Bytes after an unfinished last line continue that line; the plan may have changed it.
            raise FileChanged(
                "its last line was unfinished and another writer has been continuing it"
            )
        tail = b"".join(
            chunk for _, chunk in read_range(fs, original_fd, carried_end, size_now, path=path)
        )
        complete = tail[: tail.rfind(b"\n") + 1]
        for line in split_lines(complete):
            parent = hangs_from(line, copied.removed)
            if parent is not None:
                raise LineConflict(
                    f"a line appended while riffd worked hangs from {parent}, a line the repair "
                    "removes: a client has the session open"
                )
        if complete:
            temp.write(complete)
            carried_end += len(complete)
        # Something was still being written: give the writer a moment, then check again.
        time.sleep(0.002 * (2**round_number))
    raise FileChanged(
        f"another writer kept appending (or left a line unfinished) through {options.settle_rounds} checks"
    )
