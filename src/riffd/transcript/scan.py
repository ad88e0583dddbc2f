"""Scanning: read a transcript once, index it, and report its findings."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from riffd.forking import can_fork
from riffd.fsio import DEFAULT_RETRY, REAL_FS, FileSystem, RetryPolicy
from riffd.transcript.detect import LoadedConversation, detect, loaded_conversation, suggestions
from riffd.transcript.findings import Finding, has_latest_turn_calls, pending_while_live
from riffd.transcript.incremental import IncrementalDetection
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.parallel_read import PIPED_MIN_BYTES, index_piped
from riffd.transcript.reader import iter_chunks, iter_raw, parse_line, read_span
from riffd.transcript.shape import NOT_A_TRANSCRIPT, transcript_doubt

log = logging.getLogger(__name__)


@dataclass
class FileReport:
    """What a scan found in one file (or the error that stopped it)."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    suggestions: list[str] = field(default_factory=list)
    error: str | None = None
    not_a_transcript: str = (
        ""  # why the file is not recognised as a Claude Code transcript (riffd never edits it)
    )

    def to_json(self) -> dict[str, Any]:
        """Return the report as a JSON-ready dict."""
        out: dict[str, Any] = {
            "path": self.path,
            "findings": [finding.to_json() for finding in self.findings],
            "metrics": self.metrics,
            "suggestions": self.suggestions,
        }
        if self.error is not None:
            out["error"] = self.error
        if self.not_a_transcript:
            out["not_a_transcript"] = self.not_a_transcript
        return out


@dataclass
class ScannedFile:
    """A finished index with its loaded conversation, findings and (when asked for) its identity."""

    index: TranscriptIndex
    loaded: LoadedConversation
    findings: list[Finding]
    identity: FileIdentity | None


# Bytes read per batch of lines when indexing a file. A batch's lines and decoded records live until
# it is indexed; 256 KiB keeps them in the CPU cache and leaves less of the heap behind them than 1
# MiB does (on the 1 GB file of bench/scan_bench.py: about 6 MB less peak memory, and a little
# faster).
INDEX_CHUNK = 1 << 18


def index_file(
    path: str | os.PathLike[str],
    *,
    fs: FileSystem = REAL_FS,
    retry: RetryPolicy = DEFAULT_RETRY,
    with_identity: bool = False,
    decoder_process: bool = False,
) -> ScannedFile:
    """Read `path` once and return its index, loaded conversation and findings.

    With `with_identity`, also hash the bytes read and stat the file, so a repair can later prove
    the file is still what was scanned. With `decoder_process`, a big file is read and decoded by a
    second process while this one indexes it (riffd.transcript.parallel_read; the same index). Raise OSError
    (ReadFailed for persistent EIO) on read errors.
    """
    name = os.fspath(path)
    hasher = _sha256() if with_identity else None
    before = fs.stat(name) if with_identity else None
    index = None
    if (
        decoder_process
        and not with_identity
        and can_fork()
        and fs.stat(name).st_size >= PIPED_MIN_BYTES
    ):
        index = index_piped(name, fs=fs, retry=retry, chunk_size=INDEX_CHUNK)
        if index is None:
            log.info("%s: the decoder process failed; reading it again in this process", name)
        else:
            log.debug("%s: read and decoded by a second process while this one indexed it", name)
    if index is None:
        index = TranscriptIndex(name)
        for offset, lines, terminated in iter_chunks(
            name, fs=fs, retry=retry, hasher=hasher, chunk_size=INDEX_CHUNK
        ):
            index.add_lines(offset, lines, terminated)
    size = index.end
    loaded, findings = analyse(index, fs=fs, retry=retry)
    identity = None
    if before is not None and hasher is not None:
        identity = FileIdentity(
            name, before.st_dev, before.st_ino, size, before.st_mtime_ns, hasher.hexdigest()
        )
    return ScannedFile(index, loaded, findings, identity)


def analyse(
    index: TranscriptIndex, *, fs: FileSystem = REAL_FS, retry: RetryPolicy = DEFAULT_RETRY
) -> tuple[LoadedConversation, list[Finding]]:
    """Given an index fed with every line read so far, return its loaded conversation and findings.

    A subagent file's parents that live in its session file are looked up there first (that read is
    I/O, so this is not pure; everything after it is).
    """
    _finish(index, None, fs=fs, retry=retry)
    loaded = loaded_conversation(index)
    return loaded, detect(index, loaded)


def analyse_appended(
    index: TranscriptIndex, *, fs: FileSystem = REAL_FS, retry: RetryPolicy = DEFAULT_RETRY
) -> list[Finding]:
    """Like `analyse`, for an index the daemon keeps and feeds each append: return its findings at
    the cost of the lines added since the last call (`riffd.transcript.incremental`), not of the
    whole file."""
    detector: IncrementalDetection | None = index.incremental
    if detector is None:
        search = ExternalSearch()
        _finish(index, search, fs=fs, retry=retry)
        detector = index.incremental = IncrementalDetection(index)
        detector.external = search
    else:
        _finish(index, detector.external, fs=fs, retry=retry)
    return detector.findings()


def _finish(
    index: TranscriptIndex, search: ExternalSearch | None, *, fs: FileSystem, retry: RetryPolicy
) -> None:
    """Finish the index and look up its dangling parents in its session file. With `search` (kept
    between appends), a parent already looked for is looked for again only in the bytes the session
    file gained since."""
    index.finish()
    wanted = set(index.dangling.values())
    if not wanted:
        return
    session_file = parent_session_file(Path(index.path), index.session_id)
    if session_file is None:
        return
    if search is None:
        index.resolve_external(find_uuids(session_file, wanted, fs=fs, retry=retry)[0])
        return
    # Invariant: every uuid in search.looked_for is absent from the session file's bytes [0,
    # searched_to).
    status = session_file.stat()
    size = status.st_size
    head = read_span(session_file, 0, min(size, HEAD_BYTES), fs=fs, retry=retry) if size else b""
    identity = (status.st_dev, status.st_ino, _sha256(head).digest())
    if size < search.searched_to or identity != search.identity:
        search.looked_for.clear()  # another file, or rewritten: look again from the start
        search.searched_to = 0
        search.identity = identity
    again = wanted & search.looked_for
    new = wanted - search.looked_for
    found: set[str] = set()
    reached = [search.searched_to] if again else []
    if again and size > search.searched_to:
        more, reached[0] = find_uuids(
            session_file, again, fs=fs, retry=retry, start=search.searched_to
        )
        found |= more
    if new:
        more, end = find_uuids(session_file, new, fs=fs, retry=retry)
        found |= more
        reached.append(end)
    search.looked_for = wanted - found
    search.searched_to = min(reached) if reached else 0
    index.resolve_external(found)


def _sha256(data: bytes = b"") -> Any:
    """hashlib.sha256, imported when first needed: a plain `riffd scan` never hashes, and OpenSSL
    adds about 2 MB to its peak memory (the 1 GB goal of bench/scan_bench.py)."""
    import hashlib

    return hashlib.sha256(data)


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
    fs: FileSystem = REAL_FS,
    retry: RetryPolicy = DEFAULT_RETRY,
    start: int = 0,
) -> tuple[set[str], int]:
    """Return which of the `wanted` uuids are the `uuid` of some line of `path` from byte `start` (a
    line's start), and the offset just after the last whole line read (where a later search of what
    was appended starts).

    One regular-expression pass over the raw bytes finds the few lines that mention a wanted uuid;
    only those are parsed, so this costs about a read of the file.
    """
    if not wanted:
        return set(), start
    needle = re.compile(b"|".join(re.escape(orjson.dumps(uuid)) for uuid in sorted(wanted)))
    found: set[str] = set()

    def check(buffer: bytes, end: int) -> None:
        for match in needle.finditer(buffer, 0, end):
            line_start = buffer.rfind(b"\n", 0, match.start()) + 1
            line_end = buffer.find(b"\n", match.end(), end)
            obj = parse_line(buffer[line_start : end if line_end < 0 else line_end])
            if isinstance(obj, dict) and obj.get("uuid") in wanted:
                found.add(obj["uuid"])

    carry = b""
    offset = start
    for chunk in iter_raw(path, fs=fs, retry=retry, start=start):
        buffer = carry + chunk if carry else chunk
        complete = (
            buffer.rfind(b"\n") + 1
        )  # search whole lines only; the rest waits for its newline
        check(buffer, complete)
        offset += complete
        carry = buffer[complete:]
    if carry:
        check(carry, len(carry))
    return found, offset


def scan_file(
    path: Path,
    *,
    fs: FileSystem = REAL_FS,
    retry: RetryPolicy = DEFAULT_RETRY,
    backup_dir: str = "",
    is_live: Callable[[Path, str | None], bool] | None = None,
    decoder_process: bool = False,
) -> FileReport:
    """Scan one transcript and return its report; read errors become the report's `error`, not
    exceptions. `is_live(path, session_id)` says whether its session is live: unanswered tool calls
    of its latest turn are then pending, not missing (without it, they are missing).
    `decoder_process`: see index_file."""
    try:
        scanned = index_file(path, fs=fs, retry=retry, decoder_process=decoder_process)
    except OSError as exc:
        return FileReport(str(path), error=_describe_error(path, exc))
    index = scanned.index
    findings = scanned.findings
    if is_live is not None and has_latest_turn_calls(findings):
        findings = pending_while_live(findings, is_live(path, index.session_id))
    try:  # findings in a file riffd will not edit are labelled so (a read of a few lines)
        doubt = (
            transcript_doubt(
                index, lambda line: read_span(path, *index.span(line), fs=fs, retry=retry), path
            )
            if (findings)
            else ""
        )
    except OSError as exc:
        return FileReport(str(path), error=_describe_error(path, exc))
    advice = (
        suggestions(str(path), findings, index.metrics, backup_dir)
        if not doubt
        else [f"riffd does not edit this file: it is {NOT_A_TRANSCRIPT} ({doubt})"]
    )
    return FileReport(str(path), findings, index.metrics.to_json(), advice, not_a_transcript=doubt)


def _describe_error(path: Path, exc: OSError) -> str:
    if exc.filename is None and str(path) in str(exc):
        return str(exc)
    return f"{path}: {exc.strerror or exc}"


HEAD_BYTES = 4096  # how much of a session file tells a rewrite from an append


@dataclass
class ExternalSearch:
    """What was looked for in a subagent's session file, and how far: kept between appends."""

    looked_for: set[str] = field(default_factory=set)
    searched_to: int = 0
    identity: tuple[int, int, bytes] | None = (
        None  # device, inode and a hash of the first HEAD_BYTES searched
    )


@dataclass(frozen=True)
class FileIdentity:
    """What the file was when it was scanned; riffd.repair.writer refuses to write if it is no
    longer so."""

    path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int
    sha256: str  # of bytes [0, size)
