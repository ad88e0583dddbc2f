"""Cloud-sync and network folders, on a FUSE filesystem of our own (tests/fusefs.py) that fails on
purpose.

What a user on such a folder must be able to count on: a rename that fails never loses the
transcript, and riffd says "untouched" only once it has looked; a stale handle after a good replace
is not a failure; a layer that drops the exchange flag still gets a correct repair; EIO on stat and
listings gives the clean run's findings or an error naming the path, never "0 files" and never a
traceback.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import damage
from helpers.fusefs import Mount, fuse_unavailable
from helpers.run import run_riffd
from riffd.archive.store import Archive
from riffd.daemon.archive_batch import ArchiveBatches
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS, RetryPolicy
from riffd.repair.outcomes import ApplyOptions, Failed, Repaired
from riffd.repair.plan import RepairOptions
from riffd.repair.planner import plan_file_repair
from riffd.repair.writer import apply_plan
from riffd.transcript.scan import index_file

WHY_NOT = fuse_unavailable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")

SESSION = "5e55104e-0000-4000-8000-0000000c10d0"


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    with Mount(tmp_path / "backing", tmp_path / "cloud", tmp_path / "faults.json") as mounted:
        yield mounted


@pytest.fixture
def hard_remove_mount(tmp_path: Path) -> Iterator[Mount]:
    with Mount(
        tmp_path / "backing", tmp_path / "cloud", tmp_path / "faults.json", hard_remove=True
    ) as mounted:
        yield mounted


def damaged_session(mount: Mount, name: str = f"{SESSION}.jsonl") -> tuple[Path, bytes]:
    """A damaged session on the mount, quiet for an hour; return its path there and its bytes."""
    lines = damage.inject_resumed_duplicate(
        damage.generated_session(segments=6, session_id=SESSION)
    ).lines
    data = b"".join(lines)
    path = mount.mountpoint / "claude" / "projects" / "-home-user-project" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    (mount.mountpoint / "claude" / "sessions").mkdir(exist_ok=True)
    path.write_bytes(data)
    os.utime(path, (1_700_000_000, 1_700_000_000))
    return path, data


def repair(
    mount: Mount, path: Path, tmp_path: Path, fs: FileSystem | None = None
) -> Repaired | Failed | object:
    """Repair `path` as riffd fix would, through `fs` (a seam of its own: what riffd learnt of a
    filesystem, such as "it cannot exchange", stays with the seam, and each test's mount is a new
    filesystem)."""
    scanned = index_file(path, with_identity=True)
    plan = plan_file_repair(scanned, RepairOptions())
    return apply_plan(
        plan,
        ApplyOptions(
            backup_dir=tmp_path / "state" / "backups",
            claude_dir=mount.mountpoint / "claude",
            quiet_period=0,
            fs=fs or FileSystem(),
        ),
    )


def in_backing(mount: Mount, path: Path) -> Path:
    return mount.backing / path.relative_to(mount.mountpoint)


def test_a_rename_that_always_fails_never_loses_the_transcript(
    mount: Mount, tmp_path: Path
) -> None:
    path, data = damaged_session(mount)
    # No exchange on this filesystem, and every rename of riffd's copy fails: libfuse hides the open
    # original as .fuse_hidden* first, and would delete it once riffd closes it.
    mount.faults({"ops": ["rename"], "glob": "*.tmp", "errno": errno.EIO}, exchange="refuse")
    outcome = repair(mount, path, tmp_path)
    assert isinstance(outcome, Failed), outcome
    assert (
        "lost the transcript during the failed rename" in outcome.detail
        and "as it was" in outcome.detail
    )
    assert in_backing(mount, path).read_bytes() == data  # byte for byte, on the filesystem itself
    assert path.read_bytes() == data
    assert not [
        name
        for name in os.listdir(path.parent)
        if name.startswith(".fuse_hidden") or ".riffd-" in name
    ]


def test_a_failed_exchange_leaves_the_transcript_untouched_and_says_so_after_looking(
    mount: Mount, tmp_path: Path
) -> None:
    path, data = damaged_session(mount)
    # the exchange itself fails
    mount.faults({"ops": ["rename"], "glob": "*.tmp", "errno": errno.EIO})
    outcome = repair(mount, path, tmp_path)
    # libfuse hides an open name before a plain rename, not before an exchange: the original is
    # where it was.
    assert (
        isinstance(outcome, Failed) and "the transcript is untouched (checked)" in outcome.detail
    ), outcome
    assert in_backing(mount, path).read_bytes() == data


def test_untouched_is_said_only_after_looking(mount: Mount, tmp_path: Path) -> None:
    path, data = damaged_session(mount)
    # the repaired copy cannot be written
    mount.faults({"ops": ["write"], "glob": "*.tmp", "errno": errno.EIO})
    outcome = repair(mount, path, tmp_path)
    assert (
        isinstance(outcome, Failed) and "the transcript is untouched (checked)" in outcome.detail
    ), outcome
    assert in_backing(mount, path).read_bytes() == data


def test_a_stale_handle_after_a_good_replace_is_a_repair_with_a_warning(
    hard_remove_mount: Mount, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mount = hard_remove_mount
    path, data = damaged_session(mount)
    # The old file keeps a name of riffd's after an exchange; a layer that renames instead drops it
    # at once.
    mount.faults({"ops": ["getattr"], "unlinked": True, "errno": errno.ESTALE}, exchange="drop")
    result = run_riffd(
        "fix",
        "--quiet-period",
        "0",
        "--backup-dir",
        str(tmp_path / "backups"),
        str(path),
        env={"CLAUDE_CONFIG_DIR": str(mount.mountpoint / "claude")},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"repaired {path}" in result.stdout and "stale file handle" in result.stdout
    assert (
        in_backing(mount, path).read_bytes() != data
        and b"Tool call interrupted" not in path.read_bytes()
    )


def test_a_layer_that_drops_the_exchange_flag_still_gets_a_correct_repair(
    mount: Mount, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path, data = damaged_session(mount)
    expected_path = tmp_path / "plain" / path.name
    expected_path.parent.mkdir()
    expected_path.write_bytes(data)
    plan = plan_file_repair(index_file(expected_path, with_identity=True), RepairOptions())
    from riffd.repair.plan import render

    expected = render(data, plan.edits)
    mount.faults(exchange="drop")
    seam = FileSystem()
    with caplog.at_level(logging.WARNING, logger="riffd.repair.swap"):
        outcome = repair(mount, path, tmp_path, seam)
        second, _ = damaged_session(mount, "second.jsonl")
        assert isinstance(repair(mount, second, tmp_path, seam), Repaired)
    assert isinstance(outcome, Repaired), outcome
    assert in_backing(mount, path).read_bytes() == expected
    said = [
        record for record in caplog.records if "cannot exchange two names" in record.getMessage()
    ]
    assert len(said) == 1 and "performed a plain rename" in said[0].getMessage()


def scan_json(root: Path) -> tuple[int, dict[str, object], str]:
    result = run_riffd("scan", "--json", str(root))
    document = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.returncode, document, result.stderr


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_eio_on_stat_and_listing_gives_the_clean_findings_or_names_the_path(
    mount: Mount, seed: int
) -> None:
    damaged_session(mount)
    project = mount.mountpoint / "claude" / "projects"
    for number in range(3):
        (project / f"-p{number}").mkdir()
        (project / f"-p{number}" / "ok.jsonl").write_bytes(
            b"".join(damage.generated_session(segments=2))
        )
    clean_code, clean, _ = scan_json(project)
    assert clean_code == 1 and clean["summary"]["files"] == 4  # type: ignore[index]
    mount.faults({"ops": ["getattr", "readdir"], "errno": errno.EIO, "chance": 0.1}, seed=seed)
    code, document, err = scan_json(project)
    assert "Traceback" not in err, err
    if code == 2:
        assert "I/O error" in err and str(mount.mountpoint) in err, err
    else:
        assert (code, document["files"], document["summary"]["files"]) == (  # type: ignore[index]
            clean_code,
            clean["files"],
            4,
        )


def test_an_error_no_command_expected_is_one_line_naming_the_path(mount: Mount) -> None:
    backups = mount.mountpoint / "backups"
    backups.mkdir()
    mount.faults({"ops": ["readdir"], "glob": "/backups", "errno": errno.EIO})
    result = run_riffd("backups", "--backup-dir", str(backups), "list")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert (
        result.stderr.count("\n") == 1
        and str(backups) in result.stderr
        and "run the command again" in result.stderr
    )


@pytest.mark.slow
def test_the_daemon_never_loses_a_transcript_whose_replace_always_fails(tmp_path: Path) -> None:
    from helpers.daemon import Sandbox

    box = Sandbox(tmp_path / "box")
    with Mount(tmp_path / "backing", box.projects, tmp_path / "faults.json") as mount:
        try:
            (box.claude / "sessions").mkdir(parents=True, exist_ok=True)
            box.write_config(watcher__observer="polling", watcher__polling_interval=0.2)
            mount.faults(
                {"ops": ["rename"], "glob": "*.tmp", "errno": errno.EIO}, exchange="refuse"
            )
            daemon = box.start()
            path, data = damaged_session(mount)
            report = daemon.wait_until(
                lambda: box.report_where(lambda r: r["repairs"]["failed"]),
                "a report of the failed repair",
            )
            daemon.stop()
            assert report["repairs"]["failed"] == {"io_error": 1} and report["repairs"]["done"] == 0
            assert in_backing(mount, path).read_bytes() == data
            assert not [name for name in os.listdir(path.parent) if name.startswith(".fuse_hidden")]
            assert "put it back from the file riffd held open" in daemon.stderr()
        finally:
            box.close()


@pytest.mark.slow
def test_an_ingest_waiting_for_a_slow_cloud_file_holds_no_lock_on_the_archive(
    mount: Mount, tmp_path: Path
) -> None:
    """`riffd archive ingest` reads the files it keeps whole outside any transaction: while a saved
    output on a cloud folder takes seconds to be fetched, the daemon (here, another connection
    taking the write lock every 50 ms) never waits for it; the ingest then keeps every file. Every
    read of it is slow (a network folder, or one that keeps no copy): the store reads it again
    through the descriptor that hashed it, which the page cache serves, not through a second
    open, which FUSE sends to the folder again (4 s inside the transaction)."""
    import sqlite3
    import subprocess
    import time

    from helpers.run import riffd_command, riffd_env
    from helpers.sessiontree import build_session

    claude = mount.mountpoint / "claude"
    tree = build_session(claude)
    folder = tree.folder / "tool-results"
    for number in range(60):  # the slow one read after 30 others
        name = f"{'s1ow' if number == 30 else 'f4st'}{number:05d}.txt"
        (folder / name).write_bytes(b"output %d\n" % number * 400)
    mount.faults({"ops": ["read"], "glob": "*/s1ow*", "delay": 4})
    config = tmp_path / "config.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{claude}"\n'
        f'roots = ["{claude / "projects"}"]\n'
    )
    ingest = subprocess.Popen(
        riffd_command("archive", "ingest", "--no-compact", config=config),
        env=riffd_env(CLAUDE_CONFIG_DIR=str(claude)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    archive_path, waits, started = tmp_path / "state" / "archive.db", [], time.monotonic()
    while ingest.poll() is None:
        if archive_path.exists():
            other = sqlite3.connect(archive_path, timeout=30, isolation_level=None)
            before = time.monotonic()
            other.execute("BEGIN IMMEDIATE")
            other.execute("COMMIT")
            waits.append(time.monotonic() - before)
            other.close()
        time.sleep(0.05)
    _out, err = ingest.communicate()
    assert ingest.returncode == 0, err
    assert time.monotonic() - started >= 4  # it did wait for the slow file
    assert len(waits) > 40 and max(waits) < 1.5, sorted(waits)[-5:]
    with sqlite3.connect(archive_path) as db:
        kept = {
            Path(base) / path for base, path in db.execute("SELECT base, path FROM session_files")
        }
    assert set(folder.iterdir()) <= kept


def test_an_ingest_counts_as_kept_only_the_files_the_archive_holds(
    mount: Mount, tmp_path: Path
) -> None:
    """A saved output that cannot be read (EIO on every read, retries and all) is named as an
    error, and the ingest's count says how many of the files it looked at the archive holds."""
    from helpers.sessiontree import build_session

    claude = mount.mountpoint / "claude"
    tree = build_session(claude)
    unreadable = tree.folder / "tool-results" / "e10unread.txt"
    unreadable.write_bytes(b"output\n" * 100)
    mount.faults({"ops": ["read"], "glob": "*/e10unread.txt", "errno": errno.EIO})
    config = tmp_path / "config.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\nclaude_dir = "{claude}"\n'
        f'roots = ["{claude / "projects"}"]\n'
        "[retry]\nattempts = 2\nfirst_wait = 0.01\n"
    )
    result = run_riffd("archive", "ingest", config=config, env={"CLAUDE_CONFIG_DIR": str(claude)})
    assert result.returncode == 2, result.stderr
    assert f"riffd: error: {unreadable}: " in result.stderr
    counted = re.search(
        r"kept (\d+) of (\d+) file\(s\) of the sessions whole \((\d+) new", result.stderr
    )
    assert counted is not None, result.stderr
    held, looked, added = map(int, counted.groups())
    assert held == added == looked - 1 >= 5, result.stderr


def test_the_archive_is_checked_against_a_cloud_file_with_the_workers_retries(
    mount: Mount, tmp_path: Path
) -> None:
    """The archive holds more of a file than the worker read (lines archived before a kill): it is
    checked against the file before the worker's lines go on it, read with the worker's retry
    policy. A cloud folder that fails the first three reads with EIO: the configured five tries
    read it, and the lines go on now. Before, the check read it with the default three tries,
    failed, and the lines waited for the catch-up."""
    path = mount.mountpoint / "s.jsonl"
    lines = [b'{"n":1}', b'{"n":2}', b'{"n":3}']
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    archive = Archive(tmp_path / "archive.db")
    archive.add_lines(str(path), 0, lines[:2])
    mount.faults({"ops": ["read"], "glob": "/s.jsonl", "errno": errno.EIO, "times": 3})
    failures: list[str] = []
    policy = RetryPolicy(attempts=5, first_wait=0.01, max_wait=0.01)
    batches = ArchiveBatches(
        0,
        lambda: archive,
        lambda _archive, _name, what, _exc: failures.append(what),
        lambda: RetryingFS.of(REAL_FILES, policy),
    )
    batches.add(str(path), len(lines[0]) + 1, lines[1:], None)  # read from its second line
    batches.flush_all()
    assert failures == []
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    archive.close()
