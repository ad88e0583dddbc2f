"""riffd.transcript.parallel_read: a big file indexed with a decoder process gives the index one process
builds, and a decoder that fails or dies costs nothing but the time."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (
    corpus_transcript_params,
    live_children,
    live_processes_mentioning,
    transcript_bytes,
)
from helpers import damage
from helpers.run import riffd_env
from riffd.forking import can_fork
from riffd.fsio import FileSystem, RetryingFS, RetryPolicy
from riffd.transcript.parallel_read import PIPED_MIN_BYTES, index_piped
from riffd.transcript.scan import analyse, index_file, scan_file
from test_records import index_state

pytestmark = pytest.mark.skipif(
    not can_fork(), reason="the decoder process is forked: Linux, one thread"
)

NO_WAIT = RetryPolicy(attempts=2, first_wait=0.0)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One transcript past PIPED_MIN_BYTES and far more than a pipe holds (38 MB), written once for
    the tests that only read it: the suite's temporary folders stay small on a small disk."""
    path = tmp_path_factory.mktemp("piped") / "big.jsonl"
    path.write_bytes(transcript_bytes(max(40_000, int(PIPED_MIN_BYTES / 950) + 1), pad=900))
    assert path.stat().st_size >= PIPED_MIN_BYTES
    return path


def alone(path: Path) -> dict[str, object]:
    return index_state(index_file(path).index)


def piped(path: Path, chunk_size: int, fs: FileSystem | None = None) -> dict[str, object] | None:
    builder = index_piped(
        str(path), fs=RetryingFS(fs or FileSystem(), NO_WAIT), chunk_size=chunk_size
    )
    if builder is None:
        return None
    index = analyse(builder)[0]  # what index_file does after reading: finish, then judge
    return index_state(index)


def damaged_session(tmp_path: Path) -> Path:
    """A generated session with damage of every kind that changes how lines are added (a uuid
    written twice, a parent after its child, a cycle, lines that do not parse, a NUL run), ending in
    a torn line."""
    lines = damage.generated_session(segments=6, turns=3, parallel=2)
    names = [
        "duplicate_uuid",
        "cycle",
        "garbage_line",
        "nul_run",
        "dangling_parent",
        "resumed_duplicate",
        "torn_tail",
    ]
    lines = damage.injected(lines, names, lambda name, points: points[len(points) // 2])
    path = tmp_path / "5e55104e-0000-4000-8000-00000000c0de.jsonl"
    # a BOM: the first batch goes to the reference parse
    path.write_bytes("\ufeff".encode() + b"".join(lines))
    return path


@pytest.mark.parametrize("chunk_size", [300, 4096, 1 << 18])
def test_a_damaged_session_indexes_alike_with_and_without_the_decoder(
    tmp_path: Path, chunk_size: int
) -> None:
    path = damaged_session(tmp_path)
    assert not path.read_bytes().endswith(b"\n")
    assert piped(path, chunk_size) == alone(path)


@pytest.mark.parametrize("path", corpus_transcript_params())
def test_real_transcripts_index_alike_with_and_without_the_decoder(path: Path) -> None:
    assert piped(path, 8192) == alone(path)


class FailsInTheChild(FileSystem):
    """Reads fail with EIO, or kill the reader, in any process but the one that made this (the
    decoder)."""

    def __init__(self, how: str) -> None:
        self.parent = os.getpid()
        self.how = how
        self.reads = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if os.getpid() != self.parent:
            self.reads += 1
            if self.how == "eio":
                raise OSError(errno.EIO, "Input/output error")
            if self.how == "kill" and self.reads == 3:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().pread(fd, size, offset)


@pytest.mark.parametrize("how", ["eio", "kill"])
def test_a_decoder_that_fails_or_dies_leaves_the_work_to_this_process(
    tmp_path: Path, big: Path, how: str
) -> None:
    path = damaged_session(tmp_path)
    assert (
        index_piped(str(path), fs=RetryingFS(FailsInTheChild(how), NO_WAIT), chunk_size=300) is None
    )
    fs = FailsInTheChild(how)
    together = index_file(big, fs=RetryingFS(fs, NO_WAIT), decoder_process=True)
    assert (
        index_state(together.index) == alone(big) and together.findings == index_file(big).findings
    )


def test_a_read_that_fails_everywhere_is_reported_as_without_the_decoder(big: Path) -> None:
    class AlwaysEIO(FileSystem):
        def pread(self, fd: int, size: int, offset: int) -> bytes:
            raise OSError(errno.EIO, "Input/output error")

    with_decoder = scan_file(big, fs=RetryingFS(AlwaysEIO(), NO_WAIT), decoder_process=True)
    without = scan_file(big, fs=RetryingFS(AlwaysEIO(), NO_WAIT))
    assert with_decoder.error is not None and with_decoder.error == without.error


def test_a_decoder_whose_parent_is_killed_exits(big: Path) -> None:
    """SIGKILL the process indexing a big file as soon as its decoder exists: the decoder, left
    writing to a pipe no one reads, exits (its copy of the reading end is closed), and never waits
    forever."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from riffd.transcript.parallel_read import index_piped; "
            "index_piped(sys.argv[1], chunk_size=1 << 18)",
            str(big),
        ],
        env=riffd_env(),
    )
    deadline = time.monotonic() + 30
    while (
        not (children := live_children(parent.pid))
        and parent.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.002)
    assert children, "the decoder never started"
    parent.kill()
    parent.wait()
    assert live_processes_mentioning(str(big)) == []
