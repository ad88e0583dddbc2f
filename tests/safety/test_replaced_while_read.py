"""riffd's readers against a transcript replaced while they read it.

The archive's back-fill (`ingest_file`: `riffd archive ingest`, `riffd fix`, the daemon's catch-up)
judges where to go on in a file from the bytes the archive has of it, then reads the rest; the
daemon's worker judges from the file's watermark, then reads what is new. A repair's swap or Claude
Code's own rewrite may replace the file at any instant of that. Each test here renames a new version
over the transcript (a real rename of real files) just before each file call the reader makes, in
turn, through its I/O seam (helpers.replacing), and checks that every generation the archive holds
is a whole version the file had, and that the next look brings the archive (and the worker's
watermark) to the file as it is: never the old file's watermark with the new file's bytes after it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import transcript_bytes, transcript_line, worker_home
from helpers import damage
from helpers.replacing import ReplacedAt, longer_line_3, shorter_line_3
from riffd.archive.ingest import ingest_file, ingest_files
from riffd.archive.store import Archive
from riffd.daemon.worker import Worker, WorkerSettings
from riffd.fsio import FileSystem
from riffd.state.store import StateStore

FIRST = transcript_bytes(10, pad=40)
GROWN = FIRST + transcript_line(11, pad=40) + transcript_line(12, pad=40)
REPAIRS = [shorter_line_3, longer_line_3]


def _generations(archive: Archive, path: Path) -> list[bytes]:
    file_id = archive.file_id(str(path))
    assert file_id is not None
    return [b"".join(archive.iter_file(file_id, gen)) for gen in archive.generations(file_id)]


def _replace_at_each_call(
    folder: Path,
    archive: Archive,
    repair: Callable[[bytes], bytes],
    first_look: Callable[[Path], object],
    look: Callable[[Path, ReplacedAt], object],
    *,
    undo: bool = False,
) -> int:
    """For each call number in turn: a file archived as FIRST by `first_look`, grown in place to
    GROWN, then replaced by its repaired version before that call of `look` (`undo`: replaced by
    it before the look, and the original put back before that call, as a repair's undo or riffd's
    swap putting another program's file back); check the archive then, and after a look with
    nothing replaced, that it ends at the file as it is, with its time. Return the calls `look`
    makes."""
    repaired = repair(GROWN)
    seam = ReplacedAt()
    at = 1
    while True:
        path = folder / f"session-{at}{'-undo' if undo else ''}.jsonl"
        path.write_bytes(FIRST)
        first_look(path)
        assert _generations(archive, path) == [FIRST]
        with path.open("ab") as appended:  # the session writes on, in place
            appended.write(GROWN[len(FIRST) :])
        replacement = path.with_suffix(".new")
        replacement.write_bytes(repaired)
        if undo:  # the repair is in place, the original waits to be put back
            original = path.with_suffix(".old")
            os.link(path, original)
            replacement.replace(path)
            replacement = original
        seam.aim(at, replacement, path)
        look(path, seam)
        held = _generations(archive, path)
        # every generation a version the file had; the newest the file read whole
        assert set(held) <= {FIRST, GROWN, repaired}, f"replaced before call {at}"
        assert held[-1] in {GROWN, repaired}, f"replaced before call {at}"
        if not seam.replaced:  # every call was made: the replacement comes after the look
            replacement.replace(path)
        look(path, ReplacedAt())
        assert _generations(archive, path)[-1] == path.read_bytes(), f"replaced before call {at}"
        file_id = archive.file_id(str(path))
        assert file_id is not None
        assert archive.restore_time(file_id) == path.stat().st_mtime_ns, f"replaced before {at}"
        if not seam.replaced:
            return at - 1
        at += 1


@pytest.mark.parametrize("undo", [False, True], ids=["replaced", "put-back"])
@pytest.mark.parametrize("repair", REPAIRS)
def test_the_back_fill_archives_a_file_replaced_at_any_call_as_one_version(
    tmp_path: Path, repair: Callable[[bytes], bytes], undo: bool
) -> None:
    archive = Archive(tmp_path / "archive.db")
    folder = tmp_path / "projects" / "-p"
    folder.mkdir(parents=True)
    try:
        calls = _replace_at_each_call(
            folder,
            archive,
            repair,
            lambda path: ingest_file(archive, path),
            lambda path, seam: ingest_file(archive, path, fs=seam),
            undo=undo,
        )
        assert calls >= 4  # the open, the check's reads, the read, the status: each tried
    finally:
        archive.close()


@pytest.mark.parametrize("undo", [False, True], ids=["replaced", "put-back"])
@pytest.mark.parametrize("repair", REPAIRS)
def test_the_worker_reads_a_file_replaced_at_any_call_as_one_version(
    tmp_path: Path, repair: Callable[[bytes], bytes], undo: bool
) -> None:
    project, settings = worker_home(tmp_path, quiet_period=3600)  # no repair: only reading
    assert isinstance(settings, WorkerSettings)
    store = StateStore(tmp_path / "state" / "state.db")
    archive = Archive(tmp_path / "archive.db")
    seams: dict[str, ReplacedAt] = {}

    def look(path: Path, seam: ReplacedAt) -> None:
        seams["now"] = seam
        worker.process(path)
        worker.batches.flush_all()  # the appended lines, archived a few seconds later by the daemon

    class Seam(ReplacedAt):  # the worker's file system: the seam of the look under way
        def _tick(self) -> None:
            if "now" in seams:
                seams["now"]._tick()

    worker = Worker(store, settings, fs=Seam(), archive=archive)
    try:
        calls = _replace_at_each_call(
            project, archive, repair, lambda path: look(path, ReplacedAt()), look, undo=undo
        )
        assert calls >= 4
        # each replacement counted once (two a try when the original is put back), none taken for
        # a read error
        counters = store.counters()
        assert counters.get("errors.read", 0) == 0
        assert counters.get("rescans.changed_files", 0) <= (calls + 1) * (2 if undo else 1)
        # the worker's watermark is the file's as it is (the index read it whole)
        for path in project.glob("session-*.jsonl"):
            state = store.file(str(path))
            assert state is not None
            status = path.stat()
            assert (state.watermark.ino, state.watermark.offset) == (
                status.st_ino,
                status.st_size,
            )
    finally:
        archive.close()
        store.close()


class SwappedForTheReader(FileSystem):
    """In the ingest's reader process only (a forked copy of this seam): renames `other` over
    `target` just before the reader opens it, and puts the original (`original`, a second name of
    it) back just after, before the storing process looks at the file again."""

    def __init__(self, target: Path, other: Path, original: Path) -> None:
        self.target, self.other, self.original = target, other, original
        self.parent = os.getpid()
        self.opened: int | None = None

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        in_reader = os.getpid() != self.parent and Path(path) == self.target
        if in_reader and self.opened is None:
            os.replace(self.other, self.target)
        fd = super().open(path, flags, mode)
        if in_reader and self.opened is None:
            self.opened = fd
            os.replace(self.original, self.target)
        return fd


@pytest.mark.parametrize("repair", REPAIRS)
def test_the_reader_process_stores_no_line_of_a_file_replaced_and_put_back(
    tmp_path: Path, repair: Callable[[bytes], bytes]
) -> None:
    """`riffd archive ingest` judges a file, then its reader process opens it. Here the file is
    replaced just before the reader opens it and put back just after (a repair and its undo, or
    riffd's swap putting another program's file back): both judgements of the storing process are
    made on the original, the reader reads the other file. None of its lines may be stored after
    the original's."""
    folder = tmp_path / "projects" / "-p"
    folder.mkdir(parents=True)
    archive = Archive(tmp_path / "archive.db")
    try:
        target = folder / "target.jsonl"
        target.write_bytes(FIRST)
        assert ingest_file(archive, target) == 10
        with target.open("ab") as appended:
            appended.write(GROWN[len(FIRST) :])
        os.link(target, folder / "target.old")
        (folder / "target.new").write_bytes(repair(GROWN))
        seam = SwappedForTheReader(target, folder / "target.new", folder / "target.old")
        small = folder / "a.jsonl"
        small.write_bytes(transcript_bytes(50, pad=40))
        stored = list(ingest_files(archive, [small, target], min_bytes=0, fs=seam))
        assert [path for path, _added in stored] == [small, target]
        assert not (folder / "target.new").exists()  # the reader did open it, and it was put back
        held = _generations(archive, target)
        assert set(held) <= {FIRST, GROWN}
        assert held[-1] == GROWN == target.read_bytes()
    finally:
        archive.close()


class AfterTheSwap(FileSystem):
    """Runs `act(transcript)` once, just before the `at`th `call` ("stat" or "open" for reading) of
    the transcript after riffd's swap (the swap's own checks, then the look the worker takes at its
    repair)."""

    def __init__(self, call: str, act: Callable[[Path], object], at: int = 1) -> None:
        self.call, self.act, self.at = call, act, at
        self.swapped, self.seen = False, 0

    @property
    def acted(self) -> bool:
        return self.seen >= self.at

    def exchange(self, src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        super().exchange(src, dst)
        self.swapped = True

    def _maybe(self, call: str, path: str | os.PathLike[str]) -> None:
        if self.swapped and call == self.call and Path(path).name == "s.jsonl":
            self.seen += 1
            if self.seen == self.at:
                self.act(Path(path))

    def stat(self, path: str | os.PathLike[str]) -> os.stat_result:
        self._maybe("stat", path)
        return super().stat(path)

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        if flags & ~os.O_NONBLOCK == os.O_RDONLY:  # (transcripts are opened not to wait on a FIFO)
            self._maybe("open", path)
        return super().open(path, flags, mode)


def _damaged_session(project: Path) -> Path:
    path = project / "s.jsonl"
    path.write_bytes(damage.inject_resumed_duplicate(damage.generated_session()).data)
    return path


def test_a_repair_whose_file_is_deleted_at_once_is_reported_done(tmp_path: Path) -> None:
    """The worker looks at its own repair at once; the file deleted in between is forgotten, and
    the repair, which was made (its backup kept), is reported made, not failed."""
    project, settings = worker_home(tmp_path)
    assert isinstance(settings, WorkerSettings)
    store = StateStore(tmp_path / "state" / "state.db")
    path = _damaged_session(project)
    # (the first read after the swap is its own liveness check, of the transcript's last lines; the
    # second is the worker's look)
    seam = AfterTheSwap("open", os.unlink, at=2)
    try:
        outcome = Worker(store, settings, fs=seam).process(path)
        assert seam.acted
        assert outcome.repair == "repaired"
        assert store.file(str(path)) is None  # forgotten: nothing is there
        assert store.counters().get("errors.read", 0) == 0
        assert list((tmp_path / "state" / "backups").rglob("*")) != []
    finally:
        store.close()


def test_another_file_renamed_over_a_repair_at_once_is_read_as_what_it_is(tmp_path: Path) -> None:
    """Another program renames its file over riffd's repaired copy, before each status riffd takes
    of the transcript after its swap in turn: the swap's checks keep that file, and once the repair
    is done, the worker's look reads it whole as a file of its own (counted, archived as a new
    generation), not as riffd's rewrite whose lines were processed before."""
    project, settings = worker_home(tmp_path)
    assert isinstance(settings, WorkerSettings)
    other = transcript_bytes(30, pad=40)

    def rename_over(transcript: Path) -> None:
        replacement = transcript.with_suffix(".other")
        replacement.write_bytes(other)
        replacement.replace(transcript)

    looked_after_repair = False
    at = 1
    while True:
        home = tmp_path / f"try-{at}"
        store = StateStore(home / "state.db")
        archive = Archive(home / "archive.db")
        path = _damaged_session(project)
        seam = AfterTheSwap("stat", rename_over, at)
        try:
            outcome = Worker(store, settings, fs=seam, archive=archive).process(path)
            if not seam.acted:
                break
            assert path.read_bytes() == other, f"status {at}"  # never thrown away
            if outcome.repair == "repaired":  # the repair was done: the look read the other file
                looked_after_repair = True
                assert store.counters().get("rescans.changed_files", 0) == 1, f"status {at}"
                state = store.file(str(path))
                assert state is not None and state.watermark.ino == path.stat().st_ino
                assert state.watermark.offset == len(other)
                assert _generations(archive, path)[-1] == other, f"status {at}"
        finally:
            archive.close()
            store.close()
        at += 1
    assert looked_after_repair


@pytest.mark.parametrize("undo", [False, True], ids=["replaced", "put-back"])
def test_verify_judges_a_file_replaced_at_any_call_as_one_file(tmp_path: Path, undo: bool) -> None:
    """`riffd archive verify` judges the file and compares it line by line: a file replaced (or
    put back) before any of its calls is the archived one or a rewritten one, never a false
    "differs" (exit 1, the archive's fault)."""
    from riffd.archive.verify import verify_file

    archive = Archive(tmp_path / "archive.db")
    repaired = shorter_line_3(GROWN)
    try:
        at = 1
        while True:
            path = tmp_path / f"session-{at}.jsonl"
            path.write_bytes(GROWN)
            ingest_file(archive, path)
            replacement = path.with_suffix(".new")
            replacement.write_bytes(repaired)
            if undo:
                original = path.with_suffix(".old")
                os.link(path, original)
                replacement.replace(path)
                replacement = original
            seam = ReplacedAt(at, replacement, path)
            verdict = verify_file(archive, path, fs=seam)
            assert verdict.outcome in {"whole", "rewritten"}, f"call {at}: {verdict}"
            if not seam.replaced:
                break
            at += 1
        assert at > 3
    finally:
        archive.close()


def test_the_worker_judges_repeated_lines_on_the_file_it_read(tmp_path: Path) -> None:
    """A line written twice byte for byte is a `repeated_line` (Claude Code loads it once); written
    twice with other bytes, a `duplicate_uuid`. The worker compares the two copies after its read:
    a file of the same size renamed over the transcript before any of its calls in turn must not
    lend its bytes to the file read. The findings stored are those of the file whose watermark is
    stored."""
    from riffd.transcript.scan import scan_file

    project, settings = worker_home(tmp_path, quiet_period=3600)
    assert isinstance(settings, WorkerSettings)
    lines = [transcript_line(number, pad=40) for number in range(1, 11)]
    repeated = b"".join([*lines, lines[4]])  # line 5 again, byte for byte
    other = b"".join([*lines, lines[4].replace(b"line 5 x", b"line 5 y")])  # same size
    assert len(other) == len(repeated)
    kept = tmp_path / "versions"
    kept.mkdir()
    at = 1
    while True:
        store = StateStore(tmp_path / f"state-{at}.db")
        path = project / f"session-{at}.jsonl"
        path.write_bytes(repeated)
        os.link(path, kept / f"{at}-repeated.jsonl")
        replacement = path.with_suffix(".new")
        replacement.write_bytes(other)
        os.link(replacement, kept / f"{at}-other.jsonl")
        seam = ReplacedAt(at, replacement, path)
        try:
            Worker(store, settings, fs=seam).process(path)
            state = store.file(str(path))
            assert state is not None
            read = next(
                version
                for version in kept.glob(f"{at}-*.jsonl")
                if version.stat().st_ino == state.watermark.ino
            )
            stored = sorted(str(finding["class"]) for finding in state.findings)
            assert stored == sorted(str(f.cls) for f in scan_file(read).findings), f"call {at}"
        finally:
            store.close()
        if not seam.replaced:
            break
        at += 1
    assert at > 4
