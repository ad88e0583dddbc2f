"""Where a transcript's last lines say they were written (riffd.claude_code.written), read as the
liveness check reads it: real files, a FIFO, a sparse file."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from riffd.claude_code.written import START_LIMIT, TAIL_BYTES, WrittenIn, written_in


def _line(cwd: str, session: str, text: str = "hello", *, spaced: bool = False) -> bytes:
    record = {"parentUuid": None, "cwd": cwd, "sessionId": session, "type": "user"}
    record["message"] = {"role": "user", "content": text}
    separators = (", ", ": ") if spaced else (",", ":")
    return (json.dumps(record, separators=separators) + "\n").encode()


def _written(tmp_path: Path, data: bytes) -> WrittenIn | None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    return written_in(path)


def test_the_last_lines_cwd_and_session_are_read(tmp_path: Path) -> None:
    data = _line("/old/proj", "s-old") * 20 + _line("/work/proj", "s-new")
    assert _written(tmp_path, data) == WrittenIn(
        frozenset({"/old/proj", "/work/proj"}), frozenset({"s-old", "s-new"})
    )
    assert _written(tmp_path, b"") == WrittenIn(frozenset(), frozenset())


def test_a_last_line_longer_than_the_tail_is_followed_to_its_start(tmp_path: Path) -> None:
    """A pasted image makes one line of hundreds of KiB, its keys at its start: an attack found
    the keys outside the tail, and the live session repaired."""
    huge = _line("/work/proj", "s-big", "x" * (3 * TAIL_BYTES))
    found = _written(tmp_path, _line("/old", "s-old") + huge)
    assert found is not None and "/work/proj" in found.cwds and "s-big" in found.session_ids
    # a short last line after it, that names no folder: the long one before it is read too
    summary = b'{"type":"summary","summary":"done"}\n'
    found = _written(tmp_path, huge + summary)
    assert found is not None and found.cwds == {"/work/proj"} and found.session_ids == {"s-big"}


def test_spaces_around_the_colon_and_nested_keys(tmp_path: Path) -> None:
    """JSON written by another tool (`"cwd": "..."`), and a tool input with `cwd` keys of its own
    after the line's: the line's own are taken."""
    assert _written(tmp_path, _line("/work/proj", "s", spaced=True)) == WrittenIn(
        frozenset({"/work/proj"}), frozenset({"s"})
    )
    nested = json.dumps([{"cwd": f"/tool/{n}", "sessionId": f"t{n}"} for n in range(12)])
    found = _written(tmp_path, _line("/work/proj", "s", nested))
    assert found == WrittenIn(frozenset({"/work/proj"}), frozenset({"s"}))


def test_a_key_quoted_inside_a_text_is_not_taken(tmp_path: Path) -> None:
    text = 'run with {"cwd":"/evil","sessionId":"evil"} please'
    record = {"type": "user", "message": {"role": "user", "content": text}}
    assert _written(tmp_path, (json.dumps(record) + "\n").encode()) == WrittenIn(
        frozenset(), frozenset()
    )


def test_a_fifo_is_not_waited_on_and_a_line_too_long_to_follow_fails_closed(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "f.jsonl"
    os.mkfifo(fifo)
    answers: list[object] = []
    reader = threading.Thread(target=lambda: answers.append(written_in(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    assert answers == [None]  # (a blocking open would never have answered)
    sparse = tmp_path / "sparse.jsonl"
    with sparse.open("wb") as out:
        out.write(_line("/work/proj", "s"))
        out.truncate(START_LIMIT + 4 * TAIL_BYTES)  # one line of zeros, far longer than followed
    assert written_in(sparse) is None
    assert written_in(tmp_path / "gone.jsonl") is None


def test_a_long_line_before_the_last_ones_is_not_followed_back(tmp_path: Path) -> None:
    """A line longer than START_LIMIT before short last lines that name their folder: the review
    found the whole file taken as unreadable (None: live while any client runs) and, below the
    limit, the long line read back at every check (13 ms for 63 MB)."""
    path = tmp_path / "s.jsonl"
    with path.open("wb") as out:
        out.write(_line("/first", "s0"))
        out.seek(START_LIMIT + TAIL_BYTES)  # a line of zeros, past the limit
        out.write(b"\n" + _line("/a", "s1") + _line("/b", "s1"))
    started = time.monotonic()
    assert written_in(path) == WrittenIn(frozenset({"/a", "/b"}), frozenset({"s1"}))
    assert time.monotonic() - started < 1.0
    # lines that name no folder after the last one that does (snapshots, summaries): looked past
    snapshot = b'{"type":"file-history-snapshot","messageId":"m"}\n'
    found = _written(tmp_path, _line("/work/proj", "s") + snapshot * 20)
    assert found == WrittenIn(frozenset({"/work/proj"}), frozenset({"s"}))
