"""The streaming reader: exact offsets, lenient parsing, EIO retried and nothing else."""

from __future__ import annotations

import errno
import hashlib
import logging
import random
from pathlib import Path

import pytest

from conftest import CORPUS_DIR, requires_corpus
from riffd.fsio import FileSystem, ReadFailed, RetryingFS, RetryPolicy
from riffd.transcript.reader import Unparsed, iter_lines, parse_line, read_span, split_glued
from riffd.transcript.scan import index_file, scan_file

FAST_RETRY = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.004)


class FlakyFS(FileSystem):
    """Fails a share of read calls with EIO, like a OneDrive placeholder under WSL2.

    Each fault is transient: a read fails at most `max_in_a_row` times in a row at one place, which
    is what a retry budget is for; a fault that never clears is BrokenFS's job.
    """

    def __init__(self, rate: float, seed: int = 7, max_in_a_row: int = 2) -> None:
        self.rate = rate
        self.random = random.Random(seed)
        self.max_in_a_row = max_in_a_row
        self.failures = 0
        self.in_a_row: dict[tuple[int, int], int] = {}

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        place = (fd, offset)
        if self.random.random() < self.rate and self.in_a_row.get(place, 0) < self.max_in_a_row:
            self.in_a_row[place] = self.in_a_row.get(place, 0) + 1
            self.failures += 1
            raise OSError(errno.EIO, "Input/output error")
        self.in_a_row.pop(place, None)
        return super().pread(fd, size, offset)


class BrokenFS(FileSystem):
    """Every read fails with the given errno."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.calls = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.calls += 1
        raise OSError(self.code, "injected")


def test_offsets_and_numbers_are_exact_across_chunk_boundaries(tmp_path: Path) -> None:
    lines = [b'{"n":%d,"pad":"%s"}' % (n, b"x" * (n * 37 % 300)) for n in range(500)]
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    content = path.read_bytes()
    seen = list(iter_lines(path, chunk_size=97))
    assert [number for number, *_ in seen] == list(range(1, 501))
    for (_number, offset, raw, terminated), expected in zip(seen, lines, strict=True):
        assert raw == expected
        assert terminated
        assert content[offset : offset + len(raw)] == raw
        assert content[offset + len(raw)] == ord("\n")


def test_last_line_without_newline_is_reported_unterminated(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2')
    seen = list(iter_lines(path, chunk_size=4))
    assert seen == [(1, 0, b'{"a":1}', True), (2, 8, b'{"a":2', False)]


def test_bom_stays_in_the_bytes_and_is_skipped_by_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"type":"user"}\n')
    ((_, offset, raw, _),) = list(iter_lines(path))
    assert offset == 0 and raw.startswith(b"\xef\xbb\xbf")
    assert parse_line(raw) == {"type": "user"}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"", None),
        (b"   \r", None),
        (b'{"a":1}\r', {"a": 1}),
    ],
)
def test_parse_line_accepts_what_claude_code_writes(raw: bytes, expected: object) -> None:
    assert parse_line(raw) == expected


@pytest.mark.parametrize("raw", [b'{"big":123456789012345678901234567890}', b'{"s":"\\ud800"}'])
def test_valid_json_that_orjson_refuses_or_rounds_is_not_malformed(raw: bytes) -> None:
    assert isinstance(parse_line(raw), dict)


@pytest.mark.parametrize(
    "raw", [b"\x00\x00\x00\x00", b'{"a":1', b"[1,2]", b"garbage", b'\x00{"a":1}']
)
def test_parse_line_marks_damage_unparsed(raw: bytes) -> None:
    assert isinstance(parse_line(raw), Unparsed)


@requires_corpus
@pytest.mark.parametrize("seed", range(5))
def test_eio_on_30_percent_of_reads_gives_the_clean_result(seed: int) -> None:
    flaky = FlakyFS(0.3, seed=seed)
    for path in sorted(CORPUS_DIR.rglob("*.jsonl")):
        clean = list(iter_lines(path, chunk_size=16384))
        digest = hashlib.sha256()
        noisy = list(
            iter_lines(path, chunk_size=16384, fs=RetryingFS(flaky, FAST_RETRY), hasher=digest)
        )
        assert noisy == clean
        assert digest.hexdigest() == hashlib.sha256(path.read_bytes()).hexdigest()
    assert flaky.failures > 30  # the fault really was injected, many times


@requires_corpus
def test_eio_on_30_percent_of_reads_gives_the_same_findings(tmp_path: Path) -> None:
    path = (
        CORPUS_DIR / "d-kimuson-claude-code-viewer" / "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
    )
    damaged = tmp_path / "d.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    damaged.write_bytes(b"".join([*lines[:40], b"not json at all\n", *lines[40:]]))
    clean = index_file(damaged)
    noisy = index_file(damaged, fs=RetryingFS(FlakyFS(0.3, seed=3), FAST_RETRY))
    assert [f.to_json() for f in noisy.findings] == [f.to_json() for f in clean.findings]
    assert [f.cls for f in clean.findings] == ["malformed_line"]


def test_persistent_eio_fails_after_three_tries_with_advice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n')
    broken = BrokenFS(errno.EIO)
    with caplog.at_level(logging.WARNING, logger="riffd.fsio"), pytest.raises(ReadFailed) as raised:
        list(iter_lines(path, fs=RetryingFS(broken, FAST_RETRY)))
    assert broken.calls == 3
    message = str(raised.value)
    assert (
        str(path) in message and "3 attempts" in message and "always keep on this device" in message
    )
    warnings = [record for record in caplog.records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "always keep on this device" in warnings[0].getMessage()


def test_scan_turns_persistent_eio_into_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n')
    report = scan_file(path, fs=RetryingFS(BrokenFS(errno.EIO), FAST_RETRY))
    assert report.error is not None and str(path) in report.error and "errno 5" in report.error


@pytest.mark.parametrize("code", [errno.ENOENT, errno.EACCES])
def test_other_errors_are_not_retried(tmp_path: Path, code: int) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"a":1}\n')
    broken = BrokenFS(code)
    with pytest.raises(OSError) as raised:
        list(iter_lines(path, fs=RetryingFS(broken, FAST_RETRY)))
    assert broken.calls == 1
    assert raised.value.errno == code and not isinstance(raised.value, ReadFailed)


def test_read_span_returns_exact_bytes_and_retries(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"0123456789" * 100)
    assert read_span(
        path,
        95,
        10,
        fs=RetryingFS(FlakyFS(0.5, seed=1), RetryPolicy(attempts=10, first_wait=0.001)),
    ) == (b"5678901234")
    with pytest.raises(OSError, match="file ended"):
        read_span(path, 995, 10)


RECORD = b'{"parentUuid":"p","type":"user","uuid":"u","sessionId":"s","message":{"role":"user","content":"hi"}}'


@pytest.mark.parametrize(
    "torn",
    [
        b'{"parentUuid":"p","type":"assistant","message":{"content":[{"type":"te',
        b"\x00" * 32,
        b'{"parentUuid":"p","message":{"content":"a \\" quote and a { brace',
        b"caf\xe9 \xff",
    ],
)
def test_a_record_glued_after_a_torn_one_is_found_where_it_starts(torn: bytes) -> None:
    assert split_glued(torn + RECORD) == len(torn)
    assert split_glued(RECORD) is None  # a whole record alone is no glued line


def test_a_torn_record_that_ends_after_a_content_block_is_not_split() -> None:
    """The last `{...}` of a record cut right after one of its content blocks is that block, with
    a string `type`: splitting there would cut the record down to a block."""
    torn = b'{"parentUuid":"p","type":"assistant","message":{"content":[{"type":"text","text":"hi"}'
    assert split_glued(torn) is None
    assert parse_line(torn).glued_at is None  # type: ignore[union-attr]


def test_bytes_that_are_not_utf8_read_as_u_fffd_as_claude_code_reads_them() -> None:
    assert parse_line(b'{"type":"user","text":"caf\xe9 \xff\xfe \xe2\x82"}') == {
        "type": "user",
        "text": "caf\ufffd \ufffd\ufffd \ufffd",
    }
