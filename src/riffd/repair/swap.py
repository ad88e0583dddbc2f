"""Putting the repaired copy in place: the two names exchanged atomically, then checked; a rename where the
filesystem cannot exchange.

`rename(tmp, path)` replaces whatever is at `path` at that instant: a newer version another program renamed over
the transcript a moment earlier is thrown away, a transcript deleted a moment earlier comes back, and no check
before the rename can close that window (shared/filesystems.md). An exchange (`renameat2(RENAME_EXCHANGE)` on
Linux, `renamex_np(RENAME_SWAP)` on macOS) swaps the names instead: afterwards the temp name holds whatever was at
the transcript's name, which riffd checks is the very file it backed up and settled (device and inode). If it is
another file, the names are swapped back, so that file stays, with anything appended to the repaired copy in
between. A vanished transcript makes the exchange fail, so nothing is re-created.

Where a filesystem refuses the exchange (some network and FUSE filesystems), or accepts it and silently performs
a plain rename (the temp name is gone afterwards), riffd falls back to the rename with the identity check right
before it, and says so once per filesystem. README.md, "Safety", lists which filesystems get which guarantee.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import weakref
from pathlib import Path

from riffd.fsio import EXCHANGE_UNSUPPORTED, NOFOLLOW, FileSystem, write_all
from riffd.repair.outcomes import FileChanged, FileGone

log = logging.getLogger(__name__)

EXCHANGE = "exchange"
RENAME = "rename"
_COPY_CHUNK = 1 << 20

# Per I/O seam (one in a running riffd), the filesystems (by st_dev) that refused or ignored an exchange, and why:
# they get the rename from then on.
_NO_EXCHANGE: weakref.WeakKeyDictionary[FileSystem, dict[int, str]] = weakref.WeakKeyDictionary()
_NO_EXCHANGE_LOCK = threading.Lock()


class SwapBackFailed(OSError):
    """Another program's file was at the transcript's name and could not be put back: the message says where it is."""


def fall_back_to_rename(fs: FileSystem, device: int, path: Path, why: str) -> None:
    """Remember that the filesystem holding `path` gets the rename from now on, and log that once."""
    with _NO_EXCHANGE_LOCK:
        refused = _NO_EXCHANGE.setdefault(fs, {})
        if device in refused:
            return
        refused[device] = why
    log.warning("%s: this filesystem cannot exchange two names atomically (%s); riffd replaces transcripts on it by "
                "rename with a check just before it, which cannot notice a new version renamed over the transcript "
                "in that same instant (README.md, Safety)", path, why)


def uses_rename(fs: FileSystem, device: int) -> str | None:
    """Return why the filesystem `device` gets the rename instead of the exchange, or None when it exchanges."""
    with _NO_EXCHANGE_LOCK:
        return _NO_EXCHANGE.get(fs, {}).get(device)


def put_in_place(fs: FileSystem, path: Path, temp_path: Path, held: os.stat_result, new_fd: int,
                 new_size: int) -> str:
    """Make `path` name the repaired copy at `temp_path` (open as `new_fd`, `new_size` bytes long), where `held` is
    the status of the original riffd holds open; return EXCHANGE or RENAME, the way it was done.

    After an exchange the original's old name (now `temp_path`) is removed: its bytes stay reachable through the
    descriptor riffd holds, for lines appended late. Raise FileGone when the transcript vanished (nothing is
    re-created), FileChanged when another file had taken its place (that file is at `path` again),
    SwapBackFailed when it could not be put back, OSError when the filesystem fails."""
    if uses_rename(fs, held.st_dev) is None:
        try:
            fs.exchange(temp_path, path)
        except OSError as exc:
            if exc.errno == errno.ENOENT and not _exists(fs, path):
                raise FileGone("it was deleted while riffd worked") from exc
            if exc.errno not in EXCHANGE_UNSUPPORTED:
                raise
            code = errno.errorcode.get(exc.errno, str(exc.errno))
            fall_back_to_rename(fs, held.st_dev, path, f"the exchange failed with {code}")
        else:
            return _after_exchange(fs, path, temp_path, held, new_fd, new_size)
    _check_identity(fs, path, held)
    fs.replace(temp_path, path)
    return RENAME


def _after_exchange(fs: FileSystem, path: Path, temp_path: Path, held: os.stat_result, new_fd: int,
                    new_size: int) -> str:
    try:
        swapped_out = fs.stat(temp_path)
    except FileNotFoundError:
        # The filesystem took the exchange for a plain rename: the repaired copy is in place, the original's name
        # is gone (its bytes are in the backup and behind riffd's descriptor).
        fall_back_to_rename(fs, held.st_dev, path, "it accepted an exchange and performed a plain rename")
        return RENAME
    if (swapped_out.st_dev, swapped_out.st_ino) == (held.st_dev, held.st_ino):
        try:
            fs.unlink(temp_path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("%s: repaired, but the original's old name %s could not be removed (%s); riffd backed it "
                        "up, and the next run in this folder removes it", path, temp_path, exc)
        return EXCHANGE
    # Another program put its own file at the transcript's name in the window: it must stay there.
    try:
        fs.exchange(temp_path, path)
    except OSError as exc:
        raise SwapBackFailed(
            exc.errno or errno.EIO,
            f"another program put a new version of it in place while riffd was replacing it, and riffd could not "
            f"put that version back ({exc.strerror or exc}): it is at {temp_path}, and {path} holds riffd's "
            f"repaired copy; move it back with: mv {str(temp_path)!r} {str(path)!r}",
        ) from exc
    appended = _carry_tail(fs, new_fd, new_size, path)
    raise FileChanged(
        "another program put a new version of it in place while riffd was replacing it; that version is kept"
        + (f" ({appended} bytes written to riffd's copy meanwhile were added to it)" if appended else "")
    )


def _carry_tail(fs: FileSystem, new_fd: int, new_size: int, path: Path) -> int:
    """Append to `path` what other writers added to the repaired copy while it held the name; return the bytes."""
    size_now = fs.fstat(new_fd).st_size
    if size_now <= new_size:
        return 0
    out_fd = fs.open(path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
    try:
        offset = new_size
        while offset < size_now:
            chunk = fs.pread(new_fd, min(_COPY_CHUNK, size_now - offset), offset)
            if not chunk:
                break
            write_all(fs, out_fd, chunk)
            offset += len(chunk)
        fs.fsync(out_fd)
    finally:
        fs.close(out_fd)
    return size_now - new_size


def _check_identity(fs: FileSystem, path: Path, held: os.stat_result) -> None:
    """The last check before a rename: `path` must still be the file riffd holds."""
    try:
        current = fs.stat(path)
    except FileNotFoundError as exc:
        raise FileGone("it was deleted while riffd worked") from exc
    if (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
        raise FileChanged("it was replaced by another file while riffd worked")


def _exists(fs: FileSystem, path: Path) -> bool:
    try:
        fs.stat(path)
    except FileNotFoundError:
        return False
    return True
