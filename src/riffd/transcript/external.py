"""Parents in another file: a subagent transcript's lines that hang from lines of its session.
(And the other read that finishing an index needs: the lines that repeat a uuid, compared with
the first copy by `compare_repeats`.)

Subagent transcripts, compaction agents above all, start from lines of their parent session: a
parent uuid missing from the agent file is looked up in the session file before it is called
dangling. `finish_index` finishes an index so; with an `ExternalSearch` kept between appends, a
parent already looked for is looked for again only in the bytes the session file gained since.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from riffd.fsio import REAL_FILES, RetryingFS
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.reader import iter_raw, parse_line, read_span

HEAD_BYTES = 4096  # how much of a session file tells a rewrite from an append
FIND_EACH = 3  # find_uuids looks for each of at most this many uuids on its own


def compare_repeats(
    index: TranscriptIndex, *, fs: RetryingFS = REAL_FILES, fd: int | None = None
) -> None:
    """Read the lines that repeat a uuid (the pairs not compared yet) and note in the index those
    whose bytes equal the first copy's: a line written again, which Claude Code loads once. Read
    from `fd` when given (the file the index was read from, open still)."""
    pairs = index.duplicate_uuid_lines
    for first, repeat in pairs[index.compared_repeats :]:
        try:
            copies = [
                read_span(index.path, *index.span(line), fs=fs, fd=fd) for line in (first, repeat)
            ]
        except FileNotFoundError:
            return  # the file is gone (or was never on disk): nothing to compare

        if copies[0].rstrip(b"\r\n") == copies[1].rstrip(b"\r\n"):
            index.repeated_lines.add(repeat)
    index.compared_repeats = len(pairs)


@dataclass
class ExternalSearch:
    """What was looked for in a subagent's session file, and how far: kept between appends."""

    looked_for: set[str] = field(default_factory=set)
    searched_to: int = 0
    # device, inode and a hash of the first HEAD_BYTES searched
    identity: tuple[int, int, bytes] | None = None


def finish_index(
    builder: IndexBuilder,
    search: ExternalSearch | None = None,
    *,
    fs: RetryingFS = REAL_FILES,
    fd: int | None = None,
) -> TranscriptIndex:
    """Finish the builder's index, look up its dangling parents in its session file, and return it.
    With `search` (kept between appends), a parent already looked for is looked for again only in
    the bytes the session file gained since. `fd`: the index's file, open still (see
    `compare_repeats`)."""
    index = builder.finish()
    compare_repeats(index, fs=fs, fd=fd)
    wanted = set(index.dangling.values())
    if not wanted:
        return index
    session_file = parent_session_file(Path(index.path), index.session_id)
    if session_file is None:
        return index
    if search is None:
        builder.resolve_external(find_uuids(session_file, wanted, fs=fs)[0])
        return index
    # Invariant: every uuid in search.looked_for is absent from the session file's bytes [0,
    # searched_to).
    status = session_file.stat()
    size = status.st_size
    head = read_span(session_file, 0, min(size, HEAD_BYTES), fs=fs) if size else b""
    identity = (status.st_dev, status.st_ino, _sha256(head))
    if size < search.searched_to or identity != search.identity:
        search.looked_for.clear()  # another file, or rewritten: look again from the start
        search.searched_to = 0
        search.identity = identity
    again = wanted & search.looked_for
    new = wanted - search.looked_for
    found: set[str] = set()
    reached = [search.searched_to] if again else []
    if again and size > search.searched_to:
        more, reached[0] = find_uuids(session_file, again, fs=fs, start=search.searched_to)
        found |= more
    if new:
        more, end = find_uuids(session_file, new, fs=fs)
        found |= more
        reached.append(end)
    search.looked_for = wanted - found
    search.searched_to = min(reached) if reached else 0
    builder.resolve_external(found)
    return index


def _sha256(data: bytes) -> bytes:
    """The SHA-256 digest of `data` (hashlib imported when first needed: see riffd.transcript.scan
    for why)."""
    import hashlib

    return hashlib.sha256(data).digest()


def parent_session_file(path: Path, session_id: str | None) -> Path | None:
    """Given a subagent transcript, return its parent session's transcript if it exists, else None.

    Layouts: `<project>/<session>/subagents/agent-<id>.jsonl` (2.1.x) and
    `<project>/agent-<id>.jsonl` (2.0.x, which names its session only in its lines' `sessionId`).
    """
    if not path.name.startswith("agent-"):
        return None
    if path.parent.name == "subagents":
        candidate = path.parent.parent.parent / f"{path.parent.parent.name}.jsonl"
    elif session_id:
        candidate = path.parent / f"{session_id}.jsonl"
    else:
        return None
    return candidate if candidate.is_file() else None


def find_uuids(
    path: Path,
    wanted: set[str],
    *,
    fs: RetryingFS = REAL_FILES,
    start: int = 0,
) -> tuple[set[str], int]:
    """Return which of the `wanted` uuids are the `uuid` of some line of `path` from byte `start` (a
    line's start), and the offset just after the last whole line read (where a later search of what
    was appended starts).

    A pass over the raw bytes finds the few lines that mention a wanted uuid; only those are
    parsed, so this costs about a read of the file. The pass looks for each uuid with `bytes.find`
    (0.24 s a GB on this project's 2-core machine, where one regular expression takes 0.86) while
    there are at most FIND_EACH of them, else with one regular expression for them all.
    """
    if not wanted:
        return set(), start
    quoted = [orjson.dumps(uuid) for uuid in sorted(wanted)]
    needle = re.compile(b"|".join(map(re.escape, quoted)))
    found: set[str] = set()

    def mentions(buffer: bytes, end: int) -> Iterator[tuple[int, int]]:
        """(start, end) of each mention of a wanted uuid in buffer[:end]."""
        if len(quoted) > FIND_EACH:
            for match in needle.finditer(buffer, 0, end):
                yield match.span()
            return
        for each in quoted:
            at = buffer.find(each, 0, end)
            while at >= 0:
                yield at, at + len(each)
                at = buffer.find(each, at + len(each), end)

    def check(buffer: bytes, end: int) -> None:
        for mention_start, mention_end in mentions(buffer, end):
            line_start = buffer.rfind(b"\n", 0, mention_start) + 1
            line_end = buffer.find(b"\n", mention_end, end)
            obj = parse_line(buffer[line_start : end if line_end < 0 else line_end])
            if isinstance(obj, dict) and obj.get("uuid") in wanted:
                found.add(obj["uuid"])

    carry = b""
    offset = start
    for chunk in iter_raw(path, fs=fs, start=start):
        buffer = carry + chunk if carry else chunk
        # search whole lines only; the rest waits for its newline
        complete = buffer.rfind(b"\n") + 1
        check(buffer, complete)
        offset += complete
        carry = buffer[complete:]
    if carry:
        check(carry, len(carry))
    return found, offset
