"""Files kept whole many to a transaction (`WholeFiles.store_together`, as `riffd archive ingest`
stores them after reading each outside any transaction): a file that fails among others takes back
only its own rows, reading holds no lock, a kill -9 takes back only the files of the transaction it
met, each whole or not at all. Real files, a real SQLite archive watched from a second connection,
riffd's I/O seam for reads that fail, change or stall, a real kill -9."""

from __future__ import annotations

import errno
import os
import sqlite3
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from helpers.run import kill_9_once_marked
from helpers.sessiontree import build_session
from riffd.archive.store import Archive
from riffd.archive.wholefiles import Kept, Looked
from riffd.claude_code.session_files import SessionFile, classify
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS


def _outputs(claude: Path, count: int) -> list[Path]:
    """`count` saved tool outputs of one session, each of other bytes, settled (an old time)."""
    tree = build_session(claude)
    folder = tree.folder / "tool-results"
    folder.mkdir(exist_ok=True)
    paths = []
    for number in range(count):
        path = folder / f"{number:09d}.txt"
        path.write_bytes(b"".join(b"output %d line %d\n" % (number, at) for at in range(300)))
        os.utime(path, ns=(1, time.time_ns() - 10**10))
        paths.append(path)
    return paths


def _found(claude: Path, path: Path) -> SessionFile:
    found = classify(path, [claude / "projects"], [claude])
    assert found is not None, path
    return found


def _looked(archive: Archive, claude: Path, path: Path, fs: FileSystem = REAL_FILES) -> Looked:
    looked = archive.whole.look(_found(claude, path), fs=RetryingFS.of(fs))
    assert isinstance(looked, Looked), looked
    return looked


def _rows(archive_path: Path) -> dict[str, int]:
    """What another process sees committed."""
    with sqlite3.connect(archive_path) as db:
        return {
            table: int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
            for table in ("blobs", "blob_chunks", "session_files")
        }


def _read_back(archive: Archive, paths: list[Path]) -> dict[Path, bytes]:
    wanted = set(paths)
    found = {}
    for session in archive.versions.sessions_with_files():
        for version in archive.versions.session_versions(session):
            if version.path in wanted:
                found[version.path] = b"".join(archive.versions.content(version))
    return found


def test_files_stored_together_are_committed_as_one_and_read_back_the_same(
    tmp_path: Path,
) -> None:
    claude = tmp_path / "claude"
    paths = _outputs(claude, 125)
    paths, later = paths[:120], paths[120:]
    archive_path = tmp_path / "archive.db"
    archive = Archive(archive_path)
    looked = [_looked(archive, claude, path) for path in paths]
    assert _rows(archive_path)["session_files"] == 0  # looking stores nothing
    kept = archive.whole.store_together(looked)
    assert [item.outcome for item in kept if isinstance(item, Kept)] == ["stored"] * 120
    assert _rows(archive_path) == {"blobs": 120, "blob_chunks": 120, "session_files": 120}
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths}
    # looked at again, the archive holds them as they are
    again_looked = [archive.whole.look(_found(claude, path)) for path in paths]
    assert [getattr(item, "outcome", None) for item in again_looked] == ["unchanged"] * 120
    # stored by another process between the look and the store: nothing is added
    looked = [_looked(archive, claude, path) for path in later]
    other = Archive(archive_path)
    assert {other.whole.keep(_found(claude, path)).outcome for path in later} == {"stored"}
    other.close()
    again = archive.whole.store_together(looked)
    assert [getattr(item, "outcome", None) for item in again] == ["unchanged"] * 5
    assert _rows(archive_path) == {"blobs": 125, "blob_chunks": 125, "session_files": 125}
    archive.close()


class FailsOnce(FileSystem):
    """The `at`-th read of `path` (counted from when `armed`) fails (EIO, not tried again) or finds
    the file grown (a writer the settle time did not see)."""

    def __init__(self, path: Path, at: int, how: str) -> None:
        self.path, self.at, self.how, self.reads = path, at, how, 0
        self.fd: int | None = None
        self.armed = False

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.fd = fd if Path(path) == self.path else self.fd
        return fd

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if fd == self.fd and self.armed:
            self.reads += 1
            if self.reads == self.at and self.how == "eio":
                raise OSError(errno.EIO, "Input/output error")
            if self.reads == self.at:
                with open(self.path, "ab") as out:
                    out.write(b"more\n")
        return super().pread(fd, size, offset)


@pytest.mark.parametrize(
    "how", ["changed since looked at", "grows while stored", "eio while stored"]
)
def test_a_file_that_fails_among_others_takes_back_only_its_own_rows(
    tmp_path: Path, how: str
) -> None:
    """The second of three files changed since it was looked at, or changes or cannot be read while
    it is stored (after some of its frames are written in the transaction): only its rows are taken
    back; the files before and after it are committed whole, and it is stored whole once it reads
    as it is."""
    claude = tmp_path / "claude"
    paths = _outputs(claude, 3)
    paths[1].write_bytes(os.urandom(5 << 20))  # five 1 MiB frames
    os.utime(paths[1], ns=(1, time.time_ns() - 10**10))
    archive_path = tmp_path / "archive.db"
    archive = Archive(archive_path)
    failing = FailsOnce(paths[1], 3, how.split()[0])  # its third frame, two written
    looked = [_looked(archive, claude, path, failing) for path in paths]
    if how == "changed since looked at":
        with open(paths[1], "ab") as out:
            out.write(b"more\n")
    failing.armed = True
    kept = archive.whole.store_together(looked, fs=failing)
    described = [
        errno.errorcode[item.errno or 0] if isinstance(item, OSError) else item.outcome
        for item in kept
    ]
    assert described == ["stored", "EIO" if how.startswith("eio") else "changing", "stored"]
    assert _rows(archive_path) == {"blobs": 2, "blob_chunks": 2, "session_files": 2}
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths[::2]}
    os.utime(paths[1], ns=(1, time.time_ns() - 10**10))
    assert archive.whole.keep(_found(claude, paths[1])).outcome == "stored"
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths}
    archive.close()


def test_reading_a_file_holds_no_lock_another_process_could_wait_for(tmp_path: Path) -> None:
    """A read that stalls (a cloud folder fetching the file) while files are looked at for the next
    transaction: another process takes the archive's write lock at once meanwhile."""
    claude = tmp_path / "claude"
    paths = _outputs(claude, 3)
    archive_path = tmp_path / "archive.db"
    archive = Archive(archive_path)
    archive.whole.store_together([_looked(archive, claude, path) for path in paths[:2]])
    reading, go_on = threading.Event(), threading.Event()

    class Stalls(FileSystem):
        def pread(self, fd: int, size: int, offset: int) -> bytes:
            reading.set()
            assert go_on.wait(30)
            return super().pread(fd, size, offset)

    looked: list[object] = []
    looker = threading.Thread(
        target=lambda: looked.append(archive.whole.look(_found(claude, paths[2]), fs=Stalls()))
    )
    looker.start()
    try:
        assert reading.wait(30)
        other = sqlite3.connect(archive_path, timeout=0, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # raises "database is locked" if the look held it
        other.execute("COMMIT")
        other.close()
    finally:
        go_on.set()
        looker.join()
    assert isinstance(looked[0], Looked)
    archive.close()


KEEP_AND_STALL = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from riffd.archive.store import Archive
    from riffd.claude_code.session_files import classify
    from riffd.fsio import FileSystem
    claude, marker, db = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    stall, paths = int(sys.argv[4]), [Path(path) for path in sys.argv[5:]]
    class Stall(FileSystem):
        reads = 0
        def pread(self, fd, size, offset):
            Stall.reads += 1
            if Stall.reads == stall:
                marker.write_text("storing")
                time.sleep(60)
            return super().pread(fd, size, offset)
    archive = Archive(db)
    for start in range(0, len(paths), 100):  # as `riffd archive ingest` does
        found = [classify(path, [claude / "projects"], [claude]) for path in paths[start:start + 100]]
        archive.whole.store_together([archive.whole.look(item) for item in found], fs=Stall())
""")


@pytest.mark.slow
@pytest.mark.parametrize("file", [101, 130, 150])  # the first, a middle, the last of the second
def test_kill_9_while_files_are_stored_together_takes_back_that_transaction_whole(
    tmp_path: Path, file: int
) -> None:
    """Killed while it stores the second hundred files, the transaction takes back all of them and
    nothing of the first hundred; keeping them again stores every file byte for byte."""
    claude = tmp_path / "claude"
    paths = _outputs(claude, 150)
    marker, archive_path = tmp_path / "marker", tmp_path / "archive.db"
    Archive(archive_path).close()
    kill_9_once_marked(
        KEEP_AND_STALL,
        claude,
        marker,
        archive_path,
        str(file),  # (the store's reads only: one per file)
        *paths,
        marker=marker,
    )
    assert _rows(archive_path) == {"blobs": 100, "blob_chunks": 100, "session_files": 100}
    archive = Archive(archive_path)
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths[:100]}
    outcomes = [archive.whole.keep(_found(claude, path)).outcome for path in paths]
    assert outcomes == ["unchanged"] * 100 + ["stored"] * 50
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths}
    archive.close()


class ChangesAfterItIsRead(FileSystem):
    """Once the file at `path` has been read whole (hashed), it is deleted, replaced by a rename
    (an atomic write) or replaced by a symlink, before the store: while `keep` waits for the
    archive's write lock, or while an ingest looks at the next files of its hundred."""

    def __init__(self, path: Path, how: str) -> None:
        self.path, self.how, self.done = path, how, False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        chunk = super().pread(fd, size, offset)
        if not self.done and offset + len(chunk) >= self.path.stat().st_size:
            self.done = True
            self.path.unlink()
            if self.how == "replaced by a rename":
                self.path.with_name("staging").write_bytes(b"the next version\n")
                os.replace(self.path.with_name("staging"), self.path)
            elif self.how == "replaced by a symlink":
                self.path.symlink_to(self.path.with_name("elsewhere"))
        return chunk


@pytest.mark.parametrize("how", ["deleted", "replaced by a rename", "replaced by a symlink"])
@pytest.mark.parametrize("way", ["keep", "store_together"])
def test_the_bytes_read_are_stored_when_the_file_goes_before_the_store(
    tmp_path: Path, how: str, way: str
) -> None:
    """A file read and hashed, then deleted or replaced before its store (the daemon's `keep`
    waiting for the lock, an ingest reading the next files): the version read is archived, from the
    descriptor that read it, as d1d73cc's `keep` did; the next look takes the new file."""
    claude = tmp_path / "claude"
    (path,) = _outputs(claude, 1)
    read = path.read_bytes()
    archive = Archive(tmp_path / "archive.db")
    fs = RetryingFS(ChangesAfterItIsRead(path, how))
    if way == "keep":
        kept = archive.whole.keep(_found(claude, path), fs=fs)
    else:
        (kept,) = archive.whole.store_together([_looked(archive, claude, path, fs)], fs=fs)
    assert isinstance(kept, Kept) and kept.outcome == "stored", kept
    assert _read_back(archive, [path]) == {path: read}
    archive.close()


def test_the_progress_line_counts_only_files_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each time the ingest's progress line (on a terminal) says N files, another connection finds
    at least the new ones among them committed."""
    from riffd.commands.archive_ingest import keep_whole_files

    claude = tmp_path / "claude"
    paths = _outputs(claude, 250)
    archive_path = tmp_path / "archive.db"
    archive = Archive(archive_path)
    said: list[tuple[int, int]] = []  # (files the line counted, rows committed then)

    class Terminal:
        def isatty(self) -> bool:
            return True

        def write(self, text: str) -> int:
            if "files kept whole" in text:
                said.append((int(text.split()[1]), _rows(archive_path)["session_files"]))
            return len(text)

        def flush(self) -> None:
            pass

    monkeypatch.setattr(sys, "stderr", Terminal())
    errors: list[str] = []
    kept = keep_whole_files(archive, [_found(claude, path) for path in paths], errors)
    monkeypatch.undo()
    assert (kept.looked, kept.held, kept.added, errors) == (250, 250, 250, [])
    assert [counted for counted, _committed in said] == [100, 200]
    assert all(committed >= counted for counted, committed in said), said
    archive.close()
