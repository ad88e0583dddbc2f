"""Putting the repaired copy in place: the two names exchanged atomically, then checked; a rename
where the filesystem cannot exchange.

`rename(tmp, path)` replaces whatever is at `path` at that instant: a newer version another program
renamed over the transcript a moment earlier is thrown away, a transcript deleted a moment earlier
comes back, and no check before the rename can close that window (shared/filesystems.md). An
exchange (`renameat2(RENAME_EXCHANGE)` on Linux, `renamex_np(RENAME_SWAP)` on macOS) swaps the names
instead: afterwards the temp name holds whatever was at the transcript's name, which riffd checks is
the very file it backed up and settled (device and inode). If it is another file, the names are
swapped back, so that file stays, with anything appended to the repaired copy in between. A vanished
transcript makes the exchange fail, so nothing is re-created.

Where a filesystem refuses the exchange (some network and FUSE filesystems), or accepts it and
silently performs a plain rename (the temp name is gone afterwards), riffd falls back to the rename
with the identity check right before it, and says so once per filesystem. README.md, "Safety", lists
which filesystems get which guarantee.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import stat
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

from riffd.fsio import (
    EXCHANGE_UNSUPPORTED,
    NOFOLLOW,
    FileSystem,
    OffsetWriter,
    ReadFailed,
    RetryingFS,
    fsync_file,
    fsync_folder,
    remove_leftover,
    write_all,
)
from riffd.repair.backup import BackupError, BackupRecord, BackupStore, backups_command
from riffd.repair.journal import Journal, old_name_for
from riffd.repair.locks import temp_path_for
from riffd.repair.outcomes import Failed, FailReason, FileChanged, FileGone
from riffd.transcript.reader import iter_fd

log = logging.getLogger(__name__)

EXCHANGE = "exchange"
RENAME = "rename"
_COPY_CHUNK = 1 << 20
# What a transcript's name holds after a failure (where_is).
ORIGINAL, COPY, HIDDEN, GONE, OTHER = "original", "copy", "hidden", "gone", "other"
# After the swap, the old file is watched until this many checks in a row saw nothing new.
LATE_APPEND_QUIET_CHECKS = 3
LATE_APPEND_MAX_CHECKS = 200
LATE_APPEND_INTERVAL = 0.005
LATE_APPEND_MAX_FAILURES = 20  # checks that failed even after their retries
FUSE_HIDDEN = ".fuse_hidden"

# Per I/O seam (one in a running riffd), the filesystems (by st_dev) that refused or ignored an
# exchange, and why: they get the rename from then on.
_NO_EXCHANGE: weakref.WeakKeyDictionary[FileSystem, dict[int, str]] = weakref.WeakKeyDictionary()
_NO_EXCHANGE_LOCK = threading.Lock()


class SwapBackFailed(OSError):
    """Another program's file was at the transcript's name and could not be put back: the message
    says where it is."""


def fall_back_to_rename(fs: RetryingFS, device: int, path: Path, why: str) -> None:
    """Remember that the filesystem holding `path` gets the rename from now on, and log that
    once."""
    with _NO_EXCHANGE_LOCK:
        refused = _NO_EXCHANGE.setdefault(fs.seam, {})
        if device in refused:
            return
        refused[device] = why
    log.warning(
        "%s: this filesystem cannot exchange two names atomically (%s); riffd replaces transcripts on it by "
        "rename with a check just before it, which cannot notice a new version renamed over the transcript "
        "in that same instant (README.md, Safety)",
        path,
        why,
    )


def uses_rename(fs: RetryingFS, device: int) -> str | None:
    """Return why the filesystem `device` gets the rename instead of the exchange, or None when it
    exchanges."""
    with _NO_EXCHANGE_LOCK:
        return _NO_EXCHANGE.get(fs.seam, {}).get(device)


def put_in_place(
    fs: RetryingFS,
    path: Path,
    temp_path: Path,
    held: os.stat_result,
    new_fd: int,
    new_size: int,
    journal: Journal,
) -> str:
    """Make `path` name the repaired copy at `temp_path` (open as `new_fd`, `new_size` bytes long),
    where `held` is the status of the original riffd holds open; return EXCHANGE or RENAME, the way
    it was done.

    The original keeps a name of riffd's (`journal.record.old_name`: the temp name after an
    exchange, a hard link before a rename) for the hand-over of lines written to it late; the
    journal says where before anything moves. Raise FileGone when the transcript vanished (nothing
    is re-created), FileChanged when another file had taken its place (that file is at `path`
    again), SwapBackFailed when it could not be put back, OSError when the filesystem fails."""
    if uses_rename(fs, held.st_dev) is None:
        for attempt in range(1, fs.policy.attempts + 1):
            try:
                fs.exchange(temp_path, path)
            except OSError as exc:
                if exc.errno == errno.ENOENT and not _exists(fs, path):
                    raise FileGone("it was deleted while riffd worked") from exc
                if exc.errno in EXCHANGE_UNSUPPORTED:
                    code = errno.errorcode.get(exc.errno, str(exc.errno))
                    fall_back_to_rename(fs, held.st_dev, path, f"the exchange failed with {code}")
                    break
                # EIO from a cloud-synced folder: again, but only when nothing happened (the names
                # are as they were).
                if (
                    exc.errno != errno.EIO
                    or attempt == fs.policy.attempts
                    or where_is(fs, path, held, new_fd) != ORIGINAL
                    or not _exists(fs, temp_path)
                ):
                    raise
                time.sleep(min(fs.policy.first_wait * 2 ** (attempt - 1), fs.policy.max_wait))
            else:
                return _after_exchange(fs, path, temp_path, held, new_fd, new_size, journal)
    _check_identity(fs, path, held)
    keep = old_name_for(temp_path)
    journal.update(old_name=keep.name)
    try:
        fs.link(path, keep)
        linked = fs.stat(keep)
        if (linked.st_dev, linked.st_ino) != (held.st_dev, held.st_ino):
            # A filesystem whose inode numbers follow names (some FUSE layers): the link cannot be
            # told from another file later, so it is no name riffd can rely on.
            remove_leftover(fs, keep)
            raise OSError(errno.EXDEV, "a hard link here does not keep the file's inode number")
    except OSError as exc:
        # No usable hard link here: the original's bytes stay reachable only through riffd's
        # descriptor.
        log.debug("%s: no hard link for the original here (%s)", path, exc)
        journal.update(old_name=None)
    try:
        _check_identity(fs, path, held)
        fs.replace(temp_path, path)
    except BaseException:
        if where_is(fs, path, held, new_fd) != COPY:
            # the original is still at its name (or lost, and put back from riffd's fd)
            remove_leftover(fs, keep)
        raise
    return RENAME


def _after_exchange(
    fs: RetryingFS,
    path: Path,
    temp_path: Path,
    held: os.stat_result,
    new_fd: int,
    new_size: int,
    journal: Journal,
) -> str:
    try:
        swapped_out = fs.stat(temp_path)
    except FileNotFoundError:
        # The filesystem took the exchange for a plain rename: the repaired copy is in place, the
        # original's name is gone (its bytes are in the backup and behind riffd's descriptor).
        journal.update(old_name=None)
        fall_back_to_rename(
            fs, held.st_dev, path, "it accepted an exchange and performed a plain rename"
        )
        return RENAME
    if (swapped_out.st_dev, swapped_out.st_ino) == (held.st_dev, held.st_ino):
        return EXCHANGE
    # Another program put its own file at the transcript's name in the window: it must stay there.
    try:
        fs.exchange(temp_path, path)
    except OSError as exc:
        raise SwapBackFailed(
            exc.errno or errno.EIO,
            f"another program put a new version of it in place while riffd was replacing it, and riffd could not "
            f"put that version back ({exc.strerror or exc}): it is at {temp_path}, and {path} holds riffd's "
            f"repaired copy; move it back with: mv {shlex.quote(str(temp_path))} {shlex.quote(str(path))}",
        ) from exc
    appended = _carry_tail(fs, new_fd, new_size, path)
    raise FileChanged(
        "another program put a new version of it in place while riffd was replacing it; that version is kept"
        + (
            f" ({appended} bytes written to riffd's copy meanwhile were added to it)"
            if appended
            else ""
        )
    )


def _carry_tail(fs: RetryingFS, new_fd: int, new_size: int, path: Path) -> int:
    """Append to `path` what other writers added to the repaired copy while it held the name; return
    the bytes."""
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


def _check_identity(fs: RetryingFS, path: Path, held: os.stat_result) -> None:
    """The last check before a rename: `path` must still be the file riffd holds."""
    try:
        current = fs.stat(path)
    except FileNotFoundError as exc:
        raise FileGone("it was deleted while riffd worked") from exc
    if (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
        raise FileChanged("it was replaced by another file while riffd worked")


def _exists(fs: RetryingFS, path: Path) -> bool:
    try:
        fs.stat(path)
    except FileNotFoundError:
        return False
    return True


def carry_late_appends(
    fs: RetryingFS,
    path: Path,
    original_fd: int,
    new_fd: int,
    carried_end: int,
    *,
    cut_tail: int | None = None,
) -> tuple[int, str | None]:
    """After the swap, copy what other writers still put into the old file (held open as
    `original_fd`) onto the new one (`new_fd`, O_APPEND), watching until it stays quiet; return the
    old file's size now covered, and a warning when the filesystem cannot tell (ESTALE: it dropped
    the old name at once, as NFS and libfuse's hard_remove do; late appends cannot be carried there,
    and the quiet period is the protection).

    Every call is retried (EIO), and a check that still fails is made again at the next tick, from
    the exact byte reached (a short write advances it), so a flaky cloud-synced folder neither stops
    the copy nor tears a line. Raise OSError only after LATE_APPEND_MAX_FAILURES failed checks: the
    caller must then keep the old file's bytes (they are reachable only through `original_fd`).

    `cut_tail`: where an unfinished last line began that the repair cut off. Bytes appended after it
    continue that line, so they are carried from there: the line comes back whole, as its writer
    meant it."""
    quiet_checks = failures = 0
    restored: str | None = None
    for _ in range(LATE_APPEND_MAX_CHECKS + LATE_APPEND_MAX_FAILURES):
        try:
            size_now = fs.fstat(original_fd).st_size
            if size_now > carried_end:
                if cut_tail is not None:
                    carried_end, cut_tail = cut_tail, None
                    restored = (
                        f"{path}: a writer continued its unfinished last line during the repair, so that line "
                        "was put back with what followed it"
                    )
                for chunk in iter_fd(
                    original_fd,
                    what=str(path),
                    fs=fs,
                    start=carried_end,
                    end=size_now,
                ):
                    view = memoryview(chunk)
                    while view:
                        written = fs.attempt(partial(fs.write, new_fd, view), f"the end of {path}")
                        if written <= 0:
                            raise OSError(errno.EIO, "write wrote nothing")
                        view = view[written:]
                        carried_end += written
                quiet_checks = 0
            else:
                quiet_checks += 1
                if quiet_checks >= LATE_APPEND_QUIET_CHECKS:
                    break
        except OSError as exc:
            # ESTALE (NFS, libfuse's hard_remove) or ENOENT (a FUSE layer that lost track of the
            # renamed-over file): the old file is out of reach, and so is anything still written to
            # it.
            if exc.errno in (errno.ESTALE, errno.ENOENT) and not isinstance(exc, ReadFailed):
                fsync_file(fs, new_fd, path)
                return carried_end, (
                    f"{path}: the filesystem dropped the old file at once (stale file handle), so "
                    "lines another writer might still have appended to it cannot be carried over "
                    "here; riffd only rewrites sessions idle for the quiet period, which is the "
                    "protection"
                )
            failures += 1
            if failures >= LATE_APPEND_MAX_FAILURES:
                raise
            log.debug("%s: copying late lines failed (%s); again at the next check", path, exc)
        time.sleep(LATE_APPEND_INTERVAL)
    fsync_file(fs, new_fd, path)
    return carried_end, restored


def late_append_failure(
    fs: RetryingFS,
    path: Path,
    original_fd: int,
    store: BackupStore,
    backup_id: str,
    exc: BaseException,
) -> Failed:
    """The late lines could not all be copied: the old file, reachable only through `original_fd`
    once riffd lets go of it, goes whole into a second verified backup, so no line written to it is
    lost."""
    try:
        size = fs.fstat(original_fd).st_size
        late = store.create(
            path, original_fd, size, None, (), reason="lines appended during the replace"
        )
    except (OSError, BackupError) as kept_exc:
        where = (
            f"riffd could not back up the old file either ({kept_exc}): lines written to it during the replace "
            f"may be missing; backup {backup_id} holds it as it was before"
        )
    else:
        where = (
            f"the old file, with every line written to it, is in backup {late.backup_id} "
            f"(`{backups_command(store.root, 'restore', late.backup_id, '--to', 'FILE')}` writes it "
            "out); compare the two before resuming"
        )
    return Failed(
        path,
        FailReason.LATE_APPEND_FAILED,
        f"{path}: repaired (backup {backup_id}), but lines another writer appended during the replace could "
        f"not all be copied into it ({exc}); {where}",
    )


def where_is(fs: RetryingFS, path: Path, held: os.stat_result, new_fd: int | None) -> str:
    """After a failure, return what `path` holds: ORIGINAL (the file riffd holds open), COPY
    (riffd's repaired copy), OTHER (another file), HIDDEN (nothing: the filesystem hid the original
    as `.fuse_hidden*`, which goes when riffd lets go of it) or GONE (nothing: the transcript was
    deleted).

    Judged on a listing of the folder first: a FUSE kernel may answer a stat of the name from its
    cache for a moment after the filesystem below hid the file."""
    folder = path.parent
    names = set(fs.listdir(folder))
    held_id = (held.st_dev, held.st_ino)
    if path.name in names:
        try:
            now = fs.stat(path)
        except FileNotFoundError:
            now = None
        if now is not None:
            if (now.st_dev, now.st_ino) == held_id:
                return ORIGINAL
            if new_fd is not None:
                new = fs.fstat(new_fd)
                if (now.st_dev, now.st_ino) == (new.st_dev, new.st_ino):
                    return COPY
            return OTHER
    for name in sorted(names):
        if name.startswith(FUSE_HIDDEN):
            try:
                hidden = fs.stat(folder / name)
            except OSError:
                continue
            if (hidden.st_dev, hidden.st_ino) == held_id:
                return HIDDEN
    return GONE


def put_original_back(
    fs: RetryingFS,
    path: Path,
    held: os.stat_result,
    original_fd: int,
    store: BackupStore,
    record: BackupRecord,
) -> str:
    """The filesystem lost the transcript in a failed rename (where_is says HIDDEN): write it again
    at `path` from the file riffd still holds open (every byte, appends included), falling back to
    the verified backup; return where it came from. Raise OSError when neither can be put in
    place."""
    sources: list[tuple[str, Callable[[], Iterable[bytes]]]] = [
        (
            "the file riffd held open",
            lambda: iter_fd(
                original_fd,
                what=str(path),
                fs=fs,
                end=fs.fstat(original_fd).st_size,
            ),
        ),
        (f"the verified backup {record.backup_id}", lambda: store.iter_bytes(record.backup_id)),
    ]
    last_error: OSError | None = None
    for source, chunks in sources:
        temp = temp_path_for(path)
        placed = linked = False
        try:
            new_fd = fs.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
            try:
                writer = OffsetWriter(fs, new_fd)
                for chunk in chunks():
                    writer.write(chunk)
                fs.fchmod(new_fd, stat.S_IMODE(held.st_mode))
                fsync_file(fs, new_fd, temp)
                linked = _place_at_empty_name(fs, temp, path, new_fd)
                placed = True
                if source.startswith("the file"):
                    append_fd = fs.open(path, os.O_WRONLY | os.O_APPEND | NOFOLLOW)
                    try:
                        carry_late_appends(fs, path, original_fd, append_fd, writer.offset)
                    finally:
                        fs.close(append_fd)
                fsync_folder(fs, path.parent)
            finally:
                fs.close(new_fd)
        except (OSError, BackupError) as exc:
            last_error = exc if isinstance(exc, OSError) else OSError(errno.EIO, str(exc))
            log.error("%s: could not put the transcript back from %s: %s", path, source, exc)
            continue
        finally:
            # closed by now: removing an open file's name is a rename on FUSE
            if not placed or linked:
                remove_leftover(fs, temp)
        log.error(
            "%s: the filesystem lost the transcript during a failed rename; put back from %s",
            path,
            source,
        )
        return source
    assert last_error is not None
    raise last_error


def _place_at_empty_name(fs: RetryingFS, temp: Path, path: Path, new_fd: int) -> bool:
    """Give the copy at `temp` the name `path`, which holds nothing (where_is said so): a hard link
    first (never replaces anything, and not a rename: the rename is what just failed), else a
    rename, retrying EIO. A FUSE kernel may still hold the old name in its cache for a moment
    (EEXIST although the folder does not list it): that is waited out, a few seconds at most. Return
    True when linked (`temp` is then still a name of the copy)."""
    deadline = time.monotonic() + 3.0
    while True:
        try:
            fs.link(temp, path)
        except FileExistsError:
            if path.name in fs.listdir(path.parent) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        except OSError as exc:
            log.debug("%s: no hard link here (%s); renaming instead", path, exc)
            break
        return True
    for attempt in range(1, fs.policy.attempts + 1):
        try:
            fs.replace(temp, path)
            return False
        except OSError as exc:
            new = fs.fstat(new_fd)
            try:
                now = fs.stat(path)
                if (now.st_dev, now.st_ino) == (new.st_dev, new.st_ino):
                    return False
            except FileNotFoundError:
                pass
            if exc.errno != errno.EIO or attempt == fs.policy.attempts:
                raise
            time.sleep(min(fs.policy.first_wait * 2 ** (attempt - 1), fs.policy.max_wait))
    return False
