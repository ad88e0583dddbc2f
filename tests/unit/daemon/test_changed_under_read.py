"""A transcript changed in place while the worker reads it (Claude Code's own truncate at an offset
to drop a line, then its next appends; a copy over it): nothing of that read is kept. Before, the
worker went on reading the new file from where the old one ended: the archive held a version that
never existed (a line cut in two, the start of a line in no generation) and the stored findings
were those of that splice (a malformed line, a dangling parent) for ever after, the watermark
fingerprinted on the new file. Real files, a real worker and archive; the change is made through
the I/O seam at the read's next pread, as the helper's reproducer made it with inotify."""

from __future__ import annotations

import errno
import json
import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from conftest import transcript_bytes, transcript_line, worker_home
from riffd.archive.store import Archive
from riffd.daemon.cache import IndexCache
from riffd.daemon.worker import Worker
from riffd.fsio import FileSystem
from riffd.fsio.retry import RetryPolicy
from riffd.state.store import StateStore
from riffd.tracker.tracker import ToolCallTracker
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


def _read_once(  # type: ignore[no-untyped-def]
    project: Path, settings, store: StateStore, archive: Archive, seam: FileSystem
) -> tuple[Path, Worker]:
    """A 40-line transcript read once by a worker through `seam`: the file and the worker."""
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(40, pad=200))
    worker = Worker(store, settings, archive=archive, fs=seam)
    worker.process(path)
    return path, worker


def _kept_as_the_file_is(store: StateStore, archive: Archive, path: Path) -> None:
    """The archive's newest generation is the file, and the stored findings are a scan's of it."""
    assert _archived(archive, path) == path.read_bytes()
    assert store.file(str(path)).findings == [f.to_json() for f in scan_file(path).findings]


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
    seam = ChangedAtRead()
    path, worker = _read_once(project, settings, store, archive, seam)
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
    _kept_as_the_file_is(store, archive, path)
    assert store.file(str(path)).watermark.offset == path.stat().st_size


def test_a_copy_over_the_file_during_its_first_read(home) -> None:  # type: ignore[no-untyped-def]
    """A file new to the worker is copied over (cut to nothing, written again) while the worker
    reads it from the start: the archive's newest generation is the new file, whole, and the
    findings are its own; it is the archive's only generation."""
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
    # The read thrown away held its lines (under HELD_BYTES): it archived nothing, so no version
    # that never existed is kept as an older generation either
    ((file_id, _path, _session),) = archive.files_of(str(path))
    assert len(archive.generations(file_id)) == 1


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
    _kept_as_the_file_is(store, archive, path)


def _filled(number: int, size: int, fill: bytes) -> bytes:
    """A line of about `size` bytes of text `fill` (lines of one filler would hold the same bytes
    at the same places, which no check of bytes tells apart)."""
    return transcript_line(number, pad=size).replace(b"x" * size, fill * size)


def test_a_truncate_behind_a_read_whose_first_chunk_is_over_a_mib(home) -> None:  # type: ignore[no-untyped-def]
    """Found by review: an append of a 2.5 MiB line, a short one and a 1 MiB one, truncated at the
    short one 3 MiB into the read and given a 1.5 MiB line instead. The first chunk read (the long
    line and the short one) is over the 1 MiB compared at the start; the end compared must still
    reach back over the short line."""
    project, settings, store, archive = home
    seam = ChangedAtRead()
    path, worker = _read_once(project, settings, store, archive, seam)
    start = path.stat().st_size
    long_line = _filled(41, int(2.5 * (1 << 20)), b"a")
    short = _filled(42, 50, b"b")
    with open(path, "ab") as handle:
        handle.write(long_line + short + _filled(43, 1 << 20, b"c"))
    cut = start + len(long_line)
    seam.aim(path, at=start + (3 << 20), cut=cut, then=[_filled(42, 3 << 19, b"d")])
    worker.process(path)
    assert seam.done
    _kept_as_the_file_is(store, archive, path)


def test_a_truncate_below_the_watermark_during_the_read_of_an_append(home) -> None:  # type: ignore[no-untyped-def]
    """The truncate cuts lines read before this read began (below its watermark), and appends
    others: the file is read again from its start, as a new archive generation, and nothing of
    the read is kept."""
    project, settings, store, archive = home
    seam = ChangedAtRead()
    path, worker = _read_once(project, settings, store, archive, seam)
    first = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(transcript_line(41, pad=200))
    before = path.stat().st_size
    cut = len(b"".join(first.splitlines(keepends=True)[:38]))  # lines 39 and 40 go too
    seam.aim(path, at=before, cut=cut, then=[transcript_line(39, pad=5000), transcript_line(40)])
    worker.process(path)
    assert seam.done
    _kept_as_the_file_is(store, archive, path)
    assert _archived(archive, path, generation=0) == first  # the generation read before
    assert store.counters()["rescans.changed_under_read"] == 1


def _record(number: int, kind: str, content: object, stamp: datetime) -> bytes:
    record = {
        "type": kind,
        "uuid": f"u{number}",
        "parentUuid": f"u{number - 1}" if number else None,
        "sessionId": "11111111-2222-3333-4444-555555555555",
        "timestamp": stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "message": {"role": kind, "content": content},
    }
    return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def _read_call(number: int, tool_id: str, stamp: datetime) -> bytes:
    use = [{"type": "tool_use", "id": tool_id, "name": "Read", "input": {"file_path": "/a"}}]
    return _record(number, "assistant", use, stamp)


def _result(number: int, tool_id: str, stamp: datetime, text: str = "hello") -> bytes:
    return _record(
        number, "user", [{"type": "tool_result", "tool_use_id": tool_id, "content": text}], stamp
    )


def test_a_repeated_call_found_in_a_read_thrown_away_is_kept(home) -> None:  # type: ignore[no-untyped-def]
    """Found by review: the tracker ignores tool_use ids it has seen, so a repeated Read found in a
    read the file changed under was found no more by the read again, and never stored."""
    project, settings, store, archive = home
    path = project / "s.jsonl"
    now = datetime.now(UTC)
    path.write_bytes(
        _record(0, "user", "hi", now)
        + _read_call(1, "t1", now)
        + _result(2, "t1", now + timedelta(seconds=1))
    )
    seam = ChangedAtRead()
    worker = Worker(store, settings, archive=archive, fs=seam, tracker=ToolCallTracker())
    worker.process(path)
    last = _result(4, "t2", now + timedelta(seconds=11))
    with open(path, "ab") as handle:
        handle.write(_read_call(3, "t2", now + timedelta(seconds=10)) + last)
    size = path.stat().st_size
    changed = _result(4, "t2", now + timedelta(seconds=11), text="hellO")
    seam.aim(path, at=size, cut=size - len(last), then=[changed])
    worker.process(path)
    assert seam.done
    classes = [finding["class"] for finding in store.file(str(path)).findings]
    assert classes == ["redundant_tool_call"]


class FailsAtTheCheck(FileSystem):
    """While `failing`: reads succeed until one comes back empty (the read reached the file's end),
    and every read after that fails with EIO, as a cloud file evicted just as the worker checks
    what it read."""

    def __init__(self) -> None:
        self.failing, self.at_end = True, False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.failing and self.at_end:
            raise OSError(errno.EIO, "Input/output error")
        data = super().pread(fd, size, offset)
        self.at_end = not data
        return data


def test_a_check_that_cannot_read_is_a_read_error_not_a_change(home) -> None:  # type: ignore[no-untyped-def]
    """EIO at every try of the check's reads is a read that failed: counted and logged as one, the
    file skipped with the error, no watermark taken; once reads work, the archive's newest
    generation and the findings are the file's. Before, it was taken for a change (read again
    three times, then "it changed as it was read"), and no read error was counted."""
    project, settings, store, archive = home
    settings = replace(settings, retry=RetryPolicy(attempts=2, first_wait=0.001))
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(40, pad=200))
    seam = FailsAtTheCheck()
    worker = Worker(store, settings, archive=archive, fs=seam)
    outcome = worker.process(path)
    assert outcome.kind == "skipped"
    assert "2 attempts" in outcome.why and "changed" not in outcome.why
    counters = store.counters()
    assert counters.get("errors.read") == 1
    assert "rescans.changed_under_read" not in counters
    assert store.file(str(path)) is None  # no watermark: read again from the start next time
    seam.failing = False
    assert worker.process(path).kind != "skipped"
    _kept_as_the_file_is(store, archive, path)


class Killed(BaseException):
    """The daemon's end at that instant (nothing of the worker's handles it)."""


class ChangedThenKilled(FileSystem):
    """At the pread at byte `at`, cuts the file to `cut` bytes and appends `then`, as Claude Code's
    truncate and its next appends; at the pread at byte `kill_at`, the daemon is killed
    (Killed)."""

    def __init__(self) -> None:
        self.at = self.kill_at = -1
        self.cut, self.then, self.path = 0, b"", Path()

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if offset == self.kill_at:
            raise Killed
        if offset == self.at:
            self.at = -1  # once
            os.truncate(self.path, self.cut)
            with open(self.path, "ab") as handle:
                handle.write(self.then)
        return super().pread(fd, size, offset)


def test_a_splice_archived_then_a_kill_never_stays_the_newest_generation(home) -> None:  # type: ignore[no-untyped-def]
    """An append of more than HELD_BYTES (its lines go to the archive as they are read) is cut and
    rewritten behind the worker, which archives the splice; the daemon is killed before it finds
    out. The next daemon reads the file from its watermark: the archive, ahead of it with the
    splice, is checked against the file, and its newest generation is the file. Before, the new
    lines went on the spliced generation (its last line was the file's)."""
    project, settings, store, archive = home
    path = project / "s.jsonl"
    path.write_bytes(transcript_bytes(10, pad=200))
    seam = ChangedThenKilled()
    seam.path = path
    first = Worker(store, settings, archive=archive, fs=seam)
    first.process(path)
    start = path.stat().st_size
    appended = [transcript_line(number, pad=200) for number in range(11, 40_000)]
    with open(path, "ab") as handle:
        handle.write(b"".join(appended))
    assert path.stat().st_size - start > 13 << 20  # past HELD_BYTES: archived as it is read
    seam.at, seam.kill_at = start + (4 << 20), start + (10 << 20)
    seam.cut = start + sum(map(len, appended[:9]))  # at line 20's start
    seam.then = b"".join(line.replace(b"x" * 12, b"A" * 12, 1) for line in appended[9:])
    with pytest.raises(Killed):
        first.process(path)
    spliced = _archived(archive, path)
    assert len(spliced) > 8 << 20 and spliced != path.read_bytes()[: len(spliced)]
    assert spliced.endswith(path.read_bytes()[len(spliced) - 1000 : len(spliced)])  # its last line
    again = Worker(store, settings, archive=archive)
    again.process(path)
    again.batches.flush_all()
    _kept_as_the_file_is(store, archive, path)
