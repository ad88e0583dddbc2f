"""apply_plan: the one writer. Each test tries to make it lose or corrupt a user's bytes."""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import dead_pid, identity_of, line_spans, transcript_bytes, transcript_line
from helpers.run import riffd_env
from riffd.fsio import FileSystem, RetryPolicy
from riffd.repair.backup import BackupStore
from riffd.repair.locks import TEMP_NAME, lock_path_for, remove_stale_temps, temp_path_for
from riffd.repair.outcomes import (
    ApplyOptions,
    Failed,
    FailReason,
    Repaired,
    RepairOutcome,
    Skipped,
    SkipReason,
)
from riffd.repair.plan import Edit, InsertLine, RemoveLine, RepairPlan, ReplaceLine, render
from riffd.repair.recovery import recover_and_sweep
from riffd.repair.writer import apply_plan
from riffd.transcript.findings import Finding, FindingClass

SESSION = "9c0ffee0-1234-5678-9abc-def012345678"
FAST_RETRY = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002)


# -- helpers ---------------------------------------------------------------------------------------


def make_transcript(tmp_path: Path, data: bytes, *, age: float = 3600) -> Path:
    path = tmp_path / "claude" / "projects" / "-home-me-work" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, 0o640)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def plan_for(path: Path, edits: list[Edit] | None = None) -> RepairPlan:
    """Remove line 2, replace line 4, insert after line 6: one edit of each kind."""
    spans = line_spans(path.read_bytes())
    if edits is None:
        edits = [
            RemoveLine(spans[1], "duplicate result"),
            ReplaceLine(spans[3], b'{"type":"user","uuid":"replaced"}\n', "fix"),
            InsertLine(spans[5], b'{"type":"user","uuid":"inserted"}\n', "missing result"),
        ]
    finding = Finding(
        FindingClass.DUPLICATE_TOOL_RESULT, str(path), (2,), "two results", tool_id="toolu_9"
    )
    return RepairPlan(source=identity_of(path), edits=tuple(edits), fixes=(finding,))


def options_for(tmp_path: Path, **overrides: object) -> ApplyOptions:
    settings: dict[str, object] = {
        "backup_dir": tmp_path / "state" / "backups",
        "claude_dir": tmp_path / "claude",
        "roots": (tmp_path / "claude" / "projects",),
        "quiet_period": 0,
        "retry": FAST_RETRY,
    }
    settings.update(overrides)
    return ApplyOptions(**settings)  # type: ignore[arg-type]


def temp_files(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if ".riffd-" in name]


def backup_files(options: ApplyOptions) -> list[str]:
    root = options.backup_dir
    if not root.exists():
        return []
    return sorted(name for name in os.listdir(root) if name != ".locks")


def assert_untouched(path: Path, original: bytes, options: ApplyOptions) -> None:
    assert path.read_bytes() == original
    assert temp_files(path.parent) == []
    assert backup_files(options) == []


class HookFS(FileSystem):
    """Runs `hook` once, the first time a file whose name matches `name_part` is fsynced."""

    def __init__(self, name_part: str, hook: Callable[[], None]) -> None:
        self.name_part = name_part
        self.hook = hook
        self.paths: dict[int, str] = {}
        self.fired = False

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = os.fspath(path)
        return fd

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        if not self.fired and self.name_part in self.paths.get(fd, ""):
            self.fired = True
            self.hook()


def append_line(path: Path, line: bytes) -> None:
    # The way Claude Code appends: open by path with O_APPEND, one write, close.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


# -- the normal path -------------------------------------------------------------------------------


def test_applies_plan_with_verified_private_backup(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    options = options_for(tmp_path)

    outcome = apply_plan(plan, options)

    assert isinstance(outcome, Repaired), outcome
    assert path.read_bytes() == render(original, plan.edits)
    assert path.read_bytes() != original
    assert outcome.carried_over_bytes == 0 and outcome.edits == plan.edits
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the original's mode is kept
    assert temp_files(path.parent) == []
    store = BackupStore(options.backup_dir)
    record = store.verify(outcome.backup_id)
    assert outcome.backup_path == record.data_path
    assert store.open_bytes(outcome.backup_id) == original
    assert record.sha256 == hashlib.sha256(original).hexdigest()
    assert record.findings == tuple(finding.to_json() for finding in plan.fixes)
    assert stat.S_IMODE(options.backup_dir.stat().st_mode) == 0o700
    for name in backup_files(options):
        assert not name.endswith(".jsonl")
        assert stat.S_IMODE((options.backup_dir / name).stat().st_mode) == 0o600
    assert not any(name.endswith(".jsonl") for name in os.listdir(path.parent) if name != path.name)


def test_empty_plan_is_nothing_to_do(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, transcript_bytes(5))
    options = options_for(tmp_path)
    outcome = apply_plan(plan_for(path, []), options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.NOTHING_TO_DO
    assert_untouched(path, transcript_bytes(5), options)


def test_symlink_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    real = make_transcript(tmp_path, original)
    link = real.with_name("linked.jsonl")
    link.symlink_to(real)
    plan = plan_for(real)
    linked_plan = RepairPlan(
        source=dataclasses.replace(plan.source, path=str(link)), edits=plan.edits
    )
    options = options_for(tmp_path)
    outcome = apply_plan(linked_plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.SYMLINK
    assert link.is_symlink()
    assert_untouched(real, original, options)


def test_hard_linked_file_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    os.link(path, tmp_path / "second-name")
    options = options_for(tmp_path)
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.HARD_LINKED
    assert_untouched(path, original, options)


@pytest.mark.parametrize("same_backup_dir", [True, False])
def test_busy_when_another_run_holds_the_transcript(tmp_path: Path, same_backup_dir: bool) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path)
    plan = plan_for(path)
    holder = os.open(path, os.O_RDONLY)
    try:
        # As a second riffd run would, whatever backup folder it uses (`riffd fix --backup-dir X`
        # beside the daemon).
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other = (
            options if same_backup_dir else replace(options, backup_dir=tmp_path / "other-backups")
        )
        outcome = apply_plan(plan, other)
    finally:
        os.close(holder)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.BUSY
    assert_untouched(path, original, options)
    assert isinstance(apply_plan(plan, options), Repaired)  # released: works again


class NoFlockFS(FileSystem):
    """A filesystem without flock (some network filesystems) for the transcript's folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def flock(self, fd: int, operation: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(self.folder)):
            raise OSError(errno.ENOLCK, "No locks available")
        super().flock(fd, operation)


def test_a_lock_file_stands_in_where_the_transcript_cannot_be_locked(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    options = replace(options_for(tmp_path), fs=NoFlockFS(path.parent))
    lock_path = lock_path_for(options.backup_dir, path)
    lock_path.parent.mkdir(parents=True)
    holder = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a second run on the same backup folder
        outcome = apply_plan(plan_for(path), options)
    finally:
        os.close(holder)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.BUSY
    assert_untouched(path, original, options)
    assert isinstance(apply_plan(plan_for(path), options), Repaired)


def test_invalid_plan_fails_without_writing(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    spans = line_spans(original)
    options = options_for(tmp_path)
    outcome = apply_plan(
        plan_for(path, [RemoveLine(spans[2], "a"), ReplaceLine(spans[2], b"{}\n", "b")]), options
    )
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.INVALID_PLAN
    assert_untouched(path, original, options)


@pytest.mark.parametrize("where", ["root", "project"])
def test_backup_dir_inside_projects_is_refused(tmp_path: Path, where: str) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    backup_dir = (
        tmp_path / "claude" / "projects" / "riffd-backups"
        if where == "root"
        else path.parent / "bk"
    )
    options = options_for(tmp_path, backup_dir=backup_dir)
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.UNSAFE_BACKUP_DIR
    assert str(path) in outcome.detail
    assert not backup_dir.exists()
    assert path.read_bytes() == original


# -- liveness --------------------------------------------------------------------------------------


def write_registry(claude_dir: Path, pid: int) -> None:
    registry = claude_dir / "sessions"
    registry.mkdir(parents=True, exist_ok=True)
    (registry / f"{pid}.json").write_text(json.dumps({"pid": pid, "sessionId": SESSION}))


def test_registered_live_session_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path)
    write_registry(options.claude_dir, os.getpid())
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE
    assert str(os.getpid()) in outcome.detail
    assert_untouched(path, original, options)


def test_registered_dead_session_is_repaired(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path, quiet_period=120)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    write_registry(options.claude_dir, child.pid)
    assert isinstance(apply_plan(plan_for(path), options), Repaired)


def test_recently_modified_file_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original, age=5)
    options = options_for(tmp_path, quiet_period=120)
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE
    assert "quiet period" in outcome.detail
    assert_untouched(path, original, options)


# -- the file changed before apply -----------------------------------------------------------------


def test_inode_changed_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    replacement = path.with_name("new")
    replacement.write_bytes(original)
    os.replace(replacement, path)
    options = options_for(tmp_path)
    outcome = apply_plan(plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert_untouched(path, original, options)


def test_earlier_bytes_changed_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    changed = original.replace(b"line 3 ", b"LINE 3 ")
    with open(path, "r+b") as handle:  # same inode, same size
        handle.write(changed)
    options = options_for(tmp_path)
    outcome = apply_plan(plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert_untouched(path, changed, options)


def test_truncated_file_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    os.truncate(path, len(original) - 5)
    options = options_for(tmp_path)
    outcome = apply_plan(plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert_untouched(path, original[:-5], options)


def test_complete_lines_appended_before_apply_are_carried_once(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    appended = transcript_line(11) + transcript_line(12)
    append_line(path, appended)
    outcome = apply_plan(plan, options_for(tmp_path))
    assert isinstance(outcome, Repaired), outcome
    assert path.read_bytes() == render(original, plan.edits) + appended
    assert outcome.carried_over_bytes == len(appended)


def test_partial_line_appended_before_apply_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    append_line(path, transcript_line(11) + b'{"type":"assis')
    options = options_for(tmp_path)
    outcome = apply_plan(plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert path.read_bytes() == original + transcript_line(11) + b'{"type":"assis'
    assert temp_files(path.parent) == []


def test_growth_after_an_unfinished_last_line_is_skipped(tmp_path: Path) -> None:
    original = transcript_bytes(10) + b'{"type":"user","uu'
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    append_line(path, b'id":"late"}\n')  # the writer finishes its torn line
    options = options_for(tmp_path)
    outcome = apply_plan(plan, options)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert path.read_bytes() == original + b'id":"late"}\n'


# -- the file changes while apply runs (hooked at the temp file's fsync) ---------------------------


def run_with_hook(
    tmp_path: Path, hook: Callable[[Path], None]
) -> tuple[Path, bytes, RepairPlan, RepairOutcome]:
    original = transcript_bytes(400, pad=40)  # > 4 KiB windows, so samples are spread out
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    fs = HookFS(".riffd-", lambda: hook(path))
    outcome = apply_plan(plan, options_for(tmp_path, fs=fs))
    assert fs.fired
    return path, original, plan, outcome


def test_lines_appended_during_apply_are_carried_once(tmp_path: Path) -> None:
    appended = transcript_line(401) + transcript_line(402)
    path, original, plan, outcome = run_with_hook(tmp_path, lambda p: append_line(p, appended))
    assert isinstance(outcome, Repaired), outcome
    assert path.read_bytes() == render(original, plan.edits) + appended
    assert outcome.carried_over_bytes == len(appended)


def test_partial_line_appended_during_apply_is_skipped(tmp_path: Path) -> None:
    path, original, _plan, outcome = run_with_hook(tmp_path, lambda p: append_line(p, b'{"half":'))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert path.read_bytes() == original + b'{"half":'
    assert temp_files(path.parent) == []


def test_bytes_changed_during_apply_are_caught_by_samples(tmp_path: Path) -> None:
    def scribble(path: Path) -> None:
        size = path.stat().st_size
        with open(path, "r+b") as handle:
            handle.seek(size - 100)  # inside the last window before the planned size
            handle.write(b"Z")

    path, original, _plan, outcome = run_with_hook(tmp_path, scribble)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert path.read_bytes() == original[:-100] + b"Z" + original[-99:]
    assert temp_files(path.parent) == []


def test_file_replaced_during_apply_is_skipped(tmp_path: Path) -> None:
    def replace(path: Path) -> None:
        other = path.with_name("other")
        other.write_bytes(b'{"rewritten":"by claude"}\n')
        os.replace(other, path)

    path, _original, _plan, outcome = run_with_hook(tmp_path, replace)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED
    assert path.read_bytes() == b'{"rewritten":"by claude"}\n'
    assert temp_files(path.parent) == []


class LateWriterFS(FileSystem):
    """A writer that opened the path just before the swap (or the rename) and writes into the old
    inode just after."""

    def __init__(self, line: bytes) -> None:
        self.line = line

    def _late(self, put: Callable[[], None], dst: str | os.PathLike[str]) -> None:
        if not os.fspath(dst).endswith(".jsonl"):  # the backup store renames too
            put()
            return
        old_fd = os.open(dst, os.O_WRONLY | os.O_APPEND)
        try:
            put()
            os.write(old_fd, self.line)
        finally:
            os.close(old_fd)

    def replace(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        self._late(lambda: super(LateWriterFS, self).replace(src, dst), dst)

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        self._late(lambda: super(LateWriterFS, self).exchange(src, dst), dst)


def test_line_written_to_old_inode_after_rename_is_carried(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    late = transcript_line(21)
    outcome = apply_plan(plan, options_for(tmp_path, fs=LateWriterFS(late)))
    assert isinstance(outcome, Repaired), outcome
    assert path.read_bytes() == render(original, plan.edits) + late
    assert outcome.carried_over_bytes == len(late)


# -- a real concurrent appender
# ---------------------------------------------------------------------


def test_concurrent_appender_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    rounds = 30
    repaired = 0
    raced_the_rename = 0  # rounds where some lines were appended after the rename
    rng = random.Random(1234)
    for round_number in range(rounds):
        folder = tmp_path / f"round{round_number}"
        original = transcript_bytes(300, pad=20)
        path = make_transcript(folder, original)
        plan = plan_for(path)
        appended = [transcript_line(10_000 + round_number * 100 + i) for i in range(20)]
        start = threading.Event()

        def writer(
            lines: list[bytes] = appended, target: Path = path, go: threading.Event = start
        ) -> None:
            go.wait()
            for line in lines:
                append_line(target, line)
                # bursts and pauses, so some lines land after the rename
                time.sleep(rng.random() * 0.01)

        thread = threading.Thread(target=writer)
        thread.start()
        start.set()
        time.sleep(rng.random() * 0.02)
        outcome = apply_plan(plan, options_for(folder))
        thread.join()

        data = path.read_bytes()
        if isinstance(outcome, Repaired):
            repaired += 1
            raced_the_rename += outcome.carried_over_bytes < len(b"".join(appended))
            head = render(original, plan.edits)
        else:
            assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED, outcome
            head = original
        assert data.startswith(head), f"round {round_number}: {outcome}"
        tail_lines = data[len(head) :].splitlines(keepends=True)
        assert sorted(tail_lines) == sorted(appended), f"round {round_number}: {outcome}"
        assert temp_files(path.parent) == []
    assert repaired >= 5 and raced_the_rename >= 3, (repaired, raced_the_rename)


# -- disks that fail
# --------------------------------------------------------------------------------


class FlakyReadsFS(FileSystem):
    """Fails a seeded 30% of preads with EIO, like a cloud-sync placeholder under WSL2."""

    def __init__(self, seed: int, failure_rate: float = 0.3) -> None:
        self.rng = random.Random(seed)
        self.failure_rate = failure_rate
        self.failures = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.rng.random() < self.failure_rate:
            self.failures += 1
            raise OSError(errno.EIO, "Input/output error")
        return super().pread(fd, size, offset)


def test_flaky_reads_give_the_same_result_as_a_clean_run(tmp_path: Path) -> None:
    original = transcript_bytes(3000, pad=500)  # > 1 MiB: several chunks
    clean_path = make_transcript(tmp_path / "clean", original)
    clean = apply_plan(plan_for(clean_path), options_for(tmp_path / "clean"))
    assert isinstance(clean, Repaired)

    flaky_path = make_transcript(tmp_path / "flaky", original)
    fs = FlakyReadsFS(seed=7)
    retry = RetryPolicy(attempts=10, first_wait=0.001, max_wait=0.002)
    outcome = apply_plan(plan_for(flaky_path), options_for(tmp_path / "flaky", fs=fs, retry=retry))
    assert isinstance(outcome, Repaired), outcome
    assert fs.failures > 5
    assert flaky_path.read_bytes() == clean_path.read_bytes()
    assert (
        BackupStore(tmp_path / "flaky" / "state" / "backups").open_bytes(outcome.backup_id)
        == original
    )


def test_persistent_eio_fails_naming_the_file_and_retries(tmp_path: Path) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path, fs=FlakyReadsFS(seed=1, failure_rate=1.0))
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.IO_ERROR
    assert str(path) in outcome.detail
    assert f"{FAST_RETRY.attempts} attempts" in outcome.detail
    assert_untouched(path, original, options)


class NoSpaceFS(FileSystem):
    """Raises ENOSPC on writes to files whose path contains `name_part`, after `allowed` writes
    succeeded."""

    def __init__(self, name_part: str, allowed: int = 0) -> None:
        self.name_part = name_part
        self.allowed = allowed
        self.paths: dict[int, str] = {}

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = os.fspath(path)
        return fd

    def _count(self, fd: int) -> None:
        if self.name_part in self.paths.get(fd, ""):
            if self.allowed <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.allowed -= 1

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._count(fd)
        return super().write(fd, data)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._count(fd)
        return super().pwrite(fd, data, offset)


@pytest.mark.parametrize(
    ("name_part", "allowed"),
    [("backups", 0), (".riffd-", 0), (".riffd-", 2)],
    ids=["during-backup", "first-temp-write", "later-temp-write"],
)
def test_no_space_fails_cleanly(tmp_path: Path, name_part: str, allowed: int) -> None:
    original = transcript_bytes(50)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path, fs=NoSpaceFS(name_part, allowed))
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.NO_SPACE
    assert (
        str(path) in outcome.detail
        and "no space" in outcome.detail
        and "untouched" in outcome.detail
    )
    assert path.read_bytes() == original
    assert temp_files(path.parent) == []
    if name_part == "backups":
        assert backup_files(options) == []


class DeniedTempFS(FileSystem):
    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        if ".riffd-" in os.fspath(path):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return super().open(path, flags, mode)


def test_permission_denied_fails_cleanly(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=DeniedTempFS()))
    assert isinstance(outcome, Failed) and outcome.reason == FailReason.PERMISSION
    assert str(path) in outcome.detail
    assert path.read_bytes() == original


# -- temp files left by kill -9 --------------------------------------------------------------------


def test_remove_stale_temps_removes_temps_of_dead_processes_only(tmp_path: Path) -> None:
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_bytes(b"{}\n")
    name = path.name
    # fresh, but its writer is gone
    of_dead = tmp_path / f".{name}.riffd-{dead_pid()}-0123456789ab.tmp"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # old, but its writer still runs
        of_running = tmp_path / f".{name}.riffd-{sleeper.pid}-0123456789ab.tmp"
        mine = temp_path_for(path)  # this process: running
        # no pid (an earlier riffd): by age only
        legacy_old = tmp_path / f".{name}.riffd-00000000000a.tmp"
        legacy_fresh = tmp_path / f".{name}.riffd-00000000000b.tmp"
        others = [
            tmp_path / f"{SESSION}.jsonl.compact.tmp.ab12",  # Claude Code's own temp file
            tmp_path / ".notes.tmp",
            tmp_path / "x.riffd-0123456789ab.tmp",  # not dot-prefixed
            tmp_path / ".x.riffd-0123.tmp",
        ]
        long_ago = time.time() - 7200
        for leftover in (of_dead, of_running, mine, legacy_old, legacy_fresh, *others):
            leftover.write_bytes(b"partial")
        for leftover in (of_running, mine, legacy_old, *others):
            os.utime(leftover, (long_ago, long_ago))
        assert sorted(remove_stale_temps(tmp_path, 3600)) == sorted([of_dead, legacy_old])
        assert all(kept.exists() for kept in (of_running, mine, legacy_fresh, path, *others))
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    "name",
    ["L" * 251 + ".txt", "é" * 125 + ".txt", os.fsdecode(b"\xff" * 250 + b".txt"), "short.jsonl"],
)
def test_a_temp_name_fits_beside_a_file_of_any_name(tmp_path: Path, name: str) -> None:
    """A saved output of 229 bytes of name or more could not be restored: its temp name passed the
    255 bytes of a name, so the session's transcript was held back too."""
    temp = temp_path_for(tmp_path / name)
    raw = os.fsencode(temp.name)
    assert len(raw) + len(".swap.new") - len(".tmp") <= 255
    assert TEMP_NAME.match(temp.name) and temp.parent == tmp_path
    temp.write_bytes(b"x")  # (the filesystem takes it)
    if name.isascii() or name.startswith("é"):
        raw.decode("utf-8")  # (a character is never cut in two: macOS takes only UTF-8 names)
    assert temp.name.startswith("." + name[:20])
    assert temp_path_for(tmp_path / name) != temp


def test_no_folder_to_sweep_is_no_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`archive restore --to afile/x.jsonl` warned "cannot list afile to clean up riffd temp
    files" before saying the path runs through a file: no folder holds no temp file."""
    a_file = tmp_path / "afile"
    a_file.write_text("")
    assert remove_stale_temps(a_file, 0) == [] and remove_stale_temps(tmp_path / "none", 0) == []
    assert not caplog.records, [record.getMessage() for record in caplog.records]
    assert a_file.read_text() == ""


def test_apply_removes_stale_temps_of_its_folder(tmp_path: Path) -> None:
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    # a killed run's half a repair
    stale = path.parent / f".{path.name}.riffd-{dead_pid()}-0123456789ab.tmp"
    stale.write_bytes(b"half a repair")
    assert isinstance(apply_plan(plan_for(path), options_for(tmp_path)), Repaired)
    assert not stale.exists()


# -- kill -9 at random moments ---------------------------------------------------------------------

KILL_CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    from riffd.repair.outcomes import ApplyOptions
    from riffd.repair.writer import apply_plan
    from riffd.fsio import FileSystem
    from riffd.repair.plan import LineSpan, RemoveLine, ReplaceLine, InsertLine, RepairPlan
    from riffd.transcript.scan import FileIdentity

    class SlowFS(FileSystem):
        # Spreads the run over time so a random kill lands in every step, not only the first.
        def write(self, fd, data):
            time.sleep(0.0005)
            return super().write(fd, data[:65536])
        def pwrite(self, fd, data, offset):
            time.sleep(0.0005)
            return super().pwrite(fd, data[:65536], offset)
        def fsync(self, fd):
            time.sleep(0.003)
            super().fsync(fd)

    job = json.loads(sys.argv[1])
    spans = [LineSpan(*span) for span in job["spans"]]
    edits = [RemoveLine(spans[1], "dup"), ReplaceLine(spans[3], b'{"replaced":1}\\n', "fix"),
             InsertLine(spans[5], b'{"inserted":1}\\n', "fix")] + [RemoveLine(spans[i], "dup")
             for i in range(10, len(spans), 50)]
    plan = RepairPlan(FileIdentity(**job["identity"]), tuple(edits))
    options = ApplyOptions(backup_dir=Path(job["backup_dir"]), claude_dir=Path(job["claude_dir"]),
                           quiet_period=0, fs=SlowFS())
    print("ready", flush=True)
    outcome = apply_plan(plan, options)
    print(type(outcome).__name__, flush=True)
    """
)


def kill_job(path: Path, backup_dir: Path, claude_dir: Path) -> str:
    spans = line_spans(path.read_bytes())
    identity = identity_of(path)
    return json.dumps(
        {
            "spans": [[span.number, span.offset, span.length] for span in spans],
            "identity": identity.__dict__,
            "backup_dir": str(backup_dir),
            "claude_dir": str(claude_dir),
        }
    )


def expected_repair(original: bytes) -> bytes:
    spans = line_spans(original)
    edits: list[Edit] = [
        RemoveLine(spans[1], "dup"),
        ReplaceLine(spans[3], b'{"replaced":1}\n', "fix"),
        InsertLine(spans[5], b'{"inserted":1}\n', "fix"),
        *[RemoveLine(spans[i], "dup") for i in range(10, len(spans), 50)],
    ]
    return render(original, edits)


def start_child(job: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", KILL_CHILD, job], stdout=subprocess.PIPE, text=True, env=riffd_env()
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


@pytest.mark.slow
def test_kill_9_leaves_original_or_complete_repair_with_backup(tmp_path: Path) -> None:
    original = transcript_bytes(4000, pad=200)
    repaired = expected_repair(original)
    original_sha = hashlib.sha256(original).hexdigest()

    # Calibrate: how long an unkilled run takes from "ready" to exit.
    calibration = tmp_path / "calibration"
    path = make_transcript(calibration, original)
    began = time.monotonic()
    child = start_child(kill_job(path, calibration / "backups", calibration / "claude"))
    assert child.wait(timeout=60) == 0
    duration = time.monotonic() - began
    assert child.stdout is not None
    child.stdout.close()
    assert path.read_bytes() == repaired

    rng = random.Random(99)
    outcomes = {"original": 0, "repaired": 0}
    deadline = time.monotonic() + 25
    rounds = 0
    while rounds < 40 and time.monotonic() < deadline:
        rounds += 1
        folder = tmp_path / f"kill{rounds}"
        path = make_transcript(folder, original)
        backup_dir = folder / "backups"
        child = start_child(kill_job(path, backup_dir, folder / "claude"))
        time.sleep(rng.uniform(0, duration * 1.1))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.stdout is not None
        child.stdout.close()

        data = path.read_bytes()
        assert data in (original, repaired), (
            f"round {rounds}: the file is neither original nor repaired"
        )
        if data == repaired:
            outcomes["repaired"] += 1
            store = BackupStore(backup_dir)
            verified = [record for record in store.list() if record.sha256 == original_sha]
            assert verified, f"round {rounds}: repaired without a backup manifest"
            assert store.open_bytes(verified[0].backup_id) == original
        else:
            outcomes["original"] += 1
        if backup_dir.exists():
            assert not any(name.endswith(".jsonl") for name in os.listdir(backup_dir))
        # Whatever the kill left behind, the next run finishes or undoes the swap, removes its temp
        # file, completes.
        recover_and_sweep([path.parent], 0)
        assert temp_files(path.parent) == []
        if data == original:
            outcome = apply_plan(
                RepairPlan(identity_of(path), tuple(plan_edits_for_kill(original))),
                options_for(folder, backup_dir=backup_dir),
            )
            assert isinstance(outcome, Repaired), outcome
            assert path.read_bytes() == repaired
    assert rounds >= 15
    assert outcomes["original"] > 0 and outcomes["repaired"] > 0, outcomes


def plan_edits_for_kill(original: bytes) -> list[Edit]:
    spans = line_spans(original)
    return [
        RemoveLine(spans[1], "dup"),
        ReplaceLine(spans[3], b'{"replaced":1}\n', "fix"),
        InsertLine(spans[5], b'{"inserted":1}\n', "fix"),
        *[RemoveLine(spans[i], "dup") for i in range(10, len(spans), 50)],
    ]


@pytest.mark.parametrize("length", [42, 205, 215, 216, 240, 255])
def test_a_swap_journal_knows_the_temp_names_of_a_transcript_of_any_name_length(
    tmp_path: Path, length: int
) -> None:
    """A hashed temp name (for a name too long to carry) was not a name riffd gives the transcript,
    by the journal's check: a swap killed on a 205-byte name was left, the copy kept for good."""
    from riffd.repair.journal import SwapRecord

    name = SESSION + ("-" + "x" * (length - len(SESSION) - 7) if length > 42 else "") + ".jsonl"
    assert len(name) == length
    copy = temp_path_for(tmp_path / name)
    old = copy.with_name(copy.name.removesuffix(".tmp") + ".old")
    assert len(os.fsencode(copy.name.removesuffix(".tmp") + ".swap.new")) <= 255
    record = SwapRecord(
        name,
        copy.name,
        old.name,
        (1, 2),
        (1, 3),
        0,
        "",
        0,
        "",
        0,
        None,
        (),
        (),
        None,
        (),
        "",
        "",
        1,
    )
    record.check_names()
    other = dataclasses.replace(record, transcript="x" + name[1:])
    with pytest.raises(ValueError, match="is not a name riffd gives"):
        other.check_names()
