"""A `FileSystem` seam with its retry policy, so that a call site reads `fs.stat(path)`.

The operations that do the same thing when made again (a status, a listing, a positional read or
write, opening without creating, removing a name, setting modes and times) are retried on EIO per
the policy, naming the file in the error. The others (an append, an fsync, a rename, an exchange, a
link, creating a file) are made once: what a failure of one means is for its caller to judge, and a
caller that judged a retry exact says so with `attempt`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from functools import partial

from riffd.fsio.retry import DEFAULT_RETRY, RetryPolicy, T, retrying_call
from riffd.fsio.seam import REAL_FS, FileSystem

PathLike = str | os.PathLike[str]
_CREATES = os.O_CREAT | os.O_EXCL | os.O_TRUNC


class RetryingFS(FileSystem):
    """The file operations riffd makes, through `seam` (a test's faults included), retried on EIO
    per `policy` where a retry is exact. It is a FileSystem itself, so the durable-write helpers take
    it as they take a seam."""

    def __init__(self, seam: FileSystem = REAL_FS, policy: RetryPolicy = DEFAULT_RETRY) -> None:
        # no retries twice
        self.seam: FileSystem = seam.seam if isinstance(seam, RetryingFS) else seam
        self.policy = policy
        self._names: dict[int, str] = {}  # descriptors opened here, by what they name

    @classmethod
    def of(cls, fs: FileSystem, policy: RetryPolicy = DEFAULT_RETRY) -> RetryingFS:
        """`fs` with `policy`: itself when it already retries so, else a RetryingFS over its seam."""
        if isinstance(fs, RetryingFS) and fs.policy == policy:
            return fs
        return cls(fs, policy)

    def attempt(self, call: Callable[[], T], what: str) -> T:
        """Return `call()`, retried on EIO per the policy (for a call its caller judged exact)."""
        return retrying_call(call, what=what, policy=self.policy)

    def name_of(self, fd: int) -> str:
        """What the descriptor `fd` names, for messages."""
        return self._names.get(fd, f"descriptor {fd}")

    # -- retried ---------------------------------------------------------------------------------

    def open(self, path: PathLike, flags: int, mode: int = 0o600) -> int:
        """Open `path`; retried unless the flags create or empty a file."""
        call = partial(self.seam.open, path, flags, mode)
        fd = call() if flags & _CREATES else self.attempt(call, f"{os.fspath(path)} (open)")
        self._names[fd] = os.fspath(path)
        return fd

    def open_file(self, path: PathLike) -> int:
        """Open `path` to read, refusing what is not a regular file with an OSError that says so: a
        FIFO (or device) named like a transcript is never waited on. It is opened without blocking
        (a read of a FIFO then ends at once, should its status not be had), then looked at."""
        fd = self.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            kind = self.seam.fstat(fd).st_mode
        except OSError:
            return fd  # (not told: the read that follows says what it meets)
        if not stat.S_ISREG(kind):
            self.close(fd)
            raise OSError(
                errno.EINVAL,
                "not a regular file (a FIFO, a device or a socket); riffd reads only files",
                os.fspath(path),
            )
        # (a file: read as usual; a FUSE file system may honour O_NONBLOCK with EAGAIN)
        with contextlib.suppress(OSError):
            os.set_blocking(fd, True)
        return fd

    def read_file(self, path: PathLike) -> bytes:
        """The bytes of the regular file `path` (`open_file`: a FIFO or a device is refused, never
        waited on)."""
        fd = self.open_file(path)
        try:
            chunks = []
            while chunk := self.attempt(partial(os.read, fd, 1 << 20), f"{os.fspath(path)} (read)"):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            self.close(fd)

    def stat(self, path: PathLike) -> os.stat_result:
        """The status of `path` (not following a last symlink)."""
        return self.attempt(partial(self.seam.stat, path), f"the status of {os.fspath(path)}")

    def fstat(self, fd: int) -> os.stat_result:
        """The status of an open file."""
        return self.attempt(partial(self.seam.fstat, fd), f"the status of {self.name_of(fd)}")

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        """Up to `size` bytes at `offset`."""
        return self.attempt(
            partial(self.seam.pread, fd, size, offset), f"{self.name_of(fd)} at byte {offset}"
        )

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """Write `data` at `offset` (the same bytes at the same place when made again)."""
        return self.attempt(
            partial(self.seam.pwrite, fd, data, offset), f"{self.name_of(fd)} at byte {offset}"
        )

    def listdir(self, path: PathLike) -> list[str]:
        """The names in a folder."""
        return self.attempt(partial(self.seam.listdir, path), f"the listing of {os.fspath(path)}")

    def entries(self, path: PathLike) -> list[tuple[str, bool, bool]]:
        """(name, is a folder, is a symlink) for each entry of a folder."""
        return self.attempt(partial(self.seam.entries, path), f"the listing of {os.fspath(path)}")

    def unlink(self, path: PathLike) -> None:
        """Remove a name (FileNotFoundError when it is gone, a retry's first try included)."""
        self.attempt(partial(self.seam.unlink, path), f"the removal of {os.fspath(path)}")

    def fchmod(self, fd: int, mode: int) -> None:
        """Set an open file's permission bits."""
        self.attempt(partial(self.seam.fchmod, fd, mode), f"the mode of {self.name_of(fd)}")

    def fchown(self, fd: int, uid: int, gid: int) -> None:
        """Set an open file's owner and group (-1 leaves one)."""
        self.attempt(partial(self.seam.fchown, fd, uid, gid), f"the owner of {self.name_of(fd)}")

    def futimens(self, fd: int, mtime_ns: int) -> None:
        """Set an open file's modification time."""
        self.attempt(partial(self.seam.futimens, fd, mtime_ns), f"the time of {self.name_of(fd)}")

    # -- made once -------------------------------------------------------------------------------

    def write(self, fd: int, data: bytes | memoryview) -> int:
        """Write at the current position (an append: never made twice here)."""
        return self.seam.write(fd, data)

    def fsync(self, fd: int) -> None:
        """Flush an open file (riffd.fsio.durable.fsync_file retries where that is right)."""
        self.seam.fsync(fd)

    def replace(self, src: PathLike, dst: PathLike) -> None:
        """Rename `src` over `dst`."""
        self.seam.replace(src, dst)

    def exchange(self, src: PathLike, dst: PathLike) -> None:
        """Swap two names atomically."""
        self.seam.exchange(src, dst)

    def link(self, src: PathLike, dst: PathLike) -> None:
        """Make the hard link `dst`."""
        self.seam.link(src, dst)

    def mkdir(self, path: PathLike, mode: int = 0o700) -> None:
        """Make one folder."""
        self.seam.mkdir(path, mode)

    def chmod(self, path: PathLike, mode: int) -> None:
        """Set a path's permission bits."""
        self.seam.chmod(path, mode)

    def flock(self, fd: int, operation: int) -> None:
        """Take or drop an advisory lock."""
        self.seam.flock(fd, operation)

    def close(self, fd: int) -> None:
        """Close a descriptor."""
        self._names.pop(fd, None)
        self.seam.close(fd)


REAL_FILES = RetryingFS()
