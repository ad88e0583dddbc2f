"""The swap's edges: a client resuming during a repair, a writer that holds the old file across the
swap, a truncate just before it, and riffd killed at any instant around it. Each test tries to make
a repair lose or strand a line."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import dead_pid, identity_of, line_spans, transcript_bytes, transcript_line
from helpers.run import riffd_env, run_riffd
from riffd.fsio import FileSystem, RetryingFS, RetryPolicy
from riffd.repair.backup import BackupStore
from riffd.repair.locks import remove_stale_temps
from riffd.repair.outcomes import Repaired, Skipped, SkipReason
from riffd.repair.plan import render
from riffd.repair.recovery import recover_and_sweep, recover_folder
from riffd.repair.writer import apply_plan
from test_apply import (
    SESSION,
    HookFS,
    append_line,
    make_transcript,
    options_for,
    plan_for,
    temp_files,
    write_registry,
)
from test_swap import HeldSwapFS

FAST = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002)


def resumed_line(number: int, parent: str) -> bytes:
    """A line a resumed client writes: its parent is the newest line it loaded."""
    record = {
        "type": "user",
        "uuid": f"resumed-{number}",
        "parentUuid": parent,
        "sessionId": SESSION,
        "message": {"role": "user", "content": f"resumed {number}"},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def riffd_names(folder: Path) -> list[str]:
    return sorted(temp_files(folder))


# -- a client that resumed the session
# -------------------------------------------------------------------------


def test_a_line_hanging_from_a_removed_line_before_the_swap_gives_the_repair_up(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(400, pad=40)
    path = make_transcript(tmp_path, original)
    line = resumed_line(1, "uuid-000002")  # plan_for removes line 2
    outcome = apply_plan(
        plan_for(path), options_for(tmp_path, fs=HookFS(".riffd-", lambda: append_line(path, line)))
    )
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert "uuid-000002" in outcome.detail
    assert path.read_bytes() == original + line  # as the client wrote it
    assert riffd_names(path.parent) == []


def test_a_session_registered_during_the_repair_is_left_alone(tmp_path: Path) -> None:
    original = transcript_bytes(400, pad=40)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path)
    fs = HookFS(".riffd-", lambda: write_registry(options.claude_dir, os.getpid()))
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=fs))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert "just before the swap" in outcome.detail
    assert path.read_bytes() == original
    assert riffd_names(path.parent) == []


def test_a_line_written_to_the_old_file_after_the_swap_hanging_from_a_removed_line_undoes_it(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    line = resumed_line(1, "uuid-000002")
    # The client opened the transcript just before the swap; its line lands in the old file just
    # after.
    old_fd: list[int] = []
    fs = HeldSwapFS(
        before=lambda target: old_fd.append(os.open(target, os.O_WRONLY | os.O_APPEND)),
        after=lambda target: (os.write(old_fd[0], line), os.close(old_fd[0])),
    )
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=fs))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert "undid the repair" in outcome.detail
    assert path.read_bytes() == original + line
    assert riffd_names(path.parent) == []


def test_a_line_written_to_the_new_file_hanging_from_a_removed_line_undoes_it(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    ordinary, dangling = transcript_line(41), resumed_line(1, "uuid-000002")
    held: list[int] = []

    def after(target: Path) -> None:
        append_line(target, ordinary)  # straight into the repaired file
        append_line(target, dangling)  # a client that had loaded the old file
        held.append(
            os.open(
                target.parent / next(n for n in temp_files(target.parent) if n.endswith(".tmp")),
                os.O_RDONLY,
            )
        )

    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=HeldSwapFS(after=after)))
    os.close(held[0])
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert path.read_bytes() == original + ordinary + dangling  # every line, none twice
    assert riffd_names(path.parent) == []


def test_a_session_registered_just_after_the_swap_gets_the_old_file_back(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path)
    late = transcript_line(41)
    fs = HeldSwapFS(
        after=lambda target: (
            write_registry(options.claude_dir, os.getpid()),
            append_line(target, late),
        )
    )
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=fs))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert "just after the swap" in outcome.detail
    assert path.read_bytes() == original + late
    assert riffd_names(path.parent) == []


# -- the old file changed just before the swap
# ------------------------------------------------------------------


@pytest.mark.parametrize("change", ["truncate", "rewrite"])
def test_a_truncate_or_rewrite_just_before_the_swap_is_kept(tmp_path: Path, change: str) -> None:
    original = transcript_bytes(400, pad=40)
    path = make_transcript(tmp_path, original)
    changed: list[bytes] = []

    def before(target: Path) -> None:
        # Claude Code drops its last line by truncating at an offset it computed
        if change == "truncate":
            os.truncate(target, len(original) - len(transcript_line(400, pad=40)))
        else:
            with open(target, "r+b") as handle:
                handle.seek(len(original) // 2)
                handle.write(b"Z")
        changed.append(target.read_bytes())

    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=HeldSwapFS(before=before)))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.CHANGED, outcome
    assert "just before riffd swapped in" in outcome.detail
    assert path.read_bytes() == changed[0]
    assert riffd_names(path.parent) == []


# -- a writer that holds the old file across the swap
# ---------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import os, sys, time
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
    print("open", flush=True)
    sys.stdin.readline()  # the swap happened
    if float(sys.argv[2]) < 0:
        sys.stdin.readline()  # told to write: the repair is over
    else:
        time.sleep(float(sys.argv[2]))
    os.write(fd, sys.argv[3].encode())
    os.close(fd)
    """
)


# start_holder's delay for a writer that holds the old file past the repair's wait: it writes once
# release() is called a second time.
UNTIL_TOLD = -1.0


def start_holder(path: Path, delay: float, line: bytes) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), str(delay), line.decode()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
    return holder


def reap(process: subprocess.Popen[str]) -> int:
    """Wait for a child and close its pipes; return its exit status."""
    status = process.wait(timeout=10)
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()
    return status


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()


@pytest.mark.parametrize("delay", [0.0, 0.2, 1.0])
def test_a_writer_holding_the_old_file_across_the_swap_loses_nothing(
    tmp_path: Path, delay: float
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    late = transcript_line(41)
    holder = start_holder(path, delay, late)
    try:
        outcome = apply_plan(
            plan, options_for(tmp_path, fs=HeldSwapFS(after=lambda _target: release(holder)))
        )
    finally:
        reap(holder)
    assert isinstance(outcome, Repaired), outcome
    assert outcome.pending_swap is None
    assert path.read_bytes() == render(original, plan.edits) + late
    assert riffd_names(path.parent) == []


def test_a_writer_holding_the_old_file_longer_is_finished_by_the_next_run(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    late = transcript_line(41)
    holder = start_holder(path, UNTIL_TOLD, late)  # past the repair's wait
    try:
        outcome = apply_plan(
            plan, options_for(tmp_path, fs=HeldSwapFS(after=lambda _target: release(holder)))
        )
        assert isinstance(outcome, Repaired), outcome
        assert outcome.pending_swap is not None and outcome.pending_swap.exists()
        assert any("still hold the old file" in warning for warning in outcome.warnings)
        # still held: nothing to do yet
        assert recover_folder(RetryingFS(FileSystem(), FAST), path.parent) == []
    finally:
        release(holder)
        reap(holder)
    [done] = recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert f"{len(late)} byte(s) written to the old file were carried over" in done
    assert path.read_bytes() == render(original, plan.edits) + late
    assert riffd_names(path.parent) == []


# -- riffd killed around the swap
# --------------------------------------------------------------------------------

KILLED_AT_SWAP = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from riffd.fsio import FileSystem
    from riffd.repair.outcomes import ApplyOptions
    from riffd.repair.plan import LineSpan, RemoveLine, RepairPlan
    from riffd.repair.writer import apply_plan
    from riffd.transcript.scan import FileIdentity

    job = json.loads(sys.argv[1])

    class KilledFS(FileSystem):
        def exchange(self, src, dst):
            if job["when"] == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            super().exchange(src, dst)
            if job["when"] == "after":
                sys.stdout.write("swapped\\n")
                sys.stdout.flush()
                sys.stdin.readline()  # the test writes to the old file, then lets riffd die here
                os.kill(os.getpid(), signal.SIGKILL)

    span = LineSpan(*job["span"])
    plan = RepairPlan(FileIdentity(**job["identity"]), (RemoveLine(span, "dup"),))
    sys.stdout.write("ready\\n")
    sys.stdout.flush()
    apply_plan(plan, ApplyOptions(backup_dir=Path(job["backup_dir"]), claude_dir=Path(job["claude_dir"]),
                                  quiet_period=0, fs=KilledFS()))
    """
)


def killed_repair(tmp_path: Path, path: Path, when: str) -> subprocess.Popen[str]:
    job = json.dumps(
        {
            "when": when,
            "span": list(line_spans(path.read_bytes())[1].__dict__.values()),
            "identity": identity_of(path).__dict__,
            "backup_dir": str(tmp_path / "backups"),
            "claude_dir": str(tmp_path / "claude"),
        }
    )
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_AT_SWAP, job],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=riffd_env(),
    )
    assert child.stdout is not None and child.stdout.readline() == "ready\n"
    return child


def test_killed_right_after_the_swap_a_late_line_is_carried_by_the_next_run(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    repaired = (
        original[: line_spans(original)[1].offset] + original[line_spans(original)[2].offset :]
    )
    # a client's descriptor, opened before the swap
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    child = killed_repair(tmp_path, path, "after")
    assert child.stdout is not None and child.stdout.readline() == "swapped\n"
    late = transcript_line(41)
    os.write(writer, late)  # into the old file, after riffd's last look at it
    os.close(writer)
    assert child.stdin is not None
    child.stdin.write("die\n")
    child.stdin.flush()
    assert reap(child) == -signal.SIGKILL
    # the late line is only in the old file, under riffd's name
    assert path.read_bytes() == repaired
    assert [name for name in riffd_names(path.parent) if name.endswith(".swap")]
    # What a daemon does at its start (and `riffd fix`, and a repair in that folder): finish the
    # swap.
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert path.read_bytes() == repaired + late
    assert riffd_names(path.parent) == []


def test_killed_just_before_the_swap_the_next_run_removes_the_copy(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    child = killed_repair(tmp_path, path, "before")
    assert reap(child) == -signal.SIGKILL
    assert riffd_names(path.parent)  # the copy and the journal
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert path.read_bytes() == original
    assert riffd_names(path.parent) == []


def test_a_sweep_never_removes_the_old_file_a_journal_names(tmp_path: Path) -> None:
    """Before journals, a killed run's temp name (its pid gone) was removed: after a swap it holds
    the original."""
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    child = killed_repair(tmp_path, path, "after")
    assert child.stdout is not None and child.stdout.readline() == "swapped\n"
    os.write(writer, transcript_line(41))
    os.close(writer)
    assert child.stdin is not None
    child.stdin.write("die\n")
    child.stdin.flush()
    reap(child)
    remove_stale_temps(path.parent, 0)
    old = [name for name in riffd_names(path.parent) if name.endswith(".tmp")]
    assert old and (path.parent / old[0]).read_bytes() == original + transcript_line(41)


def test_riffd_fix_finishes_a_swap_a_killed_run_left(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    repaired = (
        original[: line_spans(original)[1].offset] + original[line_spans(original)[2].offset :]
    )
    writer = os.open(path, os.O_WRONLY | os.O_APPEND)
    child = killed_repair(tmp_path, path, "after")
    assert child.stdout is not None and child.stdout.readline() == "swapped\n"
    os.write(writer, transcript_line(41))
    os.close(writer)
    assert child.stdin is not None
    child.stdin.write("die\n")
    child.stdin.flush()
    reap(child)
    result = run_riffd(
        "fix",
        "--quiet-period",
        "0",
        "--backup-dir",
        str(tmp_path / "backups"),
        str(path),
        env={"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")},
    )
    assert "finished a repair an earlier run left unfinished" in result.stdout, result
    assert path.read_bytes() == repaired + transcript_line(41)
    assert riffd_names(path.parent) == []


@pytest.mark.slow
def test_kill_9_at_any_instant_with_a_writer_loses_no_line(tmp_path: Path) -> None:
    """SIGKILL at random moments of a repair while a client appends (some lines through a descriptor
    opened before the swap); after the next run's recovery every line is in the transcript exactly
    once."""
    rng = random.Random(7)
    rounds = 0
    deadline = time.monotonic() + 40
    while rounds < 40 and time.monotonic() < deadline:
        rounds += 1
        folder = tmp_path / f"round{rounds}"
        original = transcript_bytes(3000, pad=100)
        path = make_transcript(folder, original)
        holder_fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        child = killed_repair(folder, path, "never")
        time.sleep(rng.uniform(0, 0.25))
        late = [transcript_line(5000 + rounds * 10 + i) for i in range(3)]
        os.write(holder_fd, late[0])
        append_line(path, late[1])
        child.kill()
        reap(child)
        os.write(holder_fd, late[2])
        os.close(holder_fd)
        recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
        data = path.read_bytes()
        lines = data.splitlines(keepends=True)
        for line in late:
            assert lines.count(line) == 1, (rounds, line)
        kept = [line for line in original.splitlines(keepends=True) if b'"uuid-000002"' not in line]
        assert all(lines.count(line) == 1 for line in kept), rounds
        assert riffd_names(path.parent) == [], rounds
    assert rounds >= 10


def test_pending_swaps_wait_for_a_repair_of_their_transcript(tmp_path: Path) -> None:
    """A second repair of the file does not start while the first one's old file is still being
    handed over."""
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    holder = start_holder(path, UNTIL_TOLD, transcript_line(41))
    try:
        first = apply_plan(
            plan_for(path), options_for(tmp_path, fs=HeldSwapFS(after=lambda _t: release(holder)))
        )
        assert isinstance(first, Repaired) and first.pending_swap is not None
        second = apply_plan(plan_for(path), options_for(tmp_path))
        assert isinstance(second, Skipped) and second.reason == SkipReason.BUSY, second
    finally:
        release(holder)
        reap(holder)
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert riffd_names(path.parent) == []


def test_a_killed_journal_write_is_cleaned_up_and_an_unreadable_one_kept(tmp_path: Path) -> None:
    path = make_transcript(tmp_path, transcript_bytes(10))
    pid = dead_pid()
    killed = f".{path.name}.riffd-{pid}-ba9876543210"  # killed while its journal was being written
    (path.parent / f"{killed}.tmp").write_bytes(b"a copy")
    (path.parent / f"{killed}.swap.new").write_bytes(b'{"transcript": "still being written')
    running = f".{path.name}.riffd-{os.getpid()}-ffffffffffff.swap.new"
    (path.parent / running).write_bytes(b"this process writes it")
    # A journal riffd cannot read (damaged, or written by someone else): what it names may hold the
    # original.
    unreadable = f".{path.name}.riffd-{pid}-0123456789ab"
    (path.parent / f"{unreadable}.tmp").write_bytes(b"maybe the original")
    (path.parent / f"{unreadable}.swap").write_bytes(b'{"transcript": "torn')
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert riffd_names(path.parent) == sorted([running, f"{unreadable}.tmp", f"{unreadable}.swap"])
    assert path.read_bytes() == transcript_bytes(10)


def test_a_journal_that_cannot_be_written_stops_the_repair_before_the_swap(tmp_path: Path) -> None:
    """A journal that cannot be written (a full disk) stops the repair before the swap: nothing
    changes."""

    class NoRoomForJournal(FileSystem):
        def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
            if ".swap" in os.readlink(f"/proc/self/fd/{fd}"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().pwrite(fd, data, offset)

    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=NoRoomForJournal()))
    assert not isinstance(outcome, Repaired)
    assert path.read_bytes() == original
    assert riffd_names(path.parent) == []
    assert BackupStore(tmp_path / "state" / "backups").list()  # the backup was taken before


class FlakyFolderFS(FileSystem):
    """Fails a seeded 30% of the calls on the transcript's folder with EIO (a cloud-synced folder at
    its worst); riffd's backup folder stays healthy."""

    def __init__(self, folder: Path, seed: int) -> None:
        self.folder, self.rng = str(folder), random.Random(seed)
        self.fds: set[int] = set()

    def _fail(self, target: object) -> None:
        inside = (
            (target in self.fds)
            if isinstance(target, int)
            else os.fspath(target).startswith(self.folder)
        )
        if inside and self.rng.random() < 0.3:
            raise OSError(errno.EIO, "Input/output error")

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        self._fail(path)
        fd = super().open(path, flags, mode)
        if os.fspath(path).startswith(self.folder):
            self.fds.add(fd)
        return fd

    def close(self, fd: int) -> None:
        self.fds.discard(fd)
        super().close(fd)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._fail(fd)
        return super().pread(fd, size, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._fail(fd)
        return super().pwrite(fd, data, offset)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self._fail(fd)
        return super().write(fd, data)

    def fstat(self, fd: int) -> os.stat_result:
        self._fail(fd)
        return super().fstat(fd)

    def stat(self, path: str | os.PathLike[str]) -> os.stat_result:
        self._fail(path)
        return super().stat(path)

    def unlink(self, path: str | os.PathLike[str]) -> None:
        self._fail(path)
        super().unlink(path)

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        self._fail(dst)
        super().exchange(src, dst)


@pytest.mark.parametrize(
    "seed", [*range(8), *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(8, 60))]
)
def test_a_repair_under_30_percent_eio_leaves_nothing_beside_the_transcript(
    tmp_path: Path, seed: int
) -> None:
    original = transcript_bytes(200, pad=40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    outcome = apply_plan(plan, options_for(tmp_path, fs=FlakyFolderFS(path.parent, seed)))
    if isinstance(outcome, Repaired) and outcome.pending_swap is None:
        assert riffd_names(path.parent) == [], outcome
        assert path.read_bytes() == render(original, plan.edits)
    else:
        # Anything else is finished or undone by the next run, leaving the transcript whole.
        recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
        assert riffd_names(path.parent) == [], outcome
        assert path.read_bytes() in (original, render(original, plan.edits)), outcome
