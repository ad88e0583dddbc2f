"""Where a transcript's last lines say they were written: their `cwd` and `sessionId`.

The liveness check (riffd.claude_code.liveness) asks the session registry for the session a
transcript's lines name, and takes their working folder as the transcript's project, because neither
the file's name nor its folder's name always says so (a 2.0 subagent's `agent-*.jsonl`; a folder named
after a symlinked path, or by CLAUDE_CODE_PROJECT_DIR_NAME).

Claude Code writes each line's `cwd` and `sessionId` near its start, before its `message`, so they
are looked for in the first HEAD_BYTES of each of the last LAST_LINES lines (up to MORE_LINES while
none names a folder), the first of each key in a line (a tool's input may hold a `cwd` of its own
further on). The starts come from the last TAIL_BYTES of the file; a last line longer than that (a
pasted image) is followed back to its start, up to START_LIMIT bytes. A key is matched as written,
quotes and colon, with any spaces around the colon: inside a text, a key's quotes are escaped, so it
never matches there. It is read through the `fs` seam, as the rest of the liveness check.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from riffd.fsio import REAL_FILES, RetryingFS

TAIL_BYTES = 256 * 1024  # where the last lines' starts are looked for
LAST_LINES = 8
MORE_LINES = 64  # lines looked at, at most, while the last ones name no folder
HEAD_BYTES = 16 * 1024  # of each line, where its own keys are
START_LIMIT = 64 * 1024 * 1024  # how far back the start of one long last line is followed
STEP = 64 * 1024  # read back by so much at a time
KEYS = (b"cwd", b"sessionId")
_VALUE = re.compile(rb'\s*:\s*("(?:[^"\\]|\\.)*")')


@dataclass(frozen=True)
class WrittenIn:
    """What a transcript's last lines say of where they were written: their `cwd` and `sessionId`
    values (empty when they name none)."""

    cwds: frozenset[str]
    session_ids: frozenset[str]


def written_in(path: Path, fs: RetryingFS = REAL_FILES) -> WrittenIn | None:
    """The `cwd` and `sessionId` values of the last LAST_LINES lines of the transcript `path`; None
    when it cannot be read, is not a regular file (`RetryingFS.open_file`: never waited on), or its
    last line starts further back than START_LIMIT (the caller then fails closed)."""
    try:
        descriptor = fs.open_file(path)
    except OSError:
        return None
    try:
        return _read(fs, descriptor, fs.fstat(descriptor).st_size)
    except OSError:
        return None
    finally:
        with contextlib.suppress(OSError):
            fs.close(descriptor)


def _read(fs: RetryingFS, descriptor: int, size: int) -> WrittenIn | None:
    window = max(0, size - TAIL_BYTES)
    tail = fs.pread(descriptor, size - window, window)
    # the lines starting in the window (not one after the final newline: no line yet)
    starts = [window + at + 1 for at in _newlines(tail) if window + at + 1 < size]
    if window == 0 and size:
        starts.insert(0, 0)
    if window > 0 and not starts:
        # one last line longer than the window: followed back to its start
        start = _line_start(fs, descriptor, window)
        if start is None:
            return None
        starts.insert(0, start)
    found: dict[bytes, set[str]] = {key: set() for key in KEYS}
    # the last LAST_LINES lines, and further back in the window while none named a folder (a
    # summary or a snapshot line names none)
    for seen, start in enumerate(reversed(starts)):
        if seen >= LAST_LINES and (found[b"cwd"] or seen >= MORE_LINES):
            break
        _take(fs, descriptor, tail, window, start, found)
    if not found[b"cwd"] and window > 0 and starts[0] > window:
        # none named one: the line the window starts inside of, when it starts within reach (a
        # long line before a last one that names no folder)
        start = _line_start(fs, descriptor, window)
        if start is not None:
            _take(fs, descriptor, tail, window, start, found)
    return WrittenIn(frozenset(found[b"cwd"]), frozenset(found[b"sessionId"]))


def _take(
    fs: RetryingFS,
    descriptor: int,
    tail: bytes,
    window: int,
    start: int,
    found: dict[bytes, set[str]],
) -> None:
    """Add to `found` the first value of each key in the line starting at `start`."""
    head = (
        tail[start - window : start - window + HEAD_BYTES]
        if start >= window
        else fs.pread(descriptor, HEAD_BYTES, start)
    )
    head = head.split(b"\n", 1)[0]
    for key, values in found.items():
        value = _first_value(head, key)
        if value:
            values.add(value)


def _newlines(data: bytes) -> list[int]:
    found, at = [], data.find(b"\n")
    while at >= 0:
        found.append(at)
        at = data.find(b"\n", at + 1)
    return found


def _line_start(fs: RetryingFS, descriptor: int, position: int) -> int | None:
    """The offset where the line holding byte `position` starts, or None beyond START_LIMIT."""
    end = position
    while end > 0:
        if position - end > START_LIMIT:
            return None
        begin = max(0, end - STEP)
        at = fs.pread(descriptor, end - begin, begin).rfind(b"\n")
        if at >= 0:
            return begin + at + 1
        end = begin
    return 0


def _first_value(head: bytes, key: bytes) -> str | None:
    """The string value of the first `"key":` in `head` (a line's start), or None."""
    marker = b'"' + key + b'"'
    at = head.find(marker)
    while at >= 0:
        value = _VALUE.match(head, at + len(marker))
        if value is not None:
            try:
                text = json.loads(value.group(1))
            except ValueError:
                return None
            return text if isinstance(text, str) and text else None
        at = head.find(marker, at + 1)
    return None
