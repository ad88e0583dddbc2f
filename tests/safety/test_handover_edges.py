"""The swap's hand-over at its edges, as a review attacked it: errors right after the exchange, a
filesystem that only renames, riffd killed between the exchange and its checks, undo with writers on
the copy, a short write on a full disk, relative and linked paths, identical metadata lines, a
journal that is not riffd's. Each test failed before."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import line_spans, transcript_bytes, transcript_line
from helpers.run import riffd_env, run_riffd
from riffd.fsio import FileSystem, RetryingFS, RetryPolicy
from riffd.repair.journal import journal_path_for
from riffd.repair.outcomes import Repaired, Skipped, SkipReason
from riffd.repair.plan import InsertLine, RemoveLine, render
from riffd.repair.recovery import recover_and_sweep, recover_folder
from riffd.repair.writer import apply_plan
from test_apply import (
    SESSION,
    append_line,
    make_transcript,
    options_for,
    plan_for,
    temp_files,
    write_registry,
)
from test_handover import UNTIL_TOLD, reap, release, start_holder

FAST = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002)


def line(uuid: str, parent: str | None) -> bytes:
    record = {
        "type": "user",
        "uuid": uuid,
        "parentUuid": parent,
        "sessionId": SESSION,
        "message": {"role": "user", "content": uuid},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def dangling(data: bytes) -> list[str]:
    records = [json.loads(raw) for raw in data.splitlines() if raw.strip()]
    uuids = {record.get("uuid") for record in records}
    return [
        record["uuid"]
        for record in records
        if record.get("parentUuid") and record["parentUuid"] not in uuids
    ]


def names(folder: Path) -> list[str]:
    return sorted(temp_files(folder))


class AfterExchange(FileSystem):
    """Opens the transcript for a writer just before the first exchange, writes `late` into it just
    after, then fails the next `burst` calls of stat, listdir and fstat with `code` (a folder
    unreachable for a moment)."""

    def __init__(self, late: bytes, code: int = errno.EIO, burst: int = 0) -> None:
        self.late, self.code, self.burst, self.armed = late, code, burst, False

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if self.armed or not os.fspath(dst).endswith(".jsonl"):
            super().exchange(src, dst)
            return
        fd = os.open(dst, os.O_WRONLY | os.O_APPEND)
        super().exchange(src, dst)
        os.write(fd, self.late)
        os.close(fd)
        self.armed = True

    def _maybe(self) -> None:
        if self.armed and self.burst > 0:
            self.burst -= 1
            raise OSError(self.code, os.strerror(self.code))

    def stat(self, path: str | os.PathLike[str]) -> os.stat_result:
        self._maybe()
        return super().stat(path)

    def listdir(self, path: str | os.PathLike[str]) -> list[str]:
        self._maybe()
        return super().listdir(path)

    def fstat(self, fd: int) -> os.stat_result:
        self._maybe()
        return super().fstat(fd)


@pytest.mark.parametrize(
    ("code", "burst"), [(errno.ETIMEDOUT, 2), (errno.ENOTCONN, 3), (errno.EIO, 9)]
)
def test_errors_right_after_the_exchange_never_delete_the_old_file(
    tmp_path: Path, code: int, burst: int
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    late = transcript_line(41)
    apply_plan(plan, options_for(tmp_path, fs=AfterExchange(late, code, burst)))
    # Whatever it said, the next look completes it.
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert path.read_bytes() in (render(original, plan.edits) + late, original + late)
    assert names(path.parent) == []


class RenameOnly(FileSystem):
    """A filesystem that refuses RENAME_EXCHANGE (many FUSE and network ones): riffd renames,
    keeping a hard link."""

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")


def test_on_a_rename_only_filesystem_a_writer_holding_the_old_file_is_waited_for(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    late = transcript_line(41)
    # its descriptor names the old file, whose name goes in the rename
    holder = start_holder(path, 1.0, late)
    try:
        fs = RenameOnly()
        original_replace = fs.replace

        def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
            original_replace(src, dst)
            if os.fspath(dst) == os.fspath(path):
                release(holder)

        fs.replace = replace  # type: ignore[method-assign]
        outcome = apply_plan(plan, options_for(tmp_path, fs=fs))
    finally:
        reap(holder)
    assert isinstance(outcome, Repaired), outcome
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert path.read_bytes() == render(original, plan.edits) + late
    assert names(path.parent) == []


KILLED_AFTER_EXCHANGE = textwrap.dedent(
    """
    import json, os, signal, sys
    from pathlib import Path
    from riffd.fsio import FileSystem
    from riffd.repair.outcomes import ApplyOptions
    from riffd.repair.plan import LineSpan, RemoveLine, RepairPlan
    from riffd.repair.writer import apply_plan
    from riffd.transcript.scan import FileIdentity

    job = json.loads(sys.argv[1])

    class Killed(FileSystem):
        def exchange(self, src, dst):
            if str(dst).endswith(".jsonl"):
                if job["before"] == "rename":
                    staged = Path(dst).with_name("staged")
                    staged.write_bytes(Path(dst).read_bytes() + b'{"type":"user","uuid":"newer"}\\n')
                    os.replace(staged, dst)
                elif job["before"] == "truncate":
                    os.truncate(dst, job["truncate_to"])
            super().exchange(src, dst)
            if str(dst).endswith(".jsonl"):
                if job["after"] == "register":
                    folder = Path(job["claude_dir"]) / "sessions"
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / ("%d.json" % job["client"])).write_text(
                        json.dumps({"pid": job["client"], "sessionId": job["session"]}))
                os.kill(os.getpid(), signal.SIGKILL)

    span = LineSpan(*job["span"])
    plan = RepairPlan(FileIdentity(**job["identity"]), (RemoveLine(span, "dup"),))
    apply_plan(plan, ApplyOptions(backup_dir=Path(job["backup_dir"]), claude_dir=Path(job["claude_dir"]),
                                  quiet_period=0, fs=Killed()))
    """
)


def killed_after_exchange(
    tmp_path: Path, path: Path, before: str = "", after: str = "", **extra: object
) -> int:
    from conftest import identity_of

    job = {
        "before": before,
        "after": after,
        "span": list(line_spans(path.read_bytes())[-1].__dict__.values()),
        "identity": identity_of(path).__dict__,
        "backup_dir": str(tmp_path / "backups"),
        "claude_dir": str(tmp_path / "claude"),
        "session": SESSION,
        **extra,
    }
    return subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_EXCHANGE, json.dumps(job)], env=riffd_env(), check=False
    ).returncode


def test_killed_after_swapping_out_another_programs_version_the_next_run_puts_it_back(
    tmp_path: Path,
) -> None:
    path = make_transcript(tmp_path, transcript_bytes(20))
    assert killed_after_exchange(tmp_path, path, before="rename") == -signal.SIGKILL
    newer = transcript_bytes(20) + b'{"type":"user","uuid":"newer"}\n'
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert path.read_bytes() == newer
    assert names(path.parent) == []


def test_killed_after_the_exchange_of_a_file_truncated_just_before_the_next_run_undoes_it(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    cut = line_spans(original)[3].offset
    assert (
        killed_after_exchange(tmp_path, path, before="truncate", truncate_to=cut) == -signal.SIGKILL
    )
    [done] = recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert "truncated" in done and "undid" in done
    assert path.read_bytes() == original[:cut]  # as its writer left it
    assert names(path.parent) == []


def test_killed_after_the_exchange_with_a_session_registered_the_next_run_undoes_it(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(20)
    path = make_transcript(tmp_path, original)
    client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert (
            killed_after_exchange(tmp_path, path, after="register", client=client.pid)
            == -signal.SIGKILL
        )
        recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
        # the client hangs from the leaf it loaded
        append_line(path, line("client-next", "uuid-000020"))
        assert dangling(path.read_bytes()) == []
        assert path.read_bytes() == original + line("client-next", "uuid-000020")
    finally:
        client.kill()
        client.wait()
    assert names(path.parent) == []


def test_an_undo_on_a_rename_only_filesystem_keeps_what_is_written_to_the_copy(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    options = options_for(tmp_path)
    late = transcript_line(41)
    holders: list[subprocess.Popen[str]] = []
    fs = RenameOnly()
    original_replace = fs.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        original_replace(src, dst)
        if os.fspath(dst) == os.fspath(path) and not holders:
            # opened the repaired copy by its new name
            holders.append(start_holder(path, 0.5, late))
            release(holders[0])
            # and a session registers: the repair is undone
            write_registry(options.claude_dir, os.getpid())

    fs.replace = replace  # type: ignore[method-assign]
    outcome = apply_plan(plan_for(path), options_for(tmp_path, fs=fs))
    reap(holders[0])
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert path.read_bytes() == original + late
    assert names(path.parent) == []


def test_an_undo_waits_for_a_writer_of_the_copy_before_removing_it(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    conflict, late_new = line("resumed-1", "uuid-000002"), transcript_line(41)
    # past the repair's wait: the hand-over is left pending
    old_writer = start_holder(path, 2.5, conflict)
    release(old_writer)
    outcome = apply_plan(plan_for(path), options_for(tmp_path))
    assert isinstance(outcome, Repaired) and outcome.pending_swap is not None, outcome
    # holds the repaired file across the undo to come
    new_writer = start_holder(path, 1.5, late_new)
    release(new_writer)
    reap(old_writer)
    # The conflict: undone, but the copy is still held.
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    reap(new_writer)
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert sorted(path.read_bytes()[len(original) :].splitlines(keepends=True)) == sorted(
        [conflict, late_new]
    )
    assert path.read_bytes().startswith(original)
    assert names(path.parent) == []


class ShortWriteOnFullDisk(FileSystem):
    """After the exchange a writer puts a line into the old file; riffd's first append of it stores
    half the line and the next write fails with ENOSPC, as ext4 does when its last blocks run
    out."""

    def __init__(self, late: bytes) -> None:
        self.late, self.swapped, self.appends = late, False, 0

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        fd = os.open(dst, os.O_WRONLY | os.O_APPEND)
        super().exchange(src, dst)
        os.write(fd, self.late)
        os.close(fd)
        self.swapped = True

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.swapped and fcntl_append(fd):
            self.appends += 1
            if self.appends == 1:
                return super().write(fd, bytes(data)[: len(data) // 2])
            if self.appends == 2:
                raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(fd, data)


def fcntl_append(fd: int) -> bool:
    import fcntl

    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND)


def test_a_short_write_on_a_full_disk_never_leaves_half_a_line(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    late = transcript_line(41, pad=200)
    fs = ShortWriteOnFullDisk(late)
    apply_plan(plan, options_for(tmp_path, fs=fs))
    assert fs.appends >= 2
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert path.read_bytes() == render(original, plan.edits) + late
    assert names(path.parent) == []


def test_an_undo_carries_the_placeholder_a_line_on_the_copy_hangs_from(tmp_path: Path) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    spans = line_spans(original)
    placeholder = line("placeholder-1", "uuid-000040")
    plan = plan_for(
        path, [RemoveLine(spans[1], "dup"), InsertLine(spans[-1], placeholder, "missing result")]
    )
    client_a, client_b = line("client-a-1", "placeholder-1"), line("client-b-1", "uuid-000002")

    def after(target: Path) -> None:
        append_line(target, client_a)  # loaded the repaired file: hangs from the placeholder
        old = target.parent / next(
            name for name in temp_files(target.parent) if name.endswith(".tmp")
        )
        append_line(old, client_b)  # loaded the old file: hangs from the removed line

    from test_swap import HeldSwapFS

    outcome = apply_plan(plan, options_for(tmp_path, fs=HeldSwapFS(after=after)))
    assert isinstance(outcome, Skipped) and outcome.reason == SkipReason.LIVE, outcome
    assert dangling(path.read_bytes()) == []
    assert path.read_bytes().startswith(original)
    assert names(path.parent) == []


def test_identical_metadata_lines_are_each_carried_in_order(tmp_path: Path) -> None:
    """Lines without a uuid ("last one wins" metadata) can be byte for byte the same: each is a line
    of its own."""
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    plan = plan_for(path)
    plan_mode = (
        b'{"type":"permission-mode","permissionMode":"plan","sessionId":"%s"}\n' % SESSION.encode()
    )
    default_mode = (
        b'{"type":"permission-mode","permissionMode":"default","sessionId":"%s"}\n'
        % SESSION.encode()
    )
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import os, sys, time
        fd = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)
        print("open", flush=True)
        sys.stdin.readline()
        time.sleep(2.6); os.write(fd, {plan_mode!r}); time.sleep(0.4); os.write(fd, {default_mode!r}); os.close(fd)
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "open\n"
    release(holder)
    outcome = apply_plan(plan, options_for(tmp_path))
    assert isinstance(outcome, Repaired) and outcome.pending_swap is not None, outcome
    time.sleep(0.8)
    append_line(path, default_mode)  # another writer, by path, between the held writer's two lines
    reap(holder)
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    tail = path.read_bytes()[len(render(original, plan.edits)) :]
    assert sorted(tail.splitlines(keepends=True)) == sorted([default_mode, plan_mode, default_mode])
    # the held writer's last line is the last one
    assert tail.splitlines(keepends=True)[-1] == default_mode
    assert names(path.parent) == []


def test_riffd_fix_with_a_relative_path_leaves_a_journal_any_run_can_finish(tmp_path: Path) -> None:
    from helpers import damage

    damaged = damage.inject_resumed_duplicate(
        damage.generated_session(segments=3, session_id=SESSION)
    )
    path = make_transcript(tmp_path, b"".join(damaged.lines))
    late = line("late-1", json.loads(damaged.lines[-1])["uuid"])
    holder = start_holder(path, UNTIL_TOLD, late)  # still holding the old file when fix is done
    release(holder)
    run_riffd(
        "fix",
        "--quiet-period",
        "0",
        "--backup-dir",
        str(tmp_path / "backups"),
        path.name,
        env={"CLAUDE_CONFIG_DIR": str(tmp_path / "claude")},
        cwd=path.parent,
    )
    assert names(path.parent), "fix left no pending hand-over: the test did not test it"
    release(holder)
    reap(holder)
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert (
        late in path.read_bytes()
        and damaged.lines[damaged.marks["synthetic"]] not in path.read_bytes()
    )
    assert names(path.parent) == []


def test_a_second_repair_through_a_linked_folder_waits_for_a_pending_hand_over(
    tmp_path: Path,
) -> None:
    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    late = transcript_line(41)
    holder = start_holder(path, UNTIL_TOLD, late)
    release(holder)
    first = apply_plan(plan_for(path), options_for(tmp_path))
    assert isinstance(first, Repaired) and first.pending_swap is not None
    linked = tmp_path / "linked"
    linked.symlink_to(path.parent)
    from conftest import identity_of
    from riffd.repair.plan import RepairPlan

    through_link = linked / path.name
    second = apply_plan(
        RepairPlan(identity_of(through_link), plan_for(path).edits[:1]), options_for(tmp_path)
    )
    assert isinstance(second, Skipped) and second.reason == SkipReason.BUSY, second
    release(holder)
    reap(holder)
    recover_folder(RetryingFS(FileSystem(), FAST), path.parent)
    assert late in path.read_bytes() and names(path.parent) == []


def test_a_repair_finishes_the_swap_a_killed_run_left_on_its_own_file(tmp_path: Path) -> None:
    from test_handover import killed_repair

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
    from conftest import identity_of
    from riffd.repair.plan import RepairPlan

    # A repair of the same file (its own lock held) finishes that swap first, then sees nothing to
    # do or repairs.
    apply_plan(RepairPlan(identity_of(path), ()), options_for(tmp_path))
    outcome = apply_plan(
        plan_for(path, [RemoveLine(line_spans(path.read_bytes())[0], "x")]), options_for(tmp_path)
    )
    assert not (isinstance(outcome, Skipped) and outcome.reason == SkipReason.BUSY), outcome
    assert transcript_line(41) in path.read_bytes()


def test_a_journal_naming_the_transcript_itself_is_refused(tmp_path: Path) -> None:
    """A crafted (or cloud-synced) journal must not make riffd remove a file it names."""
    original = transcript_bytes(10)
    path = make_transcript(tmp_path, original)
    status = path.stat()
    journal = journal_path_for(path.parent / f".{path.name}.riffd-1-0123456789ab.tmp")
    record = {
        "transcript": "elsewhere.jsonl",
        "copy_name": path.name,
        "old_name": path.name,
        "old_id": [status.st_dev, status.st_ino],
        "copy_id": [status.st_dev, status.st_ino],
        "source_size": 0,
        "source_sha256": "",
        "settled_end": 0,
        "settled_sha256": "",
        "copy_size": 0,
        "cut_at": None,
        "removed": [],
        "inserted": [],
        "session_id": None,
        "claude_dirs": [],
        "backup_dir": str(tmp_path),
        "backup_id": "x",
        "pid": 1,
    }
    journal.write_bytes(json.dumps(record).encode() + b"\n")
    recover_and_sweep([path.parent], 0, fs=RetryingFS(FileSystem(), FAST))
    assert path.read_bytes() == original


@pytest.mark.parametrize("what", ["deleted", "replaced"])
def test_a_transcript_deleted_or_replaced_just_after_the_swap_keeps_riffds_files_in_a_backup(
    tmp_path: Path, what: str
) -> None:
    from riffd.repair.backup import BackupStore
    from test_swap import HeldSwapFS, publish_by_rename

    original = transcript_bytes(40)
    path = make_transcript(tmp_path, original)
    newer = transcript_bytes(45)

    def after(target: Path) -> None:
        if what == "deleted":
            target.unlink()
        else:
            publish_by_rename(target, newer)

    options = options_for(tmp_path, fs=HeldSwapFS(after=after))
    outcome = apply_plan(plan_for(path), options)
    assert isinstance(outcome, Skipped), outcome
    assert outcome.reason == (SkipReason.GONE if what == "deleted" else SkipReason.CHANGED), outcome
    assert path.exists() == (what == "replaced") and (
        what == "deleted" or path.read_bytes() == newer
    )
    assert names(path.parent) == []
    kept = [
        BackupStore(options.backup_dir).open_bytes(record.backup_id)
        for record in BackupStore(options.backup_dir).list()
    ]
    assert original in kept  # the old file, and the copy, are in the backup store
