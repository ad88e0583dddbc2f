"""The replace window: what another program does to the transcript between riffd's last check and
its swap.

Each test holds riffd's swap back through its own I/O seam (`FileSystem.exchange`) and acts in that
instant, as an editor or a sync client publishing a new version by rename would. A rename over the
transcript must survive, a deleted transcript must stay deleted, and a filesystem that cannot
exchange, or silently renames instead, must still get a correct repair and be named once in the log.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import transcript_bytes, transcript_line
from helpers.run import riffd_env
from riffd.fsio import FileSystem
from riffd.repair.backup import BackupStore
from riffd.repair.outcomes import Failed, FailReason, Repaired, Skipped, SkipReason
from riffd.repair.plan import render
from riffd.repair.writer import apply_plan
from test_apply import append_line, make_transcript, options_for, plan_for, temp_files

Hook = Callable[[Path], None]


class HeldSwapFS(FileSystem):
    """Runs `before(transcript)` just before riffd exchanges the transcript's name, and
    `after(transcript)` just after its first exchange (the moment a writer may append to what the
    name holds then)."""

    def __init__(self, before: Hook | None = None, after: Hook | None = None) -> None:
        self.before, self.after = before, after
        self.exchanges = 0

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        self.exchanges += 1
        first = self.exchanges == 1
        if first and self.before is not None:
            self.before(Path(dst))
        super().exchange(src, dst)
        if first and self.after is not None:
            self.after(Path(dst))


def publish_by_rename(path: Path, data: bytes) -> None:
    """Put a new version in place the way editors and sync clients do: write a temp file, rename it
    over."""
    staging = path.parent / f".{path.name}.syncthing.tmp"
    staging.write_bytes(data)
    os.replace(staging, path)


def test_a_new_version_renamed_over_the_transcript_in_the_window_survives(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    newer = transcript_bytes(25)  # the sync client's version: five more lines
    options = options_for(
        tmp_path, fs=HeldSwapFS(before=lambda target: publish_by_rename(target, newer))
    )
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED, outcome
    assert "new version" in outcome.detail and "that version is kept" in outcome.detail
    assert path.read_bytes() == newer
    assert temp_files(path.parent) == []
    # The original riffd planned for is in the backup: nothing of it is lost either.
    store = BackupStore(options.backup_dir)
    assert [store.open_bytes(record.backup_id) for record in store.list()] == [original]


def test_lines_appended_while_riffd_held_the_name_go_to_the_new_version(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    newer = transcript_bytes(25)
    late = transcript_line(99)
    fs = HeldSwapFS(
        before=lambda target: publish_by_rename(target, newer),
        after=lambda target: append_line(target, late),
    )
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=fs))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED, outcome
    assert path.read_bytes() == newer + late
    assert temp_files(path.parent) == []


def test_a_transcript_deleted_in_the_window_stays_deleted(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, transcript_bytes(20))
    options = options_for(tmp_path, fs=HeldSwapFS(before=lambda target: target.unlink()))
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.GONE, outcome
    assert outcome.detail == f"{path}: deleted while riffd worked; nothing to do"
    assert not path.exists()
    assert temp_files(path.parent) == []


class NoExchangeFS(FileSystem):
    """A filesystem that refuses RENAME_EXCHANGE (EINVAL), as some network and FUSE filesystems
    do."""

    def __init__(self, before: Hook | None = None) -> None:
        self.before = before

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if self.before is not None:
            self.before(Path(dst))
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), os.fspath(src))


class FlagDroppingFS(FileSystem):
    """A FUSE layer that accepts the exchange, returns 0 and performs a plain rename
    (shared/filesystems.md)."""

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        os.replace(src, dst)


@pytest.mark.parametrize("fs_class", [NoExchangeFS, FlagDroppingFS])
def test_without_a_working_exchange_the_repair_is_correct_and_said_once(
    tmp_path: Path, fs_class: type[FileSystem], caplog: pytest.LogCaptureFixture
) -> None:
    fs = fs_class()
    first = make_transcript(tmp_path / "one", transcript_bytes(20))
    second = make_transcript(tmp_path / "two", transcript_bytes(30))
    with caplog.at_level(logging.WARNING, logger="riffd.repair.swap"):
        for path in (first, second):
            original = path.read_bytes()
            plan = plan_for(path)
            outcome = apply_plan(plan, options_for(path.parents[3], fs=fs))
            assert isinstance(outcome, Repaired), outcome
            assert path.read_bytes() == render(original, plan.edits)
            assert temp_files(path.parent) == []
    said = [
        record.getMessage()
        for record in caplog.records
        if "cannot exchange two names" in record.getMessage()
    ]
    assert len(said) == 1, said
    assert str(first) in said[0]


def test_with_the_rename_fallback_a_deleted_transcript_is_not_brought_back(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, transcript_bytes(20))
    outcome = apply_plan(
        plan_for(path),
        options_for(tmp_path, fs=NoExchangeFS(before=lambda target: target.unlink())),
    )
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.GONE, outcome
    assert not path.exists()
    assert temp_files(path.parent) == []


class SwapBackFailsFS(HeldSwapFS):
    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if self.exchanges == 1:
            self.exchanges += 1
            raise OSError(errno.EIO, os.strerror(errno.EIO), os.fspath(src))
        super().exchange(src, dst)


def test_a_new_version_that_cannot_be_put_back_is_kept_and_named(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    newer = transcript_bytes(25)
    plan = plan_for(path)
    fs = SwapBackFailsFS(before=lambda target: publish_by_rename(target, newer))
    outcome = apply_plan(plan, options_for(tmp_path, fs=fs))
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.SWAP_BACK_FAILED, outcome
    [kept] = [path.parent / name for name in temp_files(path.parent) if name.endswith(".tmp")]
    assert kept.read_bytes() == newer  # the new version, never deleted
    assert path.read_bytes() == render(original, plan.edits)
    assert str(kept) in outcome.detail and "mv " in outcome.detail


class FlakyAfterSwapFS(HeldSwapFS):
    """After the exchange, a client still appends to the old file (through the descriptor it opened
    before), and the filesystem fails: `fstat` of any descriptor with EIO `fstat_failures` times in
    a row, and every append to the repaired copy when `writes_fail` (a cloud-synced folder at its
    worst; riffd's backup folder stays healthy)."""

    def __init__(self, late: bytes, fstat_failures: int = 0, writes_fail: bool = False) -> None:
        super().__init__(after=self._client_appends)
        self.late, self.fstat_failures, self.writes_fail = late, fstat_failures, writes_fail
        self.swapped = False
        self.copy_appenders: set[int] = set()

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        # riffd appends late lines to the repaired file through such a descriptor
        if flags & os.O_APPEND:
            self.copy_appenders.add(fd)
        return fd

    def _client_appends(self, target: Path) -> None:
        old_name = next(
            target.parent / name for name in temp_files(target.parent) if name.endswith(".tmp")
        )
        # lands in the old file, which riffd then holds only by descriptor
        append_line(old_name, self.late)
        self.swapped = True

    def fstat(self, fd: int) -> os.stat_result:
        if self.swapped and self.fstat_failures > 0:
            self.fstat_failures -= 1
            raise OSError(errno.EIO, "Input/output error")
        return super().fstat(fd)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.swapped and self.writes_fail and fd in self.copy_appenders:
            raise OSError(errno.EIO, "Input/output error")
        return super().write(fd, data)


def test_lines_appended_to_the_old_file_are_carried_over_through_io_errors(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    late = transcript_line(99)
    plan = plan_for(path)
    # More failures in a row than one call's retries: the copy must go on at the next check, not
    # give up.
    fs = FlakyAfterSwapFS(late, fstat_failures=5)
    outcome = apply_plan(plan, options_for(tmp_path, fs=fs))
    assert isinstance(outcome, Repaired), outcome
    assert path.read_bytes() == render(original, plan.edits) + late  # the late line, once, whole
    assert outcome.carried_over_bytes == len(late)
    assert temp_files(path.parent) == []


def test_late_lines_that_cannot_be_copied_are_kept_in_a_second_backup(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    late = transcript_line(99)
    options = options_for(tmp_path, fs=FlakyAfterSwapFS(late, writes_fail=True))
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.LATE_APPEND_FAILED, outcome
    store = BackupStore(options.backup_dir)
    before, old_file = store.list()
    assert store.open_bytes(before.backup_id) == original
    # every line written to the old file
    assert store.open_bytes(old_file.backup_id) == original + late
    assert f"backup {old_file.backup_id}" in outcome.detail
    # the command the note advises, run as printed (its backup folder is not the default one)
    (command,) = [word for word in outcome.detail.split("`")[1::2] if " restore " in word]
    out = tmp_path / "old file.jsonl"
    command = command.replace(" FILE", f" {shlex.quote(str(out))}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "riffd").write_text(f'#!/bin/sh\nexec {sys.executable} -m riffd "$@"\n')
    (bin_dir / "riffd").chmod(0o755)
    env = riffd_env(HOME=str(tmp_path / "home"), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    ran = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert out.read_bytes() == original + late
