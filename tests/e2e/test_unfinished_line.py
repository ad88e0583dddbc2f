"""A transcript whose last line has no newline, as a real `riffd run` meets it: a whole record (JSON,
as some writers and hand edits leave it) is archived once the file is idle, so the session comes
back whole after Claude Code deletes it, and it is no finding (as `riffd scan` says); a torn write
(not JSON) written while the daemon runs is judged torn once the quiet period is over, without
another change to the file. The daemon looks again by itself when the quiet period ends."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import transcript_bytes, transcript_line
from helpers.daemon import Sandbox, watermark_of
from riffd.archive.store import Archive
from riffd.state.store import StateStore
from riffd.transcript.findings import FindingClass

pytestmark = pytest.mark.slow

SESSION = "12121212-0000-4000-8000-000000000001"
WHOLE = transcript_bytes(12)
LAST_RECORD = transcript_line(13).rstrip(b"\n")  # a whole record, its newline never written
FRAGMENT = transcript_line(13)[:40]  # a write cut off: not JSON


def archived(sandbox: Sandbox, path: Path) -> bytes | None:
    """The bytes the archive holds of `path`'s newest generation (None: nothing yet)."""
    archive = Archive(sandbox.state / "archive.db", read_only=True)
    try:
        held = archive.files_of(str(path))
        if not held:
            return None
        ((file_id, _name, _session),) = held
        return b"".join(archive.iter_file(file_id, archive.generations(file_id)[-1]))
    finally:
        archive.close()


def stored_classes(sandbox: Sandbox, path: Path) -> list[str]:
    store = StateStore(sandbox.state / "state.db", read_only=True)
    try:
        state = store.file(str(path))
        return [] if state is None else [item["class"] for item in state.findings]
    finally:
        store.close()


def test_a_last_record_without_its_newline_is_archived_and_comes_back_whole(
    sandbox: Sandbox,
) -> None:
    daemon = sandbox.start()
    path = sandbox.project / f"{SESSION}.jsonl"
    path.write_bytes(WHOLE + LAST_RECORD)
    daemon.wait_until(
        lambda: archived(sandbox, path) == WHOLE + LAST_RECORD,
        "the archive to hold the last record, once the file is idle",
    )
    assert stored_classes(sandbox, path) == []  # a whole record: no torn_tail, nothing repaired
    assert path.read_bytes() == WHOLE + LAST_RECORD and sandbox.backup_ids() == []
    daemon.stop()
    # Claude Code's cleanup deletes the session; the archive gives it back byte for byte
    original = path.read_bytes()
    path.unlink()
    shutil.rmtree(path.with_suffix(""), ignore_errors=True)
    restored = sandbox.riffd("archive", "restore", SESSION)
    assert restored.returncode == 0, restored.stderr
    assert path.read_bytes() == original


def test_a_torn_write_while_the_daemon_runs_is_judged_torn_once_idle(sandbox: Sandbox) -> None:
    sandbox.write_config(repair__mode="report-only")
    daemon = sandbox.start()
    path = sandbox.project / f"{SESSION}.jsonl"
    path.write_bytes(WHOLE)
    store = sandbox.open_store()
    daemon.wait_until(
        lambda: (mark := watermark_of(store, path)) is not None and mark.offset == len(WHOLE),
        "the whole lines read",
    )
    with open(path, "ab") as file:  # one write, cut off; nothing more is written
        file.write(FRAGMENT)
    modified = os.stat(path).st_mtime
    found = daemon.wait_until(
        lambda: FindingClass.TORN_TAIL in stored_classes(sandbox, path),
        "torn_tail, found once the quiet period is over, with no other change to the file",
    )
    assert found and os.stat(path).st_mtime == modified
    # kept in the archive as it is before anything cuts it off
    assert archived(sandbox, path) == WHOLE + FRAGMENT
    assert path.read_bytes() == WHOLE + FRAGMENT  # report-only: nothing is edited


def test_a_restart_within_the_quiet_period_still_archives_and_judges_the_line(
    sandbox: Sandbox,
) -> None:
    """The worker's look again at the end of the quiet period lives in memory: a daemon stopped
    and started again before it fires must still archive the whole record and judge the torn one
    (the next rescan queues such files; it lost them for good)."""
    sandbox.write_config(repair__mode="report-only", watcher__rescan_interval=2.0)
    daemon = sandbox.start()
    whole = sandbox.project / f"{SESSION}.jsonl"
    torn = sandbox.project / f"{SESSION[:-1]}2.jsonl"
    whole.write_bytes(WHOLE + LAST_RECORD)
    torn.write_bytes(WHOLE + FRAGMENT)
    store = sandbox.open_store()
    daemon.wait_until(
        lambda: all(watermark_of(store, path) is not None for path in (whole, torn)),
        "both files read once",
    )
    daemon.stop()  # within the quiet period: the look again is lost with the process
    daemon = sandbox.start()
    daemon.wait_until(
        lambda: (
            archived(sandbox, whole) == WHOLE + LAST_RECORD
            and archived(sandbox, torn) == WHOLE + FRAGMENT
            and FindingClass.TORN_TAIL in stored_classes(sandbox, torn)
        ),
        "both unfinished lines archived and the torn one judged, after the restart",
    )
    assert stored_classes(sandbox, whole) == []


@pytest.mark.parametrize(
    "completion",
    [b"\n" + transcript_line(14), transcript_line(14)],
    ids=["its newline, then a line", "the next record glued on"],
)
def test_a_writer_that_goes_on_after_the_line_was_archived_leaves_the_archive_whole(
    sandbox: Sandbox, completion: bytes
) -> None:
    """The unfinished line is archived once idle; then the writer goes on, a write at a time, while
    the daemon reads: the archive ends holding the file byte for byte (the line replaced by what it
    became, nothing twice, nothing lost)."""
    sandbox.write_config(repair__mode="report-only")
    daemon = sandbox.start()
    path = sandbox.project / f"{SESSION}.jsonl"
    path.write_bytes(WHOLE + LAST_RECORD)
    daemon.wait_until(lambda: archived(sandbox, path) == WHOLE + LAST_RECORD, "the line archived")
    for number, piece in enumerate([completion, *(transcript_line(n) for n in range(15, 40))]):
        with open(path, "ab") as file:  # as Claude Code appends: one write a record
            file.write(piece)
        if number % 5 == 0:
            time.sleep(0.05)
    daemon.wait_until(
        lambda: archived(sandbox, path) == path.read_bytes(),
        "the archive to hold the file as it is now",
    )
