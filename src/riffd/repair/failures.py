"""After a failure once the backup exists: look at what the transcript's name holds before saying
anything ("untouched" only when it is the original still), and put back an original the filesystem
lost in a failed rename.
"""

from __future__ import annotations

import os
from pathlib import Path

from riffd.fsio import (
    RetryingFS,
)
from riffd.repair.backup import BackupRecord, BackupStore, backups_command
from riffd.repair.outcomes import (
    Failed,
    FailReason,
    RepairOutcome,
    Skipped,
    SkipReason,
    failure,
    gone,
)
from riffd.repair.swap import (
    GONE,
    HIDDEN,
    ORIGINAL,
    put_original_back,
    where_is,
)

LOOK_ATTEMPTS = 5


def look_at(fs: RetryingFS, path: Path, held: os.stat_result, temp_fd: int | None) -> str:
    """`where_is`, made again while a flaky folder fails it (each try retries EIO already)."""
    for attempt in range(LOOK_ATTEMPTS):
        try:
            return where_is(fs, path, held, temp_fd)
        except OSError:
            if attempt + 1 == LOOK_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def checked_failure(
    fs: RetryingFS,
    path: Path,
    held: os.stat_result,
    original_fd: int,
    temp_fd: int | None,
    store: BackupStore,
    record: BackupRecord,
    exc: OSError,
    stage: str,
) -> RepairOutcome:
    """After a failure once the backup exists, look at what the path holds before saying anything:
    "untouched" only when it is the original still; put back an original the filesystem lost in a
    failed rename (libfuse hides a renamed-over open file and deletes it when riffd lets go of
    it)."""
    try:
        where = look_at(fs, path, held, temp_fd)
    except OSError as look:
        return Failed(
            path,
            FailReason.IO_ERROR,
            f"{path}: not repaired, I/O error while {stage}: {exc.strerror or exc}; riffd could not look at "
            f"what its name holds now either ({look.strerror or look}); the verified backup "
            f"{record.backup_id} holds the transcript as it was; run riffd again once the folder answers",
        )
    if where == ORIGINAL:
        return failure(path, exc, stage, checked=True)
    if where == HIDDEN:
        try:
            source = put_original_back(fs, path, held, original_fd, store, record)
        except OSError as lost:
            return Failed(
                path,
                FailReason.IO_ERROR,
                f"{path}: not repaired, I/O error while {stage}: {exc.strerror or exc}; the filesystem lost "
                f"the transcript during the failed rename and riffd could not put it back ({lost}): its "
                f"bytes are in the verified backup {record.backup_id}; "
                f"`{backups_command(store.root, 'restore', record.backup_id)}` puts it back once the "
                "disk or sync client works again",
            )
        return Failed(
            path,
            FailReason.IO_ERROR,
            f"{path}: not repaired, I/O error while {stage}: {exc.strerror or exc}; the filesystem lost the "
            f"transcript during the failed rename, and riffd put it back from {source}: it is as it was "
            f"(checked). Check the disk or sync client and run again.",
        )
    if where == GONE:
        return gone(path)
    return Skipped(
        path,
        SkipReason.CHANGED,
        f"{path}: another file took its place while riffd worked ({exc}); "
        "it is left as it is; scan it again",
    )
