"""Scanning: read a transcript once, index it, and report its findings."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riffd.forking import can_fork
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS
from riffd.transcript.detect import detect, suggestions
from riffd.transcript.external import finish_index
from riffd.transcript.findings import Finding, has_latest_turn_calls, pending_while_live
from riffd.transcript.index import TranscriptIndex
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.loaded import LoadedConversation, loaded_conversation
from riffd.transcript.parallel_read import PIPED_MIN_BYTES, index_piped
from riffd.transcript.reader import iter_chunks, read_span, retrying
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
    # why the file is not recognised as a Claude Code transcript (riffd never edits it)
    not_a_transcript: str = ""

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
    fs: FileSystem = REAL_FILES,
    with_identity: bool = False,
    decoder_process: bool = False,
) -> ScannedFile:
    """Read `path` once and return its index, loaded conversation and findings.

    With `with_identity`, also hash the bytes read and stat the file, so a repair can later prove
    the file is still what was scanned. With `decoder_process`, a big file is read and decoded by a
    second process while this one indexes it (riffd.transcript.parallel_read; the same index).
    Reads retry EIO per `fs`'s policy (see riffd.transcript.reader.retrying). Raise
    OSError (ReadFailed for persistent EIO) on read errors.
    """
    fs = retrying(fs)
    name = os.fspath(path)
    hasher = _sha256() if with_identity else None
    before = fs.stat(name) if with_identity else None
    builder = None
    if (
        decoder_process
        and not with_identity
        and can_fork()
        and fs.stat(name).st_size >= PIPED_MIN_BYTES
    ):
        builder = index_piped(name, fs=fs, chunk_size=INDEX_CHUNK)
        if builder is None:
            log.info("%s: the decoder process failed; reading it again in this process", name)
        else:
            log.debug("%s: read and decoded by a second process while this one indexed it", name)
    if builder is None:
        builder = IndexBuilder(name)
        for offset, lines, terminated in iter_chunks(
            name, fs=fs, hasher=hasher, chunk_size=INDEX_CHUNK
        ):
            builder.add_lines(offset, lines, terminated)
    index, loaded, findings = analyse(builder, fs=fs)
    identity = None
    if before is not None and hasher is not None:
        identity = FileIdentity(
            name, before.st_dev, before.st_ino, index.end, before.st_mtime_ns, hasher.hexdigest()
        )
    return ScannedFile(index, loaded, findings, identity)


def analyse(
    builder: IndexBuilder, *, fs: RetryingFS = REAL_FILES
) -> tuple[TranscriptIndex, LoadedConversation, list[Finding]]:
    """Given a builder fed with every line read so far, return its finished index, loaded
    conversation and findings.

    A subagent file's parents that live in its session file are looked up there first (that read is
    I/O, so this is not pure; everything after it is).
    """
    index = finish_index(builder, fs=fs)
    loaded = loaded_conversation(index)
    return index, loaded, detect(index, loaded)


def _sha256(data: bytes = b"") -> Any:
    """hashlib.sha256, imported when first needed: a plain `riffd scan` never hashes, and OpenSSL
    adds about 2 MB to its peak memory (the 1 GB goal of bench/scan_bench.py)."""
    import hashlib

    return hashlib.sha256(data)


def scan_file(
    path: Path,
    *,
    fs: FileSystem = REAL_FILES,
    backup_dir: str = "",
    is_live: Callable[[Path, str | None], bool] | None = None,
    decoder_process: bool = False,
    riffd: str = "riffd",
) -> FileReport:
    """Scan one transcript and return its report; read errors become the report's `error`, not
    exceptions. `is_live(path, session_id)` says whether its session is live: unanswered tool calls
    of its latest turn are then pending, not missing (without it, they are missing).
    `decoder_process` and `fs`: see index_file; `riffd`: the words the commands its suggestions
    advise start with (riffd.display.riffd_invocation)."""
    fs = retrying(fs)
    try:
        scanned = index_file(path, fs=fs, decoder_process=decoder_process)
    except OSError as exc:
        return FileReport(str(path), error=_describe_error(path, exc))
    index = scanned.index
    findings = scanned.findings
    if is_live is not None and has_latest_turn_calls(findings):
        findings = pending_while_live(findings, is_live(path, index.session_id))
    try:  # findings in a file riffd will not edit are labelled so (a read of a few lines)
        doubt = (
            transcript_doubt(index, lambda line: read_span(path, *index.span(line), fs=fs), path)
            if (findings)
            else ""
        )
    except OSError as exc:
        return FileReport(str(path), error=_describe_error(path, exc))
    advice = (
        suggestions(str(path), findings, index.metrics, backup_dir, riffd)
        if not doubt
        else [f"riffd does not edit this file: it is {NOT_A_TRANSCRIPT} ({doubt})"]
    )
    return FileReport(str(path), findings, index.metrics.to_json(), advice, not_a_transcript=doubt)


def _describe_error(path: Path, exc: OSError) -> str:
    if exc.filename is None and str(path) in str(exc):
        return str(exc)
    return f"{path}: {exc.strerror or exc}"


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
