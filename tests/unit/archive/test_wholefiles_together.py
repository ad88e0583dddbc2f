"""Files kept whole many to a transaction (`WholeFiles.together`, as `riffd archive ingest` keeps
them): committed every hundred files, a file that fails taking back only its own rows, a kill -9
taking back only the files since the last commit, each whole or not at all. Real files, a real
SQLite archive watched from a second connection, riffd's I/O seam for reads that fail or change,
a real kill -9."""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from helpers.run import riffd_env
from helpers.sessiontree import build_session
from riffd.archive.store import Archive
from riffd.archive.wholefiles import TOGETHER_FILES
from riffd.claude_code.session_files import SessionFile, classify
from riffd.fsio import FileSystem


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
    for session in archive.whole.sessions_with_files():
        for version in archive.whole.session_versions(session):
            if version.path in wanted:
                found[version.path] = b"".join(archive.whole.content(version))
    return found


def test_files_kept_together_are_committed_every_hundred_and_at_the_end(tmp_path: Path) -> None:
    claude = tmp_path / "claude"
    paths = _outputs(claude, 250)
    archive_path = tmp_path / "archive.db"
    archive = Archive(archive_path)
    seen = []
    with archive.whole.together() as group:
        for path in paths:
            kept = archive.whole.keep(_found(claude, path))
            assert kept.outcome == "stored"
            group.wrote(kept.read_bytes)
            seen.append(_rows(archive_path)["session_files"])
    assert seen == [TOGETHER_FILES * (number // TOGETHER_FILES) for number in range(1, 251)]
    assert _rows(archive_path) == {"blobs": 250, "blob_chunks": 250, "session_files": 250}
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths}
    # kept again together, the archive holds them as they are: nothing added
    with archive.whole.together() as group:
        for path in paths:
            kept = archive.whole.keep(_found(claude, path))
            assert kept.outcome == "unchanged"
            group.wrote(kept.read_bytes)
    assert _rows(archive_path) == {"blobs": 250, "blob_chunks": 250, "session_files": 250}
    archive.close()


class FailsOnce(FileSystem):
    """The `at`-th read of `path` fails (EIO, not tried again) or finds the file grown (a writer
    the settle time did not see)."""

    def __init__(self, path: Path, at: int, how: str) -> None:
        self.path, self.at, self.how, self.reads = path, at, how, 0
        self.fd: int | None = None

    def open(self, path: str | os.PathLike[str], flags: int, mode: int = 0o777) -> int:
        fd = super().open(path, flags, mode)
        if Path(path) == self.path:
            self.fd = fd
        return fd

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if fd == self.fd:
            self.reads += 1
            if self.reads == self.at and self.how == "eio":
                raise OSError(errno.EIO, "Input/output error")
            if self.reads == self.at:
                with open(self.path, "ab") as out:
                    out.write(b"more\n")
        return super().pread(fd, size, offset)


# its five 1 MiB chunks are reads 1-5 while it is hashed, 6-10 while it is stored
@pytest.mark.parametrize(
    ("at", "how"), [(1, "grows"), (8, "grows"), (8, "eio")], ids=["hashing", "storing", "eio"]
)
def test_a_file_that_fails_among_others_takes_back_only_its_own_rows(
    tmp_path: Path, at: int, how: str
) -> None:
    """The second of three files changes, or cannot be read, while it is stored (after the frames of
    some of it are written in the group's transaction): only its rows are taken back; the files
    before and after it are committed whole, and it is stored whole once it reads as it is."""
    claude = tmp_path / "claude"
    paths = _outputs(claude, 3)
    # (three frames: reads while it is stored write some before the one that fails)
    paths[1].write_bytes(os.urandom(5 << 20))
    os.utime(paths[1], ns=(1, time.time_ns() - 10**10))
    archive_path = tmp_path / "archive.db"
    archive = Archive(archive_path)
    failing = FailsOnce(paths[1], at, how)
    outcomes = []
    with archive.whole.together() as group:
        for path in paths:
            try:
                kept = archive.whole.keep(_found(claude, path), fs=failing)
            except OSError as exc:
                outcomes.append(errno.errorcode[exc.errno or 0])
                continue
            outcomes.append(kept.outcome)
            group.wrote(kept.read_bytes)
    assert outcomes == ["stored", "EIO" if how == "eio" else "changing", "stored"]
    assert _rows(archive_path) == {"blobs": 2, "blob_chunks": 2, "session_files": 2}
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths[::2]}
    os.utime(paths[1], ns=(1, time.time_ns() - 10**10))
    assert archive.whole.keep(_found(claude, paths[1])).outcome == "stored"
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths}
    archive.close()


KEEP_AND_STALL = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from riffd.archive.store import Archive
    from riffd.claude_code.session_files import classify
    from riffd.fsio import FileSystem
    claude, marker, db = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    paths, stall = [Path(path) for path in sys.argv[5:]], int(sys.argv[4])
    class Stall(FileSystem):
        reads = 0
        def pread(self, fd, size, offset):
            Stall.reads += 1
            if Stall.reads == stall:
                marker.write_text("storing")
                time.sleep(60)
            return super().pread(fd, size, offset)
    archive = Archive(db)
    with archive.whole.together() as group:
        for path in paths:
            found = classify(path, [claude / "projects"], [claude])
            group.wrote(archive.whole.keep(found, fs=Stall()).read_bytes)
""")


@pytest.mark.slow
@pytest.mark.parametrize("read", [2 * 130 - 1, 2 * 130])  # file 130 hashed; being stored
def test_kill_9_among_files_kept_together_loses_only_the_uncommitted_each_whole(
    tmp_path: Path, read: int
) -> None:
    """Killed part way through its second hundred files, the ingest's transaction of files takes
    back all of them and nothing of the first hundred; keeping them again stores every file
    byte for byte."""
    claude = tmp_path / "claude"
    paths = _outputs(claude, 150)
    marker, archive_path = tmp_path / "marker", tmp_path / "archive.db"
    Archive(archive_path).close()
    writer = subprocess.Popen(
        [sys.executable, "-c", KEEP_AND_STALL, str(claude), str(marker), str(archive_path)]
        + [str(read)]
        + [str(path) for path in paths],
        env=riffd_env(),
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and writer.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), "the keeping never got there"
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert _rows(archive_path) == {"blobs": 100, "blob_chunks": 100, "session_files": 100}
    archive = Archive(archive_path)
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths[:100]}
    with archive.whole.together() as group:
        outcomes = [archive.whole.keep(_found(claude, path)).outcome for path in paths]
        group.wrote(0)
    assert outcomes == ["unchanged"] * 100 + ["stored"] * 50
    assert _read_back(archive, paths) == {path: path.read_bytes() for path in paths}
    archive.close()
