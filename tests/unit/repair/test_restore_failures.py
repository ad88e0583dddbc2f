"""What a restore that fails says, against what is on disk: real files, an I/O seam that fails the
flush of the destination's folder, after the restored file is in place."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

from riffd.fsio import FileSystem
from riffd.repair.outcomes import ApplyOptions, Failed
from riffd.repair.restore import put_back, put_back_file


class FolderFlushFails(FileSystem):
    """Every fsync of the folder `folder` (opened with O_DIRECTORY) fails with EIO."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.folders = folder, set[int]()

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        if flags & getattr(os, "O_DIRECTORY", 0) and Path(path) == self.folder:
            self.folders.add(fd)
        return fd

    def fsync(self, fd: int) -> None:
        if fd in self.folders:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self.folders.discard(fd)
        super().close(fd)


def test_a_restore_whose_last_step_fails_says_the_file_is_in_place(tmp_path: Path) -> None:
    """The review found "nothing was written there" and "the file there is untouched" said of
    files that were in place, restored, when the folder's flush failed after the rename."""
    place = tmp_path / "place"
    place.mkdir()
    options = ApplyOptions(
        backup_dir=tmp_path / "backups", fs=FolderFlushFails(place), quiet_period=0
    )
    new = place / "new.jsonl"
    outcome = put_back(
        lambda: [b"restored\n"], new, "backup-1", replace=False, options=options, reason="test"
    )
    assert isinstance(outcome, Failed), outcome
    assert "the restored file is in place but the last step failed" in outcome.detail
    assert "nothing was written" not in outcome.detail
    assert new.read_bytes() == b"restored\n"
    kept = place / "output.txt"  # a session's file kept whole, put back over the one there
    kept.write_bytes(b"before\n")
    long_ago = time.time() - 3600
    os.utime(kept, (long_ago, long_ago))
    outcome = put_back_file(
        lambda: [b"restored\n"],
        kept,
        "blob-1",
        mode=0o600,
        mtime_ns=time.time_ns(),
        replace=True,
        options=options,
        reason="test",
    )
    assert isinstance(outcome, Failed), outcome
    assert "the restored file is in place but the last step failed" in outcome.detail
    assert "untouched" not in outcome.detail
    assert kept.read_bytes() == b"restored\n"


def test_a_restore_through_a_file_says_the_path_is_wrong_not_the_disk(tmp_path: Path) -> None:
    """`--to afile/x.jsonl` said "I/O error ... Check the disk and run again" where the path
    runs through a file."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    options = ApplyOptions(backup_dir=tmp_path / "backups", quiet_period=0)
    outcome = put_back(
        lambda: [b"restored\n"],
        a_file / "x.jsonl",
        "backup-1",
        replace=False,
        options=options,
        reason="test",
    )
    assert isinstance(outcome, Failed), outcome
    assert "Check the disk" not in outcome.detail and "I/O error" not in outcome.detail
    assert "a part of that path is a file where a folder should be" in outcome.detail, (
        outcome.detail
    )
    assert a_file.read_text() == ""
