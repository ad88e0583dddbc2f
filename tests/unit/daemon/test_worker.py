"""The worker: incremental reads from the watermark, detection of rewrites, repairs when idle."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from pathlib import Path

import pytest

from conftest import (
    CORPUS_DIR,
    corpus_lines,
    requires_corpus,
    transcript_bytes,
    transcript_line,
    worker_home,
)
from helpers import damage
from riffd.daemon.cache import IndexCache
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.fsio import FileSystem, RetryPolicy
from riffd.reports.build import build_report
from riffd.reports.json import report_document
from riffd.reports.markdown import render_markdown
from riffd.state.store import StateStore
from riffd.transcript.scan import scan_file

BASE = CORPUS_DIR / "marot-spotter" / "tool_heavy.jsonl"


class CountingFS(FileSystem):
    """Counts the bytes read, to prove what an append costs."""

    def __init__(self) -> None:
        self.bytes_read = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        data = super().pread(fd, size, offset)
        self.bytes_read += len(data)
        return data


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, StateStore, WorkerSettings]:
    project, settings = worker_home(tmp_path)
    return project, StateStore(tmp_path / "state" / "state.db"), settings


def append(path: Path, lines: list[bytes]) -> None:
    for line in lines:
        with open(path, "ab") as handle:  # open, write, close per line, as Claude Code does
            handle.write(line)


@requires_corpus
def test_appends_are_read_from_the_watermark(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    lines = corpus_lines(BASE)
    path = project / "s.jsonl"
    append(path, lines[:20])
    fs = CountingFS()
    worker = Worker(store, settings, fs=fs)
    first = worker.process(path)
    assert first.kind == "read" and first.lines == 20
    fs.bytes_read = 0
    append(path, lines[20:21])
    second = worker.process(path)
    assert second.kind == "appended" and second.lines == 1 and second.bytes == len(lines[20])
    # The new line, read and checked once read, and 4 KiB fingerprints (the head and the tail
    # checked at the open, the tail checked once read, the new tail): about the line, not the file.
    assert fs.bytes_read <= 2 * len(lines[20]) + 4 * 4096
    assert store.file(str(path)).watermark.lines == 21  # type: ignore[union-attr]


@requires_corpus
def test_restart_with_unchanged_files_reads_nothing(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(BASE.read_bytes())
    Worker(store, settings).process(path)
    fs = CountingFS()
    again = Worker(store, settings, fs=fs).process(path)  # a fresh worker: as after a restart
    assert again.kind == "unchanged" and fs.bytes_read == 0


@requires_corpus
def test_unfinished_last_line_waits_for_its_newline(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    lines = corpus_lines(BASE)
    path = project / "s.jsonl"
    path.write_bytes(b"".join(lines[:5]) + lines[5][:30])
    worker = Worker(store, WorkerSettings(**{**settings.__dict__, "quiet_period": 60}))
    assert worker.process(path).lines == 5
    state = store.file(str(path))
    assert state is not None and state.watermark.offset == len(b"".join(lines[:5]))
    assert not [f for f in state.findings if f["class"] in ("malformed_line", "torn_tail")]
    append(path, [lines[5][30:]])
    outcome = worker.process(path)
    assert outcome.kind == "appended" and outcome.lines == 1


@requires_corpus
def test_a_tail_left_unfinished_past_the_quiet_period_is_a_torn_tail(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    lines = corpus_lines(BASE)
    path = project / "s.jsonl"
    path.write_bytes(b"".join(lines[:5]) + lines[5][:30])
    Worker(store, settings).process(path)  # quiet period 0: the writer is gone
    state = store.file(str(path))
    assert state is not None and [f["class"] for f in state.findings].count("torn_tail") == 1
    assert path.read_bytes() == b"".join(lines[:5]) + lines[5][:30]


@requires_corpus
@pytest.mark.parametrize("change", ["truncate", "rewrite_same_size", "replace"])
def test_rewrites_by_others_are_read_again_from_the_start(
    setup: tuple[Path, StateStore, WorkerSettings], change: str
) -> None:
    project, store, settings = setup
    lines = corpus_lines(BASE)
    path = project / "s.jsonl"
    path.write_bytes(b"".join(lines))
    worker = Worker(store, settings)
    worker.process(path)
    if change == "truncate":
        with open(path, "r+b") as handle:
            handle.truncate(len(b"".join(lines[:10])))
    elif change == "rewrite_same_size":
        data = bytearray(path.read_bytes())
        data[5:9] = b"XXXX" if data[5:9] != b"XXXX" else b"YYYY"
        with open(path, "r+b") as handle:  # same inode, same size, other bytes
            handle.write(bytes(data))
    else:
        replacement = path.with_name("new.tmp")
        replacement.write_bytes(b"".join(lines[:30]))
        os.replace(replacement, path)
    outcome = worker.process(path)
    assert outcome.kind == "read" and outcome.why
    assert store.file(str(path)).watermark.size == path.stat().st_size  # type: ignore[union-attr]


@requires_corpus
def test_a_deleted_file_is_forgotten(setup: tuple[Path, StateStore, WorkerSettings]) -> None:
    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(BASE.read_bytes())
    worker = Worker(store, settings)
    worker.process(path)
    path.unlink()
    assert worker.process(path).kind == "gone"
    assert store.file(str(path)) is None


@requires_corpus
def test_resumed_duplicate_is_repaired_when_idle_and_only_once(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    path = project / "s.jsonl"
    worker = Worker(store, settings)
    for line in damaged.lines:  # written line by line, processed as it grows
        append(path, [line])
        worker.process(path)
    state = store.file(str(path))
    assert state is not None and state.repairable == 0 and state.findings == []
    assert scan_file(path).findings == []
    # Only the synthetic result went; the rest is byte for byte (its assistant child is re-pointed).
    synthetic = damaged.lines[damaged.marks["synthetic"]]
    assert synthetic not in path.read_bytes()
    assert len(path.read_bytes().splitlines()) == len(damaged.lines) - 1
    assert store.repair_summary()["done"] == 1
    assert list(settings.backup_dir.glob("*.gz"))
    assert worker.process(path).kind == "unchanged"  # riffd's own rewrite is not a second pass


@requires_corpus
def test_live_session_waits(setup: tuple[Path, StateStore, WorkerSettings]) -> None:
    project, store, settings = setup
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    session_id = json.loads(damaged.lines[-1])["sessionId"]
    registry = settings.claude_dir / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    path = project / f"{session_id}.jsonl"
    path.write_bytes(damaged.data)
    outcome = Worker(store, settings).process(path)
    assert outcome.repair == "waiting:live" and outcome.retry_after is not None
    assert path.read_bytes() == damaged.data
    registry.unlink()
    assert Worker(store, settings).process(path).repair == "repaired"


@requires_corpus
def test_report_only_mode_never_writes(setup: tuple[Path, StateStore, WorkerSettings]) -> None:
    project, store, settings = setup
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    path = project / "s.jsonl"
    path.write_bytes(damaged.data)
    report_only = WorkerSettings(**{**settings.__dict__, "repair": False})
    outcome = Worker(store, report_only).process(path)
    assert outcome.repair is None and path.read_bytes() == damaged.data
    assert store.file(str(path)).repairable == 1  # type: ignore[union-attr]


def test_index_cache_evicts_least_recently_used_inactive_indexes() -> None:
    from riffd.transcript.incremental import GrowingIndex

    def index_of(name: str, lines: int) -> GrowingIndex:
        index = GrowingIndex(name)
        index.add_lines(0, [b"{}"] * lines)
        return index

    cache = IndexCache(max_lines=10, active_seconds=0)
    for name in ("a", "b", "c"):
        cache.put(name, index_of(name, 4))
    assert cache.get("a", 12) is None and cache.get("c", 12) is not None and cache.lines == 8


def test_two_active_files_over_budget_do_not_evict_each_other() -> None:
    """A session bigger than the budget must not be re-read in full on every append because another
    file was processed in between (both are active)."""
    from riffd.transcript.incremental import GrowingIndex

    cache = IndexCache(max_lines=10, active_seconds=600)
    big, small = GrowingIndex("big"), GrowingIndex("small")
    big.add_lines(0, [b"{}"] * 50)
    small.add_lines(0, [b"{}"] * 2)
    cache.put("big", big)
    cache.put("small", small)
    assert cache.get("big", big.end) is big and cache.get("small", small.end) is small


@requires_corpus
def test_a_rebuild_after_restart_processes_only_the_new_lines(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    lines = corpus_lines(BASE)
    path = project / "s.jsonl"
    append(path, lines[:10])
    Worker(store, settings).process(path)
    append(path, lines[10:12])
    outcome = Worker(store, settings).process(path)  # a fresh worker: no index in memory
    assert outcome.kind == "rebuilt" and outcome.lines == 2
    assert store.counters()["lines.processed"] == 12


@requires_corpus
def test_riffds_own_repair_is_not_counted_as_new_lines(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    path = project / "s.jsonl"
    path.write_bytes(damaged.data)
    outcome = Worker(store, settings).process(path)
    assert outcome.repair == "repaired"
    assert store.counters()["lines.processed"] == len(damaged.lines)
    assert "rescans.changed_files" not in store.counters()


class BrokenReads(FileSystem):
    """Every read fails with EIO, as a cloud placeholder that never downloads."""

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        raise OSError(errno.EIO, "Input/output error")


@requires_corpus
def test_persistent_eio_is_a_skip_with_advice_not_a_crash(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(BASE.read_bytes())
    fast = WorkerSettings(
        **{**settings.__dict__, "retry": RetryPolicy(attempts=3, first_wait=0.001)}
    )
    outcome = Worker(store, fast, fs=BrokenReads()).process(path)
    assert outcome.kind == "skipped" and "errno 5" in outcome.why and "3 attempts" in outcome.why
    assert store.file(str(path)) is None  # nothing recorded as read
    assert path.read_bytes() == BASE.read_bytes()


def test_a_reloaded_retry_policy_reaches_the_reads(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(3))
    three = RetryPolicy(attempts=3, first_wait=0.001)
    worker = Worker(
        store, WorkerSettings(**{**settings.__dict__, "retry": three}), fs=BrokenReads()
    )
    # A reload (SIGHUP) hands the worker its new settings: their policy governs the next reads.
    two = RetryPolicy(attempts=2, first_wait=0.001)
    worker.reconfigure(WorkerSettings(**{**settings.__dict__, "retry": two}))
    outcome = worker.process(path)
    assert outcome.kind == "skipped" and "2 attempts" in outcome.why


class FlakyReads(FileSystem):
    """A third of reads fail once with EIO, then succeed."""

    def __init__(self) -> None:
        self.calls = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.calls += 1
        if self.calls % 3 == 0:
            raise OSError(errno.EIO, "Input/output error")
        return super().pread(fd, size, offset)


@requires_corpus
def test_transient_eio_gives_the_same_findings_and_repair(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    path = project / "s.jsonl"
    path.write_bytes(damaged.data)
    fast = WorkerSettings(
        **{**settings.__dict__, "retry": RetryPolicy(attempts=3, first_wait=0.001)}
    )
    flaky = FlakyReads()
    outcome = Worker(store, fast, fs=flaky).process(path)
    assert flaky.calls > 10 and outcome.repair == "repaired"
    clean_path = project / "clean.jsonl"
    clean_path.write_bytes(damaged.data)
    assert Worker(store, fast).process(clean_path).repair == "repaired"
    assert path.read_bytes() == clean_path.read_bytes()


@requires_corpus
def test_the_worker_archives_every_line_once_across_restarts_and_repairs(
    setup: tuple[Path, StateStore, WorkerSettings], tmp_path: Path
) -> None:
    from riffd.archive.store import Archive

    project, store, settings = setup
    archive = Archive(tmp_path / "archive.db")
    damaged = damage.inject_resumed_duplicate(corpus_lines(BASE))
    path = project / "s.jsonl"
    half = len(damaged.lines) // 2
    # no repair while it is written
    quiet = WorkerSettings(**{**settings.__dict__, "quiet_period": 3600})
    append(path, damaged.lines[:half])
    Worker(store, quiet, archive=archive).process(path)
    append(path, damaged.lines[half:])
    # a new worker: rebuilds from the start, archives the rest
    Worker(store, quiet, archive=archive).process(path)
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == damaged.data  # every line, once, in order
    Worker(store, settings, archive=archive).process(path)  # now idle: repaired
    assert scan_file(path).findings == []
    # the repaired file, a new generation
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    # the original is still there
    assert b"".join(archive.iter_file(file_id, generation=0)) == damaged.data


@requires_corpus
def test_a_failing_archive_does_not_stop_detection_and_is_caught_up_later(
    setup: tuple[Path, StateStore, WorkerSettings], tmp_path: Path
) -> None:
    from riffd.archive.ingest import ingest_file
    from riffd.archive.store import Archive

    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(BASE.read_bytes())
    archive = Archive(tmp_path / "archive.db", lock_timeout=0.05)
    blocker = sqlite3.connect(tmp_path / "archive.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the archive: every write fails
    outcome = Worker(store, settings, archive=archive).process(path)
    assert outcome.kind == "read" and store.counters()["archive.errors"] >= 1
    assert store.file(str(path)) is not None  # detection went on
    blocker.execute("ROLLBACK")
    blocker.close()
    assert archive.cursor(str(path)) == (0, 0)
    ingest_file(archive, path)  # what the daemon's rescan does for files the archive is behind on
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == BASE.read_bytes()
    assert ingest_file(archive, path) == 0


def running_tool_session(project: Path) -> tuple[Path, str]:
    """A real session cut right after an assistant's tool_use line: the tool is still running."""
    lines = corpus_lines(BASE)
    cut = max(number for number, line in enumerate(lines) if b'"type":"tool_use"' in line)
    session_id = json.loads(lines[cut])["sessionId"]
    path = project / f"{session_id}.jsonl"
    path.write_bytes(b"".join(lines[: cut + 1]))
    return path, session_id


@requires_corpus
def test_a_running_tool_in_a_live_session_is_pending_not_damage(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    path, session_id = running_tool_session(project)
    registry = settings.claude_dir / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    before = path.read_bytes()
    worker = Worker(store, settings)
    outcome = worker.process(path)
    assert outcome.repair is None and outcome.retry_after is not None  # judged again later
    state = store.file(str(path))
    assert state is not None and state.repairable == 0
    assert [item["class"] for item in state.findings] == ["pending_tool_call"]
    model = build_report(store, settings.backup_dir, {"running": True})
    report = report_document(model)
    assert report["healthy"], report["problems"]
    assert report["findings"]["open"] == {}
    assert report["findings"]["pending"] == [
        {
            "path": str(path),
            "tool_id": state.findings[0]["tool_id"],
            "line": state.findings[0]["lines"][0],
        }
    ]
    assert "pending tool calls" in render_markdown(model)
    # still live: still pending, nothing written
    assert worker.process(path).retry_after is not None
    assert path.read_bytes() == before

    registry.unlink()  # the client went away with the tool unanswered: now it is damage
    outcome = worker.process(path)
    state = store.file(str(path))
    assert state is not None and [item["class"] for item in state.findings] == [
        "missing_tool_result"
    ]
    report = report_document(build_report(store, settings.backup_dir, {"running": True}))
    assert not report["healthy"] and report["findings"]["open"] == {"missing_tool_result": 1}
    assert report["findings"]["pending"] == []


def _count_findings_writes(store_path: Path) -> sqlite3.Connection:
    """Make the state store count, in a table of its own, every write of a file's findings (SQLite
    triggers: the store's own SQL is what is observed)."""
    db = sqlite3.connect(store_path, isolation_level=None)
    db.executescript("""
        CREATE TABLE findings_writes(path TEXT);
        CREATE TRIGGER findings_inserted AFTER INSERT ON files BEGIN INSERT INTO findings_writes VALUES (new.path); END;
        CREATE TRIGGER findings_updated AFTER UPDATE OF findings ON files
            BEGIN INSERT INTO findings_writes VALUES (new.path); END;
    """)
    return db


def test_appends_to_a_damaged_file_keep_its_findings_true_and_rewrite_them_only_when_they_change(
    tmp_path: Path,
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    settings = WorkerSettings(
        repair=False,
        backup_dir=settings.backup_dir,
        claude_dir=settings.claude_dir,
        roots=settings.roots,
    )
    path = project / "s.jsonl"
    lines = transcript_bytes(400).splitlines(keepends=True)
    for garbage in range(300, 0, -10):  # 30 malformed lines: 30 findings
        lines.insert(garbage, b"{garbage\n")
    path.write_bytes(b"".join(lines))
    writes = _count_findings_writes(tmp_path / "state" / "state.db")
    worker = Worker(store, settings)

    def stored() -> list[dict]:
        state = store.file(str(path))
        assert state is not None
        return state.findings

    def scanned() -> list[dict]:
        return [finding.to_json() for finding in scan_file(path).findings]

    assert worker.process(path).findings == 30 and stored() == scanned()
    assert writes.execute("SELECT COUNT(*) FROM findings_writes").fetchone()[0] == 1
    for number in range(401, 421):  # the chain goes on: the findings stay what they were
        append(path, [transcript_line(number)])
        outcome = worker.process(path)
        assert outcome.kind == "appended" and outcome.findings == 30
        assert store.file(str(path)).watermark.lines == len(lines) + number - 400  # type: ignore[union-attr]
    assert stored() == scanned()
    # the watermark alone
    assert writes.execute("SELECT COUNT(*) FROM findings_writes").fetchone()[0] == 1
    append(path, [b"{more garbage\n"])
    assert worker.process(path).findings == 31
    assert (
        stored() == scanned()
        and writes.execute("SELECT COUNT(*) FROM findings_writes").fetchone()[0] == 2
    )
    # A new worker (a restart) knows nothing of what was stored: it writes them once, then no more.
    worker = Worker(store, settings)
    append(path, [transcript_line(421)])
    worker.process(path)
    append(path, [transcript_line(422)])
    worker.process(path)
    assert (
        stored() == scanned()
        and writes.execute("SELECT COUNT(*) FROM findings_writes").fetchone()[0] == 3
    )


@requires_corpus
def test_a_call_judged_missing_is_pending_again_when_its_client_comes_back(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    project, store, settings = setup
    settings = WorkerSettings(
        repair=False,
        quiet_period=0,
        backup_dir=settings.backup_dir,
        claude_dir=settings.claude_dir,
        roots=settings.roots,
    )
    path, session_id = running_tool_session(project)
    registry = settings.claude_dir / "sessions" / f"{os.getpid()}.json"
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    worker = Worker(store, settings)
    worker.process(path)
    assert [item["class"] for item in store.file(str(path)).findings] == ["pending_tool_call"]  # type: ignore[union-attr]
    registry.unlink()
    worker.process(path)  # idle: judged missing, stored so
    assert [item["class"] for item in store.file(str(path)).findings] == ["missing_tool_result"]  # type: ignore[union-attr]
    registry.write_text(json.dumps({"pid": os.getpid(), "sessionId": session_id}))
    last = json.loads(path.read_bytes().splitlines()[-1])
    note = {
        "type": "system",
        "subtype": "informational",
        "uuid": "00000000-aaaa-bbbb-cccc-111111111111",
        "parentUuid": last["uuid"],
        "sessionId": session_id,
        "content": "note",
    }
    append(path, [json.dumps(note).encode() + b"\n"])
    # live again, the same call unanswered: pending, as a full scan says
    outcome = worker.process(path)
    assert outcome.kind == "appended"
    assert [item["class"] for item in store.file(str(path)).findings] == ["pending_tool_call"]  # type: ignore[union-attr]


def test_lines_read_while_the_archive_could_not_take_them_are_archived_later_never_leaving_a_hole(
    setup: tuple[Path, StateStore, WorkerSettings], tmp_path: Path
) -> None:
    """An archive write that fails (here a real lock held past the timeout; in life a full disk)
    while the state store moves on: the next append must not be archived after a hole, with the
    archive's watermark claiming the file whole. The worker archives from the archive's own
    watermark instead."""
    from riffd.archive.store import Archive, ArchiveGap

    project, store, settings = setup
    path = project / "s.jsonl"
    lines = [transcript_line(number, pad=200) for number in range(1, 61)]
    append(path, lines[:20])
    archive = Archive(tmp_path / "archive.db", lock_timeout=0.05)
    worker = Worker(store, settings, archive=archive)
    worker.process(path)
    append(path, lines[20:40])
    blocker = sqlite3.connect(tmp_path / "archive.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # these 20 lines cannot be archived when read
    worker.process(path)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert store.file(str(path)).watermark.lines == 40  # detection went on
    append(path, lines[40:])
    worker.process(path)  # the next append: offered from byte past the archive's watermark
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes() == b"".join(lines)
    assert archive.cursor(str(path)) == (0, path.stat().st_size)
    with pytest.raises(ArchiveGap):  # the archive itself refuses a hole, and stores nothing of it
        archive.add_lines(str(path), path.stat().st_size + 10, [b'{"type":"user"}'])
    assert archive.cursor(str(path)) == (0, path.stat().st_size)
    archive.close()


def test_a_rewrite_the_archive_missed_starts_a_new_generation_and_mixes_nothing(
    setup: tuple[Path, StateStore, WorkerSettings], tmp_path: Path
) -> None:
    """The file is rewritten (shorter, other lines) while the archive cannot take the rewrite (a
    lock past the timeout); then lines are appended. The archive must not add them to the old
    generation after its old lines, nor skip the new file's lines below its old watermark: the old
    version stays whole, the new one is a new generation."""
    from riffd.archive.store import Archive, ArchiveMismatch

    project, store, settings = setup
    path = project / "s.jsonl"
    old = [transcript_line(number, pad=100) for number in range(1, 31)]
    new = [
        transcript_line(number, session_id="22222222-3333-4444-5555-666666666666", pad=100)
        for number in range(1, 61)
    ]
    append(path, old)
    archive = Archive(tmp_path / "archive.db", lock_timeout=0.05)
    worker = Worker(store, settings, archive=archive)
    worker.process(path)
    replacement = path.with_suffix(".new")
    replacement.write_bytes(b"".join(new[:20]))
    os.replace(replacement, path)  # rewritten, by someone else
    blocker = sqlite3.connect(tmp_path / "archive.db", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    worker.process(path)  # read again from the start; the archive cannot take it
    blocker.execute("ROLLBACK")
    blocker.close()
    append(path, new[20:])
    worker.process(path)
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id, generation=0)) == b"".join(old)
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes() == b"".join(new)
    # The archive itself refuses a line across its watermark that is not the end of its torn last
    # line
    torn = project / "torn.jsonl"
    torn.write_bytes(old[0] + old[1][:50])
    archive.add_lines(str(torn), 0, [old[0][:-1], old[1][:50]], last_terminated=False)
    with pytest.raises(ArchiveMismatch):
        archive.add_lines(str(torn), len(old[0]), [new[5][:-1]])
    assert b"".join(archive.iter_file(archive.files_of(str(torn))[0][0])) == old[0] + old[1][:50]
    archive.close()


def test_a_file_recreated_with_a_line_changed_and_the_same_last_one_is_a_new_generation(
    setup: tuple[Path, StateStore, WorkerSettings], tmp_path: Path
) -> None:
    """A transcript deleted (the worker forgets it) and written again with a line changed in the
    middle, its length kept, and one more line: the worker, finding the archive's last line where
    the archive ended, archived the new line after the old ones (a version that never existed).
    Now the archive's newest generation is the file, the old one kept whole."""
    from riffd.archive.store import Archive

    project, store, settings = setup
    path = project / "s.jsonl"
    old = [transcript_line(number, pad=100) for number in range(1, 31)]
    edited = [*old]
    edited[10] = old[10].replace(b"x" * 10, b"y" * 10)
    assert edited[10] != old[10] and len(edited[10]) == len(old[10])
    append(path, old)
    archive = Archive(tmp_path / "archive.db")
    worker = Worker(store, settings, archive=archive)
    worker.process(path)
    path.unlink()
    assert worker.process(path).kind == "gone"
    append(path, [*edited, transcript_line(31, pad=100)])
    worker.process(path)
    worker.batches.flush(str(path))
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    assert b"".join(archive.iter_file(file_id, generation=0)) == b"".join(old)
    archive.close()


def test_an_idle_files_unfinished_line_is_settled_once_and_again_when_the_archive_lacks_it(
    setup: tuple[Path, StateStore, WorkerSettings], tmp_path: Path
) -> None:
    """An idle file ending in a whole record without its newline: the first look archives that
    line; looking again at the unchanged file reads nothing (no cost at each rescan); when the
    archive does not hold the line (an archive made anew), the next look archives it again."""
    from riffd.archive.store import Archive

    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(5) + transcript_line(6).rstrip(b"\n"))
    old = time.time() - 7200
    os.utime(path, (old, old))
    fs = CountingFS()
    archive = Archive(tmp_path / "archive.db")
    worker = Worker(store, settings, fs=fs, archive=archive)
    assert worker.process(path).kind == "read"
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    fs.bytes_read = 0
    assert worker.process(path).kind == "unchanged" and fs.bytes_read == 0
    archive.close()
    (tmp_path / "archive.db").unlink()
    fresh = Archive(tmp_path / "archive.db")
    again = Worker(store, settings, fs=fs, archive=fresh)
    assert again.process(path).kind != "unchanged"
    ((file_id, _path, _session),) = fresh.files_of(str(path))
    assert b"".join(fresh.iter_file(file_id)) == path.read_bytes()
    fresh.close()


def test_the_archive_catch_up_takes_an_unfinished_line_once_and_then_leaves_it(
    setup: tuple[Path, StateStore, WorkerSettings],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The worker could not archive an idle file's unfinished line (the archive was off, locked,
    or the disk full): the rescan's catch-up archives it to the file's end. Once it is archived,
    the next catch-ups leave the file alone (they read it again at every rescan)."""
    from riffd.archive.store import Archive
    from riffd.daemon.jobs import catch_up_archive

    project, store, settings = setup
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(5) + transcript_line(6).rstrip(b"\n"))
    old = time.time() - 7200
    os.utime(path, (old, old))
    Worker(store, settings).process(path)  # no archive: the line waits
    archive = Archive(tmp_path / "archive.db")
    catch_up_archive(archive, store, quiet_period=settings.quiet_period)
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert b"".join(archive.iter_file(file_id)) == path.read_bytes()
    caplog.set_level("INFO", logger="riffd.daemon.jobs")
    caplog.clear()
    for _rescan in range(3):
        catch_up_archive(archive, store, quiet_period=settings.quiet_period)
    assert [record.getMessage() for record in caplog.records] == []
    archive.close()


def test_unsettled_tails_are_the_quiet_files_whose_unfinished_line_was_judged_too_early(
    tmp_path: Path,
) -> None:
    """StateStore.unsettled_tails, which every rescan queues: a file ending in an unfinished line,
    quiet now, judged before its quiet period was over (or at the same moment); not one judged
    after it, not one quiet for less, not one with no unfinished line."""
    from riffd.state.records import Watermark

    store = StateStore(tmp_path / "state.db")
    now, quiet = 10_000.0, 120.0

    def save(name: str, size: int, mtime: float, judged_at: float) -> None:
        mark = Watermark(f"/p/{name}.jsonl", 1, 1, 100, 3, 0, "", 0, "", size, int(mtime * 1e9))
        store.save_file(mark, name, [], 0, judged_at=judged_at)

    save("early", 140, now - 500, now - 500 + quiet - 0.5)  # judged just before it was quiet
    save("late", 140, now - 500, now - 500 + quiet + 0.5)  # judged once quiet: settled
    save("fresh", 140, now - 60, now - 60)  # not quiet yet: the worker looks again itself
    save("whole", 100, now - 500, now - 500)  # no unfinished line
    assert store.unsettled_tails(quiet, now) == ["/p/early.jsonl"]
    store.close()


def test_an_unchanged_file_looked_at_early_is_looked_at_again_once_quiet(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    """An event that changes nothing brings a file with an unfinished line back before its quiet
    period is over: the worker, finding it unchanged, still asks to look at it again when the
    quiet period ends (it asked for nothing, and the line waited for the next change)."""
    project, store, settings = setup
    quiet = WorkerSettings(**{**settings.__dict__, "quiet_period": 30.0})
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(5) + transcript_line(6)[:40])
    worker = Worker(store, quiet)
    first = worker.process(path)
    assert first.retry_after is not None and 29 < first.retry_after <= 31
    again = worker.process(path)  # nothing changed
    assert again.kind == "unchanged"
    assert again.retry_after is not None and 0 < again.retry_after <= 31


def test_a_close_that_fails_after_the_read_is_no_read_error(
    setup: tuple[Path, StateStore, WorkerSettings],
) -> None:
    """The worker closes a file once it is read and its watermark taken: EIO there (a cloud folder)
    loses nothing, so the look stands: processed, not skipped, no read error."""

    class CloseFails(FileSystem):
        def close(self, fd: int) -> None:
            super().close(fd)
            raise OSError(errno.EIO, "Input/output error")

    project, store, settings = setup
    path = project / "s.jsonl"
    append(path, [transcript_line(number) for number in range(1, 11)])
    worker = Worker(store, settings, fs=CloseFails())
    assert worker.process(path).kind == "read"
    append(path, [transcript_line(11)])
    outcome = worker.process(path)
    assert (outcome.kind, outcome.lines) == ("appended", 1)
    state = store.file(str(path))
    assert state is not None and state.watermark.offset == path.stat().st_size
    assert store.counters().get("errors.read", 0) == 0
