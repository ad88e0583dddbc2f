"""Putting a backup back: to a new file, or over its original through the same safe path as a repair
(an idle session, a verified backup of what is there now, an atomic replace). `put_back` does it for
any bytes: a backup's, or a transcript riffd's archive rebuilds (`riffd archive restore`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from riffd.claude_code.liveness import session_liveness
from riffd.claude_code.session_files import kept_mode
from riffd.fsio import (
    NOFOLLOW,
    FileSystem,
    RetryingFS,
    fsync_folder,
    remove_leftover,
    write_all,
)
from riffd.repair.backup import BackupError, BackupStore, UnknownBackup
from riffd.repair.copy import read_range
from riffd.repair.locks import temp_path_for
from riffd.repair.outcomes import (
    ApplyOptions,
    Failed,
    FailReason,
    FileChanged,
    Repaired,
    Restored,
    RestoreOutcome,
    Skipped,
    SkipReason,
    failure,
)
from riffd.repair.writer import rewrite
from riffd.transcript.scan import FileIdentity

log = logging.getLogger(__name__)


def _identity_now(path: Path, fs: RetryingFS) -> FileIdentity:
    """The identity of the regular file at `path`; FileChanged for anything else (a FIFO is opened
    without waiting for a writer, as the hooks open a transcript)."""
    fd = fs.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    try:
        status = fs.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise FileChanged("not a regular file; riffd never replaces it")
        digest = hashlib.sha256()
        for _offset, chunk in read_range(fs, fd, 0, status.st_size, path=path):
            digest.update(chunk)
    finally:
        fs.close(fd)
    return FileIdentity(
        path=str(path),
        dev=status.st_dev,
        ino=status.st_ino,
        size=status.st_size,
        mtime_ns=status.st_mtime_ns,
        sha256=digest.hexdigest(),
    )


def _give_folder_owner(fs: FileSystem, fd: int, folder: Path) -> None:
    """A new file gets the owner of its folder, so riffd run as root leaves a user's restored
    transcript theirs; where only root may give a file away, it stays the writer's."""
    owner, mine = fs.stat(folder), fs.fstat(fd)
    if (owner.st_uid, owner.st_gid) == (mine.st_uid, mine.st_gid):
        return
    try:
        fs.fchown(fd, owner.st_uid, owner.st_gid)
    except PermissionError:
        log.debug("cannot give the restored %s the owner of %s", fd, folder)


def _restore_to_new_file(
    chunks: Iterable[bytes],
    label: str,
    destination: Path,
    fs: FileSystem,
    *,
    mode: int = 0o600,
    mtime_ns: int | None = None,
) -> RestoreOutcome:
    temp_path = temp_path_for(destination)
    stage, placed = f"writing the restored copy beside {destination}", False
    try:
        temp_fd = fs.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
        try:
            for chunk in chunks:
                write_all(fs, temp_fd, chunk)
            _give_folder_owner(fs, temp_fd, destination.parent)
            if mode != 0o600:
                fs.fchmod(temp_fd, mode)
            if mtime_ns is not None:
                fs.futimens(temp_fd, mtime_ns)  # (a link keeps it: the same file)
            fs.fsync(temp_fd)
        finally:
            fs.close(temp_fd)
        stage = f"putting the restored copy at {destination}"
        try:
            # link() fails when the destination exists: a file that appeared meanwhile is never
            # overwritten.
            fs.link(temp_path, destination)
        except FileExistsError:
            return Skipped(
                destination, SkipReason.CHANGED, f"{destination}: a file appeared there meanwhile"
            )
        except OSError as exc:
            if exc.errno not in (
                errno.EPERM,
                errno.ENOTSUP,
                errno.EOPNOTSUPP,
                errno.EXDEV,
                errno.EMLINK,
            ):
                raise
            # Filesystems without hard links: check and rename, accepting a tiny race.
            if os.path.lexists(destination):
                return Skipped(
                    destination,
                    SkipReason.CHANGED,
                    f"{destination}: a file appeared there meanwhile",
                )
            fs.replace(temp_path, destination)
        stage, placed = f"flushing the folder of {destination}", True
        fsync_folder(fs, destination.parent)
    except BackupError as exc:
        return Failed(
            destination, FailReason.BACKUP_FAILED, f"{exc}; nothing was written to {destination}"
        )
    except OSError as exc:
        return failure(destination, exc, stage, replaced=placed, restoring="new")
    finally:
        remove_leftover(fs, temp_path)
    return Restored(destination, label, safety_backup_id=None, carried_over_bytes=0)


def restore_backup(
    store: BackupStore,
    backup_id: str,
    to: Path | None = None,
    *,
    overwrite: bool = False,
    options: ApplyOptions | None = None,
) -> RestoreOutcome:
    """Given a store and backup id, write the backup to `to` (refusing an existing file unless
    `overwrite`) or back over its original path, which, like a repair, needs an idle session and
    first takes a verified backup of the current file; return Restored, Skipped or Failed."""
    files = store.fs if isinstance(store.fs, RetryingFS) else RetryingFS(store.fs)
    effective = options or ApplyOptions(backup_dir=store.root, fs=files.seam, retry=files.policy)
    try:
        record = store.get(backup_id)
    except UnknownBackup as exc:
        return Failed(Path(to or backup_id), FailReason.NOT_FOUND, str(exc))
    except (BackupError, OSError) as exc:
        return Failed(Path(to or f"<backup {backup_id}>"), FailReason.BACKUP_FAILED, str(exc))
    original = Path(record.source_path)
    destination = Path(to) if to is not None else original
    is_original = os.path.abspath(destination) == os.path.abspath(original)
    return put_back(
        lambda: store.iter_bytes(backup_id),
        destination,
        backup_id,
        replace=is_original or overwrite,
        options=effective,
        reason=f"before restoring {backup_id}",
        file_name=original.name,
    )


def put_back(
    chunks: Callable[[], Iterable[bytes]],
    destination: Path,
    label: str,
    *,
    replace: bool,
    options: ApplyOptions,
    reason: str,
    file_name: str = "session.jsonl",
    mtime_ns: int | None = None,
) -> RestoreOutcome:
    """Write the bytes `chunks()` gives (`label` names them in the outcome) to `destination`: as a
    new file (with the owner of its folder; never over a file that appears meanwhile), or, when
    `replace`, over the file there as a repair rewrites one (`rewrite`: only while its session is
    idle, under its lock, after a verified backup of what is there, noted as `reason`; lines
    appended meanwhile are kept after it). `mtime_ns`: the modification time to give it (a replaced
    file only when nothing was appended meanwhile). Return Restored, Skipped or Failed; an error the
    chunks raise propagates, and then nothing was written to `destination`."""
    fs = options.fs
    try:
        status = fs.stat(destination)
    except FileNotFoundError:
        if not os.path.isdir(destination.parent):
            return Failed(
                destination, FailReason.NOT_FOUND, f"{destination}: its folder does not exist"
            )
        return _restore_to_new_file(chunks(), label, destination, fs, mtime_ns=mtime_ns)
    except OSError as exc:
        return failure(destination, exc, "reading its status", restoring="over")
    if stat.S_ISDIR(status.st_mode):  # never a file to replace, --force or not
        return Failed(
            destination,
            FailReason.DESTINATION_EXISTS,
            f"{destination}: a folder is there; give the path of a file, e.g. {destination / file_name}",
        )
    if not replace:
        return Failed(
            destination,
            FailReason.DESTINATION_EXISTS,
            f"{destination}: a file is already there; choose another path, or --force to replace it "
            "(after a backup of it)",
        )
    try:
        current = _identity_now(destination, options.files)
    except FileChanged as exc:
        return Skipped(destination, SkipReason.CHANGED, f"{destination}: {exc}")
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Skipped(destination, SkipReason.SYMLINK, f"{destination}: it is a symlink")
        return failure(destination, exc, "reading the current file", restoring="over")
    written = _Counted(chunks())
    outcome = rewrite(destination, current, written, (), options, edits=(), backup_reason=reason)
    if isinstance(outcome, Repaired):
        if mtime_ns is not None and not outcome.carried_over_bytes:
            _set_time_if(destination, written.size, mtime_ns, fs)
        return Restored(
            destination,
            label,
            safety_backup_id=outcome.backup_id,
            carried_over_bytes=outcome.carried_over_bytes,
        )
    if isinstance(outcome, Failed):
        # (the rewrite words its failures as a repair's: "not repaired ... the repaired copy"; only
        # those words change, not a path that holds "repaired")
        detail = outcome.detail
        for repair_words in ("not repaired", "the repaired copy", "the repaired file"):
            detail = detail.replace(repair_words, repair_words.replace("repaired", "restored"))
        return Failed(outcome.path, outcome.reason, detail)
    return outcome


class _Counted:
    """The chunks of a restore, counting the bytes they give."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks, self.size = chunks, 0

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.size += len(chunk)
            yield chunk


def _set_time_if(path: Path, size: int, mtime_ns: int, fs: FileSystem) -> None:
    """Give `path` the modification time `mtime_ns` if it still holds `size` bytes (nothing appended
    since it was written); a file that cannot be opened keeps its time."""
    try:
        fd = fs.open(path, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    try:
        if fs.fstat(fd).st_size == size:
            fs.futimens(fd, mtime_ns)
    except OSError as exc:
        log.debug("cannot give %s its archived modification time: %s", path, exc)
    finally:
        fs.close(fd)


def put_back_file(
    chunks: Callable[[], Iterable[bytes]],
    destination: Path,
    label: str,
    *,
    mode: int,
    mtime_ns: int,
    replace: bool,
    options: ApplyOptions,
    reason: str,
) -> RestoreOutcome:
    """Write a session's file kept whole (a saved tool output, a checkpoint:
    riffd.archive.wholefiles) to `destination`: as a new file, `mode`'s bits for its owner only,
    with the owner of its folder and the time `mtime_ns` (never over a file that appears meanwhile);
    or, when `replace`, over the file there: only while its session is idle (`options.session_id`),
    after a verified backup of it (noted as `reason`), and only if it is still the file backed up
    when the new one is renamed over it (its owner kept). Return Restored, Skipped or Failed; an
    error the chunks raise propagates, and then nothing was written to `destination`."""
    fs, private = options.fs, stat.S_IMODE(kept_mode(mode))
    try:
        status = fs.stat(destination)
    except FileNotFoundError:
        if not os.path.isdir(destination.parent):
            return Failed(
                destination, FailReason.NOT_FOUND, f"{destination}: its folder does not exist"
            )
        return _restore_to_new_file(
            chunks(), label, destination, fs, mode=private, mtime_ns=mtime_ns
        )
    except OSError as exc:
        return failure(destination, exc, "reading its status", restoring="over")
    if not stat.S_ISREG(status.st_mode):
        return Skipped(
            destination,
            SkipReason.SYMLINK if stat.S_ISLNK(status.st_mode) else SkipReason.CHANGED,
            f"{destination}: not a regular file; riffd never replaces it",
        )
    if not replace:
        return Failed(
            destination, FailReason.DESTINATION_EXISTS, f"{destination}: a file is already there"
        )
    live, why = session_liveness(
        destination,
        options.claude_dirs(destination),
        options.quiet_period,
        session_id=options.session_id,
        fs=fs,
    )
    if live:
        return Skipped(destination, SkipReason.LIVE, f"{destination}: {why}")
    try:
        fd = fs.open(destination, os.O_RDONLY | NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return failure(destination, exc, "opening the current file", restoring="over")
    try:
        before = fs.fstat(fd)
        backup = BackupStore(options.backup_dir, fs=options.files).create(
            destination, fd, before.st_size, reason=reason
        )
    except BackupError as exc:
        return Failed(
            destination, FailReason.BACKUP_FAILED, f"{exc}; {destination} was not replaced"
        )
    except OSError as exc:
        return failure(destination, exc, f"backing it up to {options.backup_dir}", restoring="over")
    finally:
        fs.close(fd)
    temp_path = temp_path_for(destination)
    placed = False
    try:
        temp_fd = fs.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, 0o600)
        try:
            for chunk in chunks():
                write_all(fs, temp_fd, chunk)
            with contextlib.suppress(PermissionError):
                fs.fchown(temp_fd, before.st_uid, before.st_gid)
            fs.fchmod(temp_fd, private)
            fs.futimens(temp_fd, mtime_ns)
            fs.fsync(temp_fd)
        finally:
            fs.close(temp_fd)
        now = fs.stat(destination)
        if (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) != (
            before.st_dev,
            before.st_ino,
            before.st_size,
            before.st_mtime_ns,
        ):
            return Skipped(
                destination,
                SkipReason.CHANGED,
                f"{destination}: it changed while it was backed up; "
                f"not replaced (the backup {backup.backup_id} holds what was there)",
            )
        fs.replace(temp_path, destination)
        placed = True
        fsync_folder(fs, destination.parent)
    except OSError as exc:
        stage = (
            f"flushing the folder of {destination}"
            if placed
            else f"writing the restored copy beside {destination}"
        )
        return failure(destination, exc, stage, replaced=placed, restoring="over")
    finally:
        remove_leftover(fs, temp_path)
    return Restored(destination, label, safety_backup_id=backup.backup_id, carried_over_bytes=0)
