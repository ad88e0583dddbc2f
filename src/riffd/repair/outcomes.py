"""What a repair or a restore did: Repaired, Restored, Skipped (on purpose, with a reason) or Failed
(with a message naming the file and what to do), and the options they ran with."""

from __future__ import annotations

import errno
import logging
import os
import stat
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from riffd.claude_code.folders import claude_config_dir
from riffd.claude_code.liveness import claude_dirs_for
from riffd.display import shell_command
from riffd.fsio import (
    DEFAULT_RETRY,
    REAL_FILES,
    REAL_FS,
    FileSystem,
    ReadFailed,
    RetryingFS,
    RetryPolicy,
)
from riffd.paths import default_backup_dir
from riffd.repair.plan import Edit
from riffd.transcript.scan import FileIdentity

log = logging.getLogger(__name__)


class SkipReason(StrEnum):
    """Why a repair was not attempted; the values are the names users see."""

    LIVE = "live"
    CHANGED = "changed"
    SYMLINK = "symlink"
    HARD_LINKED = "hard_linked"
    BUSY = "busy"
    NOTHING_TO_DO = "nothing_to_do"
    GONE = "gone"


class FailReason(StrEnum):
    """Why a repair that was attempted could not be completed; the values are the names users
    see."""

    UNSAFE_BACKUP_DIR = "unsafe_backup_dir"
    NO_SPACE = "no_space"
    IO_ERROR = "io_error"
    PERMISSION = "permission"
    BACKUP_FAILED = "backup_failed"
    INVALID_PLAN = "invalid_plan"
    NOT_FOUND = "not_found"
    DESTINATION_EXISTS = "destination_exists"
    LATE_APPEND_FAILED = "late_append_failed"
    SWAP_BACK_FAILED = "swap_back_failed"


def symlink_detail(path: Path) -> str:
    """What a user reads when a transcript's path is a symlink: riffd never rewrites a link, and
    which file to repair instead (the link's final target, when it can be told)."""
    target = os.path.realpath(path)
    if target == os.path.abspath(path) or not os.path.exists(target):
        return f"{path}: it is a symlink; riffd never rewrites a link: repair the file it points to instead"
    return (
        f"{path}: it is a symlink to {target}; riffd never rewrites a link: repair the file it points to "
        f"instead (`{shell_command('riffd', 'fix', target)}`)"
    )


class FileChanged(Exception):
    """The transcript is not what was planned for any more; becomes Skipped(`reason`): changed, or
    symlink when its path now names a symlink (a link is never rewritten: the file it points to is
    the one to repair)."""

    def __init__(self, message: str, reason: SkipReason = SkipReason.CHANGED) -> None:
        super().__init__(message)
        self.reason = reason


def still_as_scanned(identity: FileIdentity, fs: RetryingFS = REAL_FILES) -> None:
    """Given a transcript's identity as scanned, return when its path still names that file, grown
    or not; raise FileChanged (reason symlink when the path is a link) when it was written to in
    place or replaced since."""
    path = identity.path
    status = fs.stat(path)
    if stat.S_ISLNK(status.st_mode):
        raise FileChanged(symlink_detail(Path(path)), SkipReason.SYMLINK)
    if (status.st_dev, status.st_ino, status.st_mtime_ns) != (
        identity.dev,
        identity.ino,
        identity.mtime_ns,
    ) or (status.st_size < identity.size):
        raise FileChanged(
            f"{path}: changed during the run (it was written or replaced after riffd read it); "
            "scan it again"
        )


class FileGone(Exception):
    """The transcript was deleted while riffd worked; becomes Skipped(gone), and nothing is
    re-created."""


@dataclass(frozen=True)
class Repaired:
    """The file now holds the repaired content; `backup_id` names the verified copy of what it
    held."""

    path: Path
    backup_id: str
    backup_path: Path
    edits: tuple[Edit, ...]
    carried_over_bytes: int  # bytes appended by another writer while riffd worked, copied verbatim
    warnings: tuple[str, ...] = ()  # what the user should know although the repair is done
    # the journal of a hand-over a later run finishes (a writer held the old file)
    pending_swap: Path | None = None
    # (st_dev, st_ino) of the repaired copy now at the path: what a look right after reads as
    # riffd's own rewrite (another file renamed over it since is read as what it is)
    copy_id: tuple[int, int] | None = None


@dataclass(frozen=True)
class Skipped:
    """Nothing was written to the transcript, on purpose; `detail` says why in words."""

    path: Path
    reason: SkipReason
    detail: str


@dataclass(frozen=True)
class Failed:
    """The repair could not be completed; `detail` names the file and says what to do."""

    path: Path
    reason: FailReason
    detail: str


@dataclass(frozen=True)
class Restored:
    """The backup's bytes are at `path`; `safety_backup_id` names the backup of what was there
    before."""

    path: Path
    backup_id: str
    safety_backup_id: str | None
    carried_over_bytes: int


RepairOutcome = Repaired | Skipped | Failed
RestoreOutcome = Restored | Skipped | Failed


@dataclass(frozen=True)
class ApplyOptions:
    """Where backups go, what counts as live, and the I/O seam; see the module docstring for the
    sequence."""

    backup_dir: Path = field(default_factory=default_backup_dir)
    claude_dir: Path = field(default_factory=claude_config_dir)
    roots: tuple[Path, ...] = ()
    quiet_period: float = 120.0
    fs: FileSystem = REAL_FS
    retry: RetryPolicy = DEFAULT_RETRY
    session_id: str | None = None
    stale_temp_seconds: float = 3600.0
    settle_rounds: int = 6

    def claude_dirs(self, path: Path) -> tuple[Path, ...]:
        """Return every Claude Code folder whose registry of running sessions may name `path`'s
        session."""
        return claude_dirs_for(path, self.claude_dir, self.roots)

    @property
    def files(self) -> RetryingFS:
        """The seam with the retry policy: what a repair reads and writes through."""
        return RetryingFS.of(self.fs, self.retry)


def gone(path: Path) -> Skipped:
    """The outcome for a transcript deleted while riffd worked on it."""
    return Skipped(path, SkipReason.GONE, f"{path}: deleted while riffd worked; nothing to do")


def failure(
    path: Path,
    exc: OSError,
    stage: str,
    *,
    replaced: bool = False,
    checked: bool = False,
    restoring: str | None = None,
) -> Failed:
    """Given an OSError met while `stage` (a phrase: "backing it up to ..."), return the Failed
    outcome whose message names the file, what happened, whether the transcript is untouched
    (`checked`: riffd looked after the failure), and what to do. `restoring`: a restore's, not a
    repair's: "over" a file there, or "new" where there was none."""
    done = "not repaired" if restoring is None else "not restored"
    state = (
        f"the {'repaired' if restoring is None else 'restored'} file is in place but the last step "
        "failed"
        if replaced
        else "nothing was written there"
        if restoring == "new"
        else "the file there is untouched"
        if restoring is not None
        else "the transcript is untouched (checked)"
        if checked
        else "the transcript is untouched"
    )
    if isinstance(exc, ReadFailed):
        return Failed(
            path,
            FailReason.IO_ERROR,
            f"{path}: {done} while {stage} ({state}): {exc.strerror}",
        )
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Failed(
            path,
            FailReason.NO_SPACE,
            f"{path}: {done}, no space left on the device while {stage}{where}; {state}. "
            "Free some space (or choose a backup folder on another disk) and run again.",
        )
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return Failed(
            path,
            FailReason.PERMISSION,
            f"{path}: {done}, permission denied while {stage}{where}: {exc.strerror}; {state}. "
            "Check that you own the file, its folder and the backup folder.",
        )
    wrong_path = {
        errno.ENOTDIR: "a part of that path is a file where a folder should be",
        errno.EISDIR: "that path is a folder where a file should be",
        errno.ELOOP: "a symbolic link on that path leads in a loop",
        errno.ENAMETOOLONG: "a name on that path is longer than the file system takes",
    }.get(exc.errno or 0)
    if wrong_path is not None:  # (a path that cannot be, not a failing disk)
        return Failed(
            path,
            FailReason.IO_ERROR,
            f"{path}: {done}, while {stage}{where}: {exc.strerror}; {state}. It is the path: "
            f"{wrong_path}" + ("; name another and run again." if restoring else "."),
        )
    return Failed(
        path,
        FailReason.IO_ERROR,
        f"{path}: {done}, I/O error while {stage}{where}: {exc}; {state}. "
        "Check the disk and run again.",
    )
