"""The queue, the watcher (real watchdog observers) and reconciliation against watermarks."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

import pytest

from riffd.daemon.watcher import TranscriptFilter, Watcher, choose_observer, reconcile
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.daemon.workqueue import WorkQueue
from riffd.fsio import filesystem_type
from riffd.state.store import StateStore

LINE = b'{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}\n'


def test_a_burst_on_one_file_is_processed_once() -> None:
    queue = WorkQueue(debounce=0.05)
    for _ in range(50):
        queue.put("/a.jsonl")
    queue.put("/b.jsonl")
    got = [queue.get(1.0), queue.get(1.0), queue.get(0.2)]
    assert sorted(item[0] for item in got if item) == ["/a.jsonl", "/b.jsonl"]
    assert got[2] is None


def test_debounce_waits_for_quiet_but_not_forever() -> None:
    queue = WorkQueue(debounce=0.1, max_delay_factor=3)
    started = time.monotonic()
    queue.put("/a.jsonl")
    deadline = started + 0.25
    while time.monotonic() < deadline:  # keeps writing: the trailing debounce would wait forever
        queue.put("/a.jsonl")
        assert queue.get(0.01) is None
    item = queue.get(1.0)
    # capped at 3 x debounce after the first event
    assert item is not None and time.monotonic() - started < 0.6


def test_a_scheduled_retry_waits_its_delay_and_an_event_brings_it_forward() -> None:
    queue = WorkQueue(debounce=0.01)
    queue.put("/a.jsonl", delay=30)
    assert queue.get(0.05) is None
    queue.put("/a.jsonl")
    assert queue.get(1.0) is not None


def waiting_get(queue: WorkQueue, timeout: float) -> tuple[threading.Thread, list[object]]:
    """A `get` waiting in another thread, as the worker thread waits."""
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append((queue.get(timeout), time.monotonic())))
    thread.start()
    time.sleep(0.1)  # (waiting now)
    return thread, got


def test_a_waiting_get_is_woken_by_a_new_path_and_by_a_retry_brought_forward() -> None:
    queue = WorkQueue(debounce=0.05)
    thread, got = waiting_get(queue, 5.0)
    put_at = time.monotonic()
    queue.put("/a.jsonl")
    thread.join(5.0)
    item, at = got[0]  # type: ignore[misc]
    assert item is not None and at - put_at < 1.0  # not at the 5 s timeout
    queue.put("/b.jsonl", delay=30)  # a far-off retry, which a waiting get waits for ...
    thread, got = waiting_get(queue, 5.0)
    put_at = time.monotonic()
    queue.put("/b.jsonl")  # ... until an event brings it forward: the get is told
    thread.join(5.0)
    item, at = got[0]  # type: ignore[misc]
    assert item is not None and item[0] == "/b.jsonl" and at - put_at < 1.0


def test_a_second_event_that_only_delays_a_path_still_lets_it_come_due() -> None:
    queue = WorkQueue(debounce=0.2)
    queue.put("/a.jsonl")
    thread, got = waiting_get(queue, 5.0)  # waits for the first due time
    queue.put("/a.jsonl")  # pushed on, the waiter not told: it wakes, looks, waits again
    put_at = time.monotonic()
    thread.join(5.0)
    item, at = got[0]  # type: ignore[misc]
    assert item is not None and 0.15 < at - put_at < 1.0


def test_get_returns_when_stopped() -> None:
    queue = WorkQueue(debounce=0.01)
    stop = threading.Event()
    stop.set()
    assert queue.get(5.0, stop) is None


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, TranscriptFilter]:
    root = tmp_path / "projects"
    (root / "-p").mkdir(parents=True)
    return root, TranscriptFilter((root,))


def test_filter_takes_transcripts_only(roots: tuple[Path, TranscriptFilter]) -> None:
    root, transcripts = roots
    assert transcripts.matches(root / "-p" / "s.jsonl")
    assert transcripts.matches(root / "-p" / "s" / "subagents" / "agent-a1.jsonl")
    for other in (
        "-p/.s.jsonl.riffd-0123456789ab.tmp",
        "-p/journal.jsonl",
        "-p/s/tool-results/x.jsonl",
        "-p/memory/m.jsonl",
        "-p/s.jsonl.compact.tmp.ab12",
        "-p/s.meta.json",
        "-p/s.jsonl.bak",
    ):
        assert not transcripts.matches(root / other), other
    assert not transcripts.matches(root.parent / "elsewhere.jsonl")
    assert not TranscriptFilter((root,), exclude=("-p/*",)).matches(root / "-p" / "s.jsonl")


@pytest.mark.parametrize("kind", ["native", "polling"])
def test_watcher_reports_appends_new_files_and_new_folders(
    roots: tuple[Path, TranscriptFilter], kind: str
) -> None:
    root, transcripts = roots
    seen: set[str] = set()
    changed = threading.Condition()

    def on_change(path: str) -> None:
        with changed:
            seen.add(path)
            changed.notify_all()

    def wait_for(path: Path) -> bool:
        with changed:
            return changed.wait_for(lambda: str(path) in seen, timeout=10)

    existing = root / "-p" / "s.jsonl"
    existing.write_bytes(LINE)
    watcher = Watcher(transcripts, on_change, kind, polling_interval=0.1)
    watcher.start()
    try:
        assert watcher.observer_kind == kind
        with open(existing, "ab") as handle:
            handle.write(LINE)
        assert wait_for(existing)
        new_project = root / "-q" / "t.jsonl"
        new_project.parent.mkdir()
        new_project.write_bytes(LINE)
        assert wait_for(new_project)
        ignored = root / "-p" / "journal.jsonl"
        ignored.write_bytes(LINE)
        # events come in order: once this is seen, so was the other
        sentinel = root / "-p" / "sentinel.jsonl"
        sentinel.write_bytes(LINE)
        assert wait_for(sentinel)
        assert str(ignored) not in seen
    finally:
        watcher.stop()


def test_a_root_that_appears_later_is_watched_after_refresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "projects"
    seen: list[str] = []
    watcher = Watcher(TranscriptFilter((root,)), seen.append, "native")
    with caplog.at_level(logging.INFO):
        watcher.start()
    try:
        assert watcher.watched == set()
        # the start says which folder it waits for (a wrong CLAUDE_CONFIG_DIR shows at once)
        assert "watching nothing yet with native events" in caplog.text
        assert f"waiting for {root} to appear" in caplog.text
        root.mkdir()
        watcher.refresh()
        assert watcher.watched == {root}
    finally:
        watcher.stop()


@pytest.mark.parametrize("kind", ["native", "polling"])
def test_a_root_removed_and_made_again_is_watched_again(tmp_path: Path, kind: str) -> None:
    """A root removed and made again kept its place among the roots watched, its watch gone with
    it: the report said healthy, 0 files watched, and no event of it ever came."""
    root = tmp_path / "projects"
    (root / "-work-a").mkdir(parents=True)
    seen: list[str] = []
    watcher = Watcher(TranscriptFilter((root,)), seen.append, kind, polling_interval=0.1)
    watcher.start()
    try:
        assert watcher.watched == {root} and watcher.missing_roots() == []
        shutil.rmtree(root)
        assert watcher.missing_roots() == [root]  # (what the daemon's tick looks at)
        watcher.refresh()
        assert watcher.watched == set()
        (root / "-work-a").mkdir(parents=True)
        assert watcher.refresh() == [root] and watcher.watched == {root}
        path = root / "-work-a" / "11111111-2222-3333-4444-555555555555.jsonl"
        path.write_bytes(LINE)
        deadline = time.monotonic() + 10
        while str(path) not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert str(path) in seen, seen
    finally:
        watcher.stop()


def test_reconcile_catches_changes_made_while_not_watching(
    roots: tuple[Path, TranscriptFilter], tmp_path: Path
) -> None:
    root, transcripts = roots
    store = StateStore(tmp_path / "state.db")
    worker = Worker(store, WorkerSettings(repair=False))
    unchanged, appended, deleted = (root / "-p" / f"{name}.jsonl" for name in ("a", "b", "c"))
    for path in (unchanged, appended, deleted):
        path.write_bytes(LINE)
        worker.process(path)
    queued: list[str] = []
    assert reconcile(transcripts, store, queued.append) == 0  # everything matches its watermark
    with open(appended, "ab") as handle:  # "while riffd was down"
        handle.write(LINE)
    deleted.unlink()
    new = root / "-p" / "d.jsonl"
    new.write_bytes(LINE)
    assert reconcile(transcripts, store, queued.append) == 3
    assert sorted(queued) == sorted(map(str, (appended, deleted, new)))


def test_auto_polls_network_and_wsl_file_systems(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\ndrvfs {tmp_path} 9p rw 0 0\n")
    assert filesystem_type(tmp_path / "x", mounts) == "9p"
    assert filesystem_type(Path("/usr"), mounts) == "ext4"
    assert choose_observer("polling", [Path("/")]) == ("polling", "configured")
