"""Appended lines go to the archive in batches (riffd.daemon.archive_batch): they wait while the
watermark moves on, and are written, whole and once, before anything else is done with their file:
a rewrite, a repair, the file gone, a batch grown big, its delay past."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import worker_home
from helpers import damage
from riffd.archive.store import Archive
from riffd.daemon import archive_batch
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.fsio import FileSystem
from riffd.state.store import StateStore
from riffd.transcript.scan import scan_file

LINES = damage.generated_session(segments=2, turns=3, parallel=2)


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, StateStore, Archive, WorkerSettings]:
    project, settings = worker_home(
        tmp_path,
        quiet_period=3600,  # no repair unless a test asks
        archive_delay=3600,  # the batches wait until a test writes them
    )
    store = StateStore(tmp_path / "state" / "state.db")
    archive = Archive(tmp_path / "state" / "archive.db")
    yield project / "s.jsonl", store, archive, settings
    archive.close()
    store.close()


def archived(archive: Archive, path: Path, generation: int | None = None) -> bytes:
    ((file_id, _path, _session),) = archive.files_of(str(path))
    return b"".join(archive.iter_file(file_id, generation=generation))


def grow(path: Path, lines: list[bytes], worker: Worker) -> None:
    """Append `lines` one by one, the worker processing each append, as the daemon does."""
    for line in lines:
        with open(path, "ab") as handle:
            handle.write(line)
        assert worker.process(path).kind in ("read", "appended")


def test_appended_lines_wait_and_are_written_once_and_whole(box) -> None:
    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:10], worker)  # the first read is archived at once, the appends wait
    assert archived(archive, path) == LINES[0]
    assert store.file(str(path)).watermark.offset == path.stat().st_size  # detection went on
    worker.batches.delay = 0
    worker.batches.flush_due()
    assert archived(archive, path) == path.read_bytes() == b"".join(LINES[:10])
    grow(path, LINES[10:], worker)
    worker.batches.flush_all()
    assert archived(archive, path) == b"".join(LINES)
    assert archive.stats()["lines"] == len(LINES)  # none twice
    assert len(worker.batches) == 0


def test_a_batch_is_written_once_its_delay_is_past(box) -> None:
    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:3], worker)
    worker.batches.flush_due()  # not yet
    assert archived(archive, path) == LINES[0]
    worker.batches.delay = 0.05
    time.sleep(0.06)
    worker.batches.flush_due()
    assert archived(archive, path) == b"".join(LINES[:3])


def test_a_file_gone_while_its_lines_wait_keeps_them_in_the_archive(box) -> None:
    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES, worker)
    data = path.read_bytes()
    path.unlink()  # Claude Code's cleanup, or the user
    assert worker.process(path).kind == "gone"
    assert archived(archive, path) == data


def test_a_rewrite_while_lines_wait_keeps_them_in_the_generation_before(box) -> None:
    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES, worker)
    before = path.read_bytes()
    path.write_bytes(b"".join(LINES[:5]))  # rewritten by someone else, shorter
    assert worker.process(path).kind == "read"
    assert archived(archive, path, generation=0) == before
    assert archived(archive, path) == path.read_bytes()


class SwapWatch(FileSystem):
    """Notes how far the archive had `path` when the repair swapped the new file in."""

    def __init__(self, archive: Archive, path: Path) -> None:
        self.archive, self.path = archive, path
        self.archived_at_swap: list[int] = []

    def exchange(self, src, dst) -> None:
        self.archived_at_swap.append(self.archive.cursor(str(self.path))[1])
        super().exchange(src, dst)

    def replace(self, src, dst) -> None:
        if Path(dst) == self.path:
            self.archived_at_swap.append(self.archive.cursor(str(self.path))[1])
        super().replace(src, dst)


def test_a_repair_writes_the_waiting_lines_before_it_rewrites_the_file(box) -> None:
    path, store, archive, settings = box
    damaged = damage.inject_resumed_duplicate(LINES)
    swaps = SwapWatch(archive, path)
    worker = Worker(store, settings, fs=swaps, archive=archive)
    grow(path, damaged.lines, worker)
    assert archived(archive, path) != damaged.data  # still waiting
    worker.reconfigure(WorkerSettings(**{**settings.__dict__, "quiet_period": 0}))
    assert worker.process(path).repair == "repaired"
    assert scan_file(path).findings == []
    # a daemon killed right after the swap would have had every line of the file it replaced
    assert swaps.archived_at_swap == [len(damaged.data)]
    assert archived(archive, path, generation=0) == damaged.data
    assert archived(archive, path) == path.read_bytes()


def test_a_big_batch_is_written_at_once(box, monkeypatch: pytest.MonkeyPatch) -> None:
    path, store, archive, settings = box
    monkeypatch.setattr(archive_batch, "MAX_BYTES", len(LINES[1]) + len(LINES[2]))
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:3], worker)
    assert archived(archive, path) == b"".join(LINES[:3])


def test_no_delay_writes_each_append_at_once(box) -> None:
    path, store, archive, settings = box
    worker = Worker(
        store, WorkerSettings(**{**settings.__dict__, "archive_delay": 0}), archive=archive
    )
    grow(path, LINES[:4], worker)
    assert archived(archive, path) == b"".join(LINES[:4])
    assert len(worker.batches) == 0


def rewrite_without_last(path: Path, how: str) -> bytes:
    """Claude Code drops the session's last line and writes on; return the new bytes."""
    kept = b"".join(LINES[:5]) + LINES[6]
    if how == "truncate":
        os.truncate(path, len(b"".join(LINES[:5])))
        with open(path, "ab") as handle:
            handle.write(LINES[6])
    else:
        path.with_suffix(".tmp").write_bytes(kept)
        os.replace(path.with_suffix(".tmp"), path)
    return kept


@pytest.mark.parametrize("how", ["truncate", "rename"])
def test_the_catch_up_writes_the_waiting_lines_before_it_reads_a_rewritten_file(box, how) -> None:
    """The file is rewritten without its last line while that line waits; the daemon's catch-up
    (a scheduler thread: at start, each rescan, once the disk has room) looks at it before the
    worker does. It writes the batch first: the line is in the generation before the rewrite."""
    from riffd.daemon.jobs import catch_up_archive

    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:6], worker)
    before = path.read_bytes()
    kept = rewrite_without_last(path, how)
    catch_up_archive(archive, store, batches=worker.batches)
    worker.process(path)
    worker.batches.flush_all()
    assert archived(archive, path, generation=0) == before
    assert archived(archive, path) == path.read_bytes() == kept


def generations(archive: Archive, path: Path) -> list[bytes]:
    file_id = archive.file_id(str(path))
    return [
        b"".join(archive.iter_file(file_id, generation=generation))
        for generation in archive.generations(file_id)
    ]


@pytest.mark.parametrize("how", ["truncate", "rename"])
def test_a_rewrite_another_process_archives_while_lines_wait_loses_none_of_them(
    box, how, tmp_path: Path
) -> None:
    """`riffd archive ingest` (another process, its own connection) archives the rewrite before the
    daemon's worker writes what waited: the file as it was is kept as a generation of its own."""
    from riffd.archive.ingest import ingest_file

    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:6], worker)
    before = path.read_bytes()
    kept = rewrite_without_last(path, how)
    other = Archive(tmp_path / "state" / "archive.db")
    ingest_file(other, path)
    other.close()
    worker.process(path)
    worker.batches.flush_all()
    assert before in generations(archive, path)  # every line read, LINES[5] included
    assert archived(archive, path) == kept


def test_lines_another_process_archived_from_the_unchanged_file_are_kept_once(
    box, tmp_path: Path
) -> None:
    """The other process archived the waiting lines and one more from the file: the batch is in the
    archive already, nothing is added twice."""
    from riffd.archive.ingest import ingest_file

    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:4], worker)  # LINES[1:4] wait
    with open(path, "ab") as handle:
        handle.write(LINES[4])  # not read by the worker yet
    other = Archive(tmp_path / "state" / "archive.db")
    ingest_file(other, path)
    other.close()
    worker.batches.flush_all()
    assert worker.process(path).kind == "appended"
    grow(path, LINES[5:8], worker)
    worker.batches.flush_all()
    assert generations(archive, path) == [b"".join(LINES[:8])]
    assert archive.stats()["lines"] == 8


def test_a_batch_another_process_archived_in_part_is_finished_in_the_same_generation(
    box, tmp_path: Path
) -> None:
    from riffd.archive.ingest import ingest_file

    path, store, archive, settings = box
    worker = Worker(store, settings, archive=archive)
    grow(path, LINES[:3], worker)  # LINES[1:3] wait
    other = Archive(tmp_path / "state" / "archive.db")
    ingest_file(other, path)  # archives them
    other.close()
    grow(path, LINES[3:5], worker)  # they join the same batch, which the archive holds in part
    worker.batches.flush_all()
    assert generations(archive, path) == [b"".join(LINES[:5])]
    assert archive.stats()["lines"] == 5


def test_lines_offered_below_an_unchecked_archive_never_go_on_it(box) -> None:  # type: ignore[no-untyped-def]
    """The archive holds more of a file than the worker offers (lines archived before a kill, or a
    splice), and it cannot be checked against the file now (the file gone as the lines come): none
    of the lines go on that generation, which a line changed before them would make a version that
    never existed; the failure is told. Before, they were added after its last line."""
    path, _store, archive, _settings = box
    old = [b'{"n":1,"x":"old"}', b'{"n":2}', b'{"n":3}']
    new_first = b'{"n":1,"x":"new"}'
    assert len(new_first) == len(old[0])
    archive.add_lines(str(path), 0, old)
    failures: list[str] = []
    batches = archive_batch.ArchiveBatches(
        3600, lambda: archive, lambda _archive, _name, what, _exc: failures.append(what)
    )
    # the worker read the file (new_first, 2, 3, 4) from after its first line; it is gone now
    batches.add(str(path), len(new_first) + 1, [*old[1:], b'{"n":4}'], None)
    batches.add(str(path), len(new_first) + 1, [*old[1:], b'{"n":4}'], None)  # (read again)
    batches.flush_all()
    assert archived(archive, path) == b"".join(line + b"\n" for line in old)
    assert failures == ["check the archive against the file"]
