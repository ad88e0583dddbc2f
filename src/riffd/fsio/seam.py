"""The seam every file operation of riffd goes through: `FileSystem`, thin over the os calls, which a test
subclasses to fail the way real disks and sync clients fail (EIO from a OneDrive/Dropbox placeholder
under WSL2, ENOSPC on a full disk) without patching riffd's modules. Reads are positional (`pread`),
so a retried read is exactly the same read.
"""

from __future__ import annotations

import fcntl
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from riffd.fsio.libc import exchange_names

# Opening a path with this flag fails (ELOOP) when its last part is a symlink: riffd never writes
# through one.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class FileSystem:
    """Thin wrapper over the os calls riffd uses on transcripts and backups; subclass to inject
    faults."""

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        """Open `path` with os flags and return the descriptor."""
        return os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """Read up to `size` bytes at `offset` without moving the file position."""
        return os.pread(fd, size, offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """Write `data` at the current position and return how many bytes were written."""
        return os.write(fd, data)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """Write `data` at `offset` without moving the file position; return how many bytes were
        written."""
        return os.pwrite(fd, data, offset)

    def fsync(self, fd: int) -> None:
        """Flush `fd` to stable storage."""
        os.fsync(fd)

    def fstat(self, fd: int) -> os.stat_result:
        """Return the status of an open file."""
        return os.fstat(fd)

    def stat(self, path: str | os.PathLike[str]) -> os.stat_result:
        """Return the status of `path` without following a final symlink."""
        return os.lstat(path)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """Atomically rename `src` over `dst`."""
        os.replace(src, dst)

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """Atomically swap the names `src` and `dst` (both must exist): afterwards `src` names what
        was at `dst`. Raise OSError: ENOENT when either is missing, EINVAL/ENOTSUP/ENOSYS when this
        filesystem or system cannot exchange (see `exchange_names`)."""
        exchange_names(src, dst)

    def unlink(self, path: str | os.PathLike[str]) -> None:
        """Remove `path`."""
        os.unlink(path)

    def close(self, fd: int) -> None:
        """Close a descriptor."""
        os.close(fd)

    def fchmod(self, fd: int, mode: int) -> None:
        """Set the permission bits of an open file."""
        os.fchmod(fd, mode)

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        """Set the owner and group of an open file (-1 leaves one unchanged)."""
        os.fchown(fd, uid, gid)

    def futimens(self, fd: int, mtime_ns: int) -> None:
        """Set an open file's modification time (its access time with it)."""
        os.utime(fd, ns=(mtime_ns, mtime_ns))

    def link(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        """Create the hard link `dst` to `src`; fail with EEXIST when `dst` exists."""
        os.link(src, dst, follow_symlinks=False)

    def mkdir(self, path: str | os.PathLike[str], mode: int = 0o700) -> None:
        """Create one folder with `mode` (reduced by the umask)."""
        os.mkdir(path, mode)

    def chmod(self, path: str | os.PathLike[str], mode: int) -> None:
        """Set the permission bits of `path`."""
        os.chmod(path, mode)

    def listdir(self, path: str | os.PathLike[str]) -> list[str]:
        """Return the names in folder `path`."""
        return os.listdir(path)

    def entries(self, path: str | os.PathLike[str]) -> list[tuple[str, bool, bool]]:
        """Return (name, is a folder, is a symlink) for each entry of folder `path`, from the
        listing alone where the filesystem says (no stat per entry); a symlink is never a folder
        here."""
        with os.scandir(path) as found:
            return [
                (entry.name, entry.is_dir(follow_symlinks=False), entry.is_symlink())
                for entry in found
            ]

    def flock(self, fd: int, operation: int) -> None:
        """Apply or remove an advisory lock on an open file (fcntl.flock)."""
        fcntl.flock(fd, operation)


REAL_FS = FileSystem()
