"""The durable writes every writer shares: all of a buffer, at explicit offsets (retried exactly), a
file or a folder's entries flushed to disk, private (0700) folders and 0600 files, riffd's own
partial files removed, and a small file replaced whole.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from collections.abc import Callable

from riffd.fsio.mounts import is_remote
from riffd.fsio.retry import DEFAULT_RETRY, RetryPolicy, is_cloud_sync_error, retrying_call
from riffd.fsio.retrying import RetryingFS
from riffd.fsio.seam import NOFOLLOW, REAL_FS, FileSystem

log = logging.getLogger("riffd.fsio")

REMOVE_ATTEMPTS = 5  # of remove_leftover, each retrying EIO as its policy says


FOLDER_MODE = 0o700  # riffd's folders hold whole conversations


def write_all(fs: FileSystem, fd: int, payload: bytes | memoryview) -> None:
    """Write all of `payload` to `fd`, looping over short writes; raise OSError when the disk
    refuses."""
    view = memoryview(payload)
    while view:
        written = fs.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[written:]


class OffsetWriter:
    """Writes a file only this process writes (riffd's copies) at explicit offsets, retrying EIO as
    cloud-synced folders need: a retried write puts the same bytes at the same place, whether or not
    the failed one landed (the file's size cannot tell: a FUSE kernel may answer it from its
    cache)."""

    def __init__(
        self, fs: FileSystem, fd: int, policy: RetryPolicy | None = None, offset: int = 0
    ) -> None:
        # A RetryingFS brings its own policy; a bare seam gets `policy`, else the default.
        self.fs = RetryingFS.of(
            fs, policy or (fs.policy if isinstance(fs, RetryingFS) else DEFAULT_RETRY)
        )
        self.fd, self.offset = fd, offset

    def write(self, payload: bytes | memoryview) -> None:
        """Write all of `payload` at the current offset; raise OSError when the disk refuses (EIO on
        every try, ENOSPC, ...)."""
        view = memoryview(payload)
        while view:
            written = self.fs.pwrite(self.fd, view, self.offset)
            if written <= 0:
                raise OSError(errno.EIO, "write wrote nothing")
            self.offset += written
            view = view[written:]


def fsync_file(fs: FileSystem, fd: int, path: Path, policy: RetryPolicy | None = None) -> None:
    """Flush `fd` (a file at `path`) to stable storage. On a network or FUSE filesystem EIO is
    retried: the server failed for a moment and the request is simply made again. On a local disk it
    is raised at once: there it means the data may not have reached the disk, and a second fsync
    would only say so no longer."""
    if not is_remote(path):
        fs.fsync(fd)
        return
    if policy is None:
        policy = fs.policy if isinstance(fs, RetryingFS) else DEFAULT_RETRY
    retrying_call(lambda: fs.fsync(fd), what=f"flushing {path}", policy=policy)


def fsync_folder(fs: FileSystem, folder: Path) -> None:
    """Flush a folder's entries (renames, new files) to disk; filesystems that cannot are
    skipped."""
    fd = retrying_call(
        lambda: fs.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)),
        what=f"the folder {folder}",
    )
    try:
        fsync_file(fs, fd, folder)
    except OSError as exc:
        # Some filesystems (and all of Windows) refuse fsync on a folder; the rename itself stands.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        fs.close(fd)


def ensure_private_folder(fs: FileSystem, folder: Path) -> None:
    """Create `folder` and any missing parents with mode 0700; folders that exist are left as they
    are."""
    missing: list[Path] = []
    probe = folder
    while True:
        try:
            fs.stat(probe)
            break
        except FileNotFoundError:
            missing.append(probe)
            if probe.parent == probe:
                break
            probe = probe.parent
    for path in reversed(missing):
        try:
            fs.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            continue
        # mkdir's mode is reduced by the umask; backups hold whole conversations, so say it exactly.
        fs.chmod(path, FOLDER_MODE)


def create_private(path: Path) -> BinaryIO:
    """Open `path` for writing as a new (or emptied) 0600 file, whatever the umask or its earlier
    mode: riffd's exports, restores and reports hold conversations."""
    fd = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600
    )
    try:
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


def remove_leftover(fs: FileSystem, path: Path) -> None:
    """Remove a temp or partial file riffd made (EIO retried, patiently: a cloud-synced folder at
    its worst fails one call in three); a file already gone is fine, other errors are logged."""
    for attempt in range(REMOVE_ATTEMPTS):
        try:
            retrying_call(lambda: fs.unlink(path), what=f"the removal of {path}")
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno in (errno.ENAMETOOLONG, errno.ENOTDIR):
                return  # (a name no file can have, or a path through a file: never made)
            if is_cloud_sync_error(exc.__cause__ or exc) and attempt + 1 < REMOVE_ATTEMPTS:
                continue
            log.warning(
                "could not remove riffd's partial file %s: %s; remove it by hand", path, exc
            )
            return


def replace_file(
    path: Path,
    data: bytes,
    mode: int = 0o600,
    owner: tuple[int, int] | None = None,
    last_look: Callable[[], None] | None = None,
) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never half of one: a
    temp file of this writer's own beside it (pid and thread in its name: writers at once never
    share one), written whole, given `mode` (and the `owner` uid and gid, when given: a file root
    replaces in a user's folder stays the user's), fsynced, renamed over `path`; `last_look` is
    called right before the rename, and may raise to leave `path` as it is (a file another program
    wrote meanwhile). On failure (PermissionError when the owner cannot be given) the temp file
    goes and `path` is untouched."""
    temp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident():x}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            write_all(REAL_FS, fd, data)
            status = os.fstat(fd)
            if owner is not None and (status.st_uid, status.st_gid) != owner:
                os.fchown(fd, *owner)  # before the mode: a change of owner clears the set-id bits
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        if last_look is not None:
            last_look()
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
