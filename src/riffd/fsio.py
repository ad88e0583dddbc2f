"""The one I/O layer riffd reads and writes files through.

Everything that touches a transcript or a backup goes through a `FileSystem` object, so a
test can hand in a subclass that fails the way real disks and sync clients fail (EIO from a
OneDrive/Dropbox placeholder under WSL2, ENOSPC on a full disk) without patching our modules.
Reads are positional (`pread`), so a retried read is exactly the same read.

The durable-write helpers every writer shares live here too: write all of a buffer, flush a folder's
entries, create private (0700) folders, and remove riffd's own partial files.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import platform
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TypeVar

if TYPE_CHECKING:
    import ctypes

    from tenacity import RetryCallState


log = logging.getLogger(__name__)

T = TypeVar("T")

# Opening a path with this flag fails (ELOOP) when its last part is a symlink: riffd never writes
# through one.
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

CLOUD_SYNC_HINT = (
    "this looks like a cloud-synced folder (OneDrive, Dropbox, iCloud) serving a file that is not on "
    "this device; mark the folder 'always keep on this device' so reads do not fail"
)


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

# Errors that mean "this filesystem (or kernel, or libc) cannot exchange two names", not "something
# is wrong".
EXCHANGE_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})
_RENAME_EXCHANGE = 2  # <linux/fs.h>
_RENAME_SWAP = 2  # <stdio.h> on macOS, for renamex_np
_RENAME_NOREPLACE = 1  # <linux/fs.h>
_RENAME_EXCL = 4  # <stdio.h> on macOS
_AT_FDCWD = -100
_SYS_RENAMEAT2 = {
    "x86_64": 316,
    "aarch64": 276,
    "arm64": 276,
    "riscv64": 276,
    "ppc64le": 357,
    "s390x": 347,
}
_libc: ctypes.CDLL | None = None


def _c_library() -> ctypes.CDLL:
    """The C library, loaded at first use (ctypes is imported then: most commands never call into
    it)."""
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def exchange_names(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Swap two names atomically: `renameat2(RENAME_EXCHANGE)` on Linux (glibc's wrapper, else the
    raw system call), `renamex_np(RENAME_SWAP)` on macOS. Python has no wrapper for either. Raise
    OSError with the errno; ENOSYS where neither exists."""
    _rename_with(src, dst, _RENAME_EXCHANGE, _RENAME_SWAP, "exchange two file names atomically")


def rename_noreplace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename `src` to `dst` only when `dst` does not exist, atomically (FileExistsError when it
    does): `renameat2(RENAME_NOREPLACE)` on Linux, `renamex_np(RENAME_EXCL)` on macOS; ENOSYS where
    neither exists."""
    _rename_with(
        src, dst, _RENAME_NOREPLACE, _RENAME_EXCL, "rename a file without replacing another"
    )


def _rename_with(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    linux_flag: int,
    mac_flag: int,
    what: str,
) -> None:
    libc = _c_library()
    source, target = os.fsencode(src), os.fsencode(dst)
    if sys.platform == "darwin":
        function = getattr(libc, "renamex_np", None)
        result = function(source, target, mac_flag) if function is not None else None
    elif sys.platform.startswith("linux"):
        function = getattr(libc, "renameat2", None)
        if function is not None:
            result = function(_AT_FDCWD, source, _AT_FDCWD, target, linux_flag)
        elif (
            platform.machine() in _SYS_RENAMEAT2
        ):  # a libc older than glibc 2.28, or one without the wrapper
            result = libc.syscall(
                _SYS_RENAMEAT2[platform.machine()], _AT_FDCWD, source, _AT_FDCWD, target, linux_flag
            )
        else:
            result = None
    else:
        result = None
    if result is None:
        raise OSError(
            errno.ENOSYS, f"this system cannot {what}", os.fsdecode(src), None, os.fsdecode(dst)
        )
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fsdecode(src), None, os.fsdecode(dst))


# glibc's mallopt parameter, and the threshold riffd pins it to.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 20


def pin_mmap_threshold() -> bool:
    """Keep blocks of 1 MiB and more out of the C heap (glibc); return whether the setting took.

    glibc starts by serving blocks of 128 KiB and more with their own mappings, but each time such a
    block is freed it raises that threshold to the block's size (up to 32 MB). An index grows big
    arrays and dict tables by reallocating them, so after the first growth they are made inside the
    heap, where every copy they leave behind stays resident: a scan of the 1 GB session peaked 5 to
    20 MB higher, varying from run to run. A fixed threshold (setting it turns the adjustment off)
    keeps each big block in its own mapping, grown in place and returned to the system when freed.
    Batches of lines (256 KiB) stay in the heap. Elsewhere (macOS, musl) this does nothing.
    """
    try:
        if not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError):  # a libc that does not know the name: not glibc
        return False
    return bool(_c_library().mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


@dataclass(frozen=True)
class RetryPolicy:
    """How reads retry EIO: `attempts` tries in all, waiting `first_wait` seconds, then doubling."""

    attempts: int = 3
    first_wait: float = 0.5
    max_wait: float = 8.0


DEFAULT_RETRY = RetryPolicy()


class IOStats:
    """Process-wide counts of EIO retries and give-ups, for the health report."""

    def __init__(self) -> None:
        self.retries = 0
        self.give_ups = 0


IO_STATS = IOStats()


class ReadFailed(OSError):
    """A read that kept failing with EIO after every retry; the message says what to do."""


def is_cloud_sync_error(exc: BaseException) -> bool:
    """Return True for the I/O errors worth retrying (EIO only; never ENOENT, EACCES, ...)."""
    return isinstance(exc, OSError) and not isinstance(exc, ReadFailed) and exc.errno == errno.EIO


def retrying_call(
    func: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy = DEFAULT_RETRY,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Call `func`, retrying EIO per `policy`; raise ReadFailed naming `what` when every try failed.

    The first failure is logged as a warning with the cloud-sync hint, later ones at debug level,
    so a flaky sync client does not flood the log.
    """

    def before_sleep(state: RetryCallState) -> None:
        IO_STATS.retries += 1
        if on_retry is not None:
            on_retry()
        exc = state.outcome.exception() if state.outcome else None
        if state.attempt_number == 1:
            log.warning("I/O error on %s (%s); retrying. Hint: %s", what, exc, CLOUD_SYNC_HINT)
        else:
            log.debug("I/O error again on %s (attempt %d): %s", what, state.attempt_number, exc)

    try:
        return (
            func()
        )  # the fast path: building tenacity's machinery per read costs more than the read
    except OSError as exc:
        if not is_cloud_sync_error(exc):
            raise
        first_failure: list[OSError] = [exc]

    def attempt() -> T:
        # Attempt 1 is the call above; tenacity counts it, so `policy.attempts` stays the total.
        if first_failure:
            raise first_failure.pop()
        return func()

    # Imported only now: every command would otherwise pay tenacity's import at start-up for a rare
    # failure.
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    retrying = Retrying(
        retry=retry_if_exception(is_cloud_sync_error),
        stop=stop_after_attempt(policy.attempts),
        wait=wait_exponential(multiplier=policy.first_wait, exp_base=2, max=policy.max_wait),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except OSError as exc:
        if not is_cloud_sync_error(exc):
            raise
        IO_STATS.give_ups += 1
        raise ReadFailed(
            errno.EIO,
            f"{what}: I/O error (errno 5) on every one of {policy.attempts} attempts. {CLOUD_SYNC_HINT}; "
            "then run the command again",
        ) from exc


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
        self, fs: FileSystem, fd: int, policy: RetryPolicy = DEFAULT_RETRY, offset: int = 0
    ) -> None:
        self.fs, self.fd, self.policy, self.offset = fs, fd, policy, offset

    def write(self, payload: bytes | memoryview) -> None:
        """Write all of `payload` at the current offset; raise OSError when the disk refuses (EIO on
        every try, ENOSPC, ...)."""
        view = memoryview(payload)
        while view:
            written = retrying_call(
                partial(self.fs.pwrite, self.fd, view, self.offset),
                what="riffd's copy",
                policy=self.policy,
            )
            if written <= 0:
                raise OSError(errno.EIO, "write wrote nothing")
            self.offset += written
            view = view[written:]


# Filesystems where files live on another machine or in a user-space server: change events do not
# arrive reliably (riffd polls), and an I/O error means a server failed for a moment, so riffd
# retries even an fsync there.
REMOTE_FILESYSTEMS = frozenset(
    {
        "9p",
        "drvfs",
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "sshfs",
        "fuse",
        "fuseblk",
        "davfs",
        "afpfs",
        "virtiofs",
        "vboxsf",
        "prl_fs",
        "vmhgfs",
    }
)


def filesystem_type(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """Return the type of the file system holding `path` (Linux), or None when it cannot be told."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    try:
        target = str(Path(path).resolve())
    except OSError:
        target = os.path.abspath(path)
    best, best_type = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def is_remote(path: Path) -> bool:
    """Return True when `path` is on a network or FUSE filesystem (see REMOTE_FILESYSTEMS)."""
    kind = filesystem_type(path)
    return kind is not None and (kind in REMOTE_FILESYSTEMS or kind.startswith("fuse."))


def fsync_file(fs: FileSystem, fd: int, path: Path, policy: RetryPolicy = DEFAULT_RETRY) -> None:
    """Flush `fd` (a file at `path`) to stable storage. On a network or FUSE filesystem EIO is
    retried: the server failed for a moment and the request is simply made again. On a local disk it
    is raised at once: there it means the data may not have reached the disk, and a second fsync
    would only say so no longer."""
    if not is_remote(path):
        fs.fsync(fd)
        return
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
            if is_cloud_sync_error(exc.__cause__ or exc) and attempt + 1 < REMOVE_ATTEMPTS:
                continue
            log.warning(
                "could not remove riffd's partial file %s: %s; remove it by hand", path, exc
            )
            return


def replace_file(
    path: Path, data: bytes, mode: int = 0o600, owner: tuple[int, int] | None = None
) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never half of one: a
    temp file of this writer's own beside it (pid and thread in its name: writers at once never
    share one), written whole, given `mode` (and the `owner` uid and gid, when given: a file root
    replaces in a user's folder stays the user's), fsynced, renamed over `path`. On failure
    (PermissionError when the owner cannot be given) the temp file goes and `path` is untouched."""
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
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
