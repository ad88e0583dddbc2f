"""A transcript changed in place while the worker reads it (Claude Code's own truncate at an offset
to drop a line, then its next appends; a copy over it): nothing of that read is kept. Before, the
worker went on reading the new file from where the old one ended: the archive held a version that
never existed (a line cut in two, the start of a line in no generation) and the stored findings
were those of that splice (a malformed line, a dangling parent) for ever after, the watermark
fingerprinted on the new file. Real files, a real worker and archive; the change is made through
the I/O seam at the read's next pread, as the helper's reproducer made it with inotify."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import transcript_bytes, transcript_line, worker_home
from riffd.archive.store import Archive
from riffd.daemon.cache import IndexCache
from riffd.daemon.worker import Worker
from riffd.fsio import FileSystem
from riffd.state.store import StateStore
from riffd.transcript.incremental import GrowingIndex
from riffd.transcript.scan import scan_file


class ChangedAtRead(FileSystem):
    """Just before the first pread at byte `at` (the read going on past what it took so far), cuts
    the file to `cut` bytes and appends `then`, each by its own open, as Claude Code writes."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.path: Path | None = None
        self.cut = 0
        self.then: list[bytes] = []
        self.done = False

    def aim(self, path: Path, at: int, cut: int, then: list[bytes]) -> None:
        self.path, self.at, self.cut, self.then, self.done = path, at, cut, then, False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if not self.done and offset == self.at:
            self.done = True
            assert self.path is not None
            os.truncate(self.path, self.cut)
            for line in self.then:
                with open(self.path, "ab") as handle:
                    handle.write(line)
        return super().pread(fd, size, offset)


def _archived(archive: Archive, path: Path, generation: int | None = None) -> bytes:
    ((file_id, _path, _session),) = archive.files_of(str(path))
    return b"".join(archive.iter_file(file_id, generation=generation))


@pytest.fixture
def home(tmp_path: Path):  # type: ignore[no-untyped-def]
    project, settings = worker_home(tmp_path, repair=False, quiet_period=3600, archive_delay=0)
    store = StateStore(tmp_path / "state" / "state.db")
    archive = Archive(tmp_path / "archive.db")
    yield project, settings, store, archive
    archive.close()
    store.close()


def test_a_line_dropped_by_a_truncate_during_the_read_of_its_append(home) -> None:  # type: ignore[no-untyped-def]
    """Claude Code appends a line, the worker starts reading it, and Claude Code truncates the file
    at that line's start and appends two others: the archive and the findings end as those of the
    file, every line of it whole."""
    project, settings, store, archive = home
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(40, pad=200))
    seam = ChangedAtRead()
    worker = Worker(store, settings, archive=archive, fs=seam)
    worker.process(path)
    dropped = transcript_line(41, pad=200)
    with open(path, "ab") as handle:
        handle.write(dropped)
    before = path.stat().st_size
    seam.aim(
        path,
        at=before,
        cut=before - len(dropped),
        then=[transcript_line(41, pad=6000), transcript_line(42)],
    )
    worker.process(path)
    assert seam.done, "the change was not made during the read"
    data = path.read_bytes()
    assert _archived(archive, path) == data
    assert store.file(str(path)).findings == [f.to_json() for f in scan_file(path).findings]
    assert store.file(str(path)).watermark.offset == len(data)


def test_a_copy_over_the_file_during_its_first_read(home) -> None:  # type: ignore[no-untyped-def]
    """A file new to the worker is copied over (cut to nothing, written again) while the worker
    reads it from the start: the archive's newest generation is the new file, whole, and the
    findings are its own."""
    project, settings, store, archive = home
    path = project / "s.jsonl"
    old = transcript_bytes(3000, pad=600)  # a few reads' worth
    new = transcript_bytes(2800, pad=650)
    path.write_bytes(old)
    seam = ChangedAtRead()
    seam.aim(path, at=1 << 20, cut=0, then=[new])
    Worker(store, settings, archive=archive, fs=seam).process(path)
    assert seam.done
    assert _archived(archive, path) == new
    assert store.file(str(path)).findings == [f.to_json() for f in scan_file(path).findings]


def test_the_cache_counts_an_index_that_grew_in_place_as_it_is_when_put_back() -> None:
    cache = IndexCache(max_lines=100, active_seconds=0)
    index = GrowingIndex("a")
    index.add_lines(0, [b"{}"] * 4)
    cache.put("a", index)
    grown = cache.get("a", index.end)
    assert grown is index
    index.add_lines(index.end, [b"{}"] * 6)  # an append read into the cached index
    cache.put("a", index)
    assert cache.lines == 10
    cache.drop("a")
    assert cache.lines == 0


class ChangedAfterCheck(FileSystem):
    """Once a read has reached the end of the file (a pread that returns nothing) and `checks` more
    preads were made (the worker's check of what it read), cuts the file to `cut` bytes and appends
    `then` before the next file call of any kind."""

    def __init__(self, checks: int) -> None:
        self.checks = checks
        self.path: Path | None = None
        self.cut = 0
        self.then: list[bytes] = []
        self.seen: int | None = None  # preads since the end was reached (None: not yet)
        self.done = False

    def aim(self, path: Path, cut: int, then: list[bytes]) -> None:
        self.path, self.cut, self.then, self.seen, self.done = path, cut, then, None, False

    def _maybe(self) -> None:
        if (
            self.path is not None
            and not self.done
            and self.seen is not None
            and self.seen >= self.checks
        ):
            self.done = True
            os.truncate(self.path, self.cut)
            for line in self.then:
                with open(self.path, "ab") as handle:
                    handle.write(line)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._maybe()
        data = super().pread(fd, size, offset)
        if self.path is not None and not self.done:
            if self.seen is not None:
                self.seen += 1
            elif not data:
                self.seen = 0
        return data

    def fstat(self, fd: int) -> os.stat_result:
        self._maybe()
        return super().fstat(fd)

    def close(self, fd: int) -> None:
        self._maybe()
        super().close(fd)


def test_a_truncate_landing_just_after_the_check_is_seen_at_the_next_look(home) -> None:  # type: ignore[no-untyped-def]
    """The same truncate and appends, landing once the worker has checked what it read: the new
    watermark is fingerprinted on the bytes it read, so the next look sees the change and reads the
    file again. Before, the fingerprints were read from the file after the check, the new bytes
    were taken for the ones read, and the next look went on from the old end: a splice."""
    project, settings, store, archive = home
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(40, pad=200))
    seam = ChangedAfterCheck(checks=2)  # the watermark's tail, then what was read
    worker = Worker(store, settings, archive=archive, fs=seam)
    worker.process(path)
    dropped = transcript_line(41, pad=200)
    with open(path, "ab") as handle:
        handle.write(dropped)
    before = path.stat().st_size
    # the new line starts as the dropped one did, and is longer: the file never ends before the
    # old end, where the next look goes on from
    seam.aim(path, cut=before - len(dropped), then=[dropped[:-3] + b"x" * 5000 + b'"}}\n'])
    worker.process(path)
    assert seam.done, "the change was not made"
    worker.process(path)  # the next look
    data = path.read_bytes()
    assert _archived(archive, path) == data
    assert store.file(str(path)).findings == [f.to_json() for f in scan_file(path).findings]
