"""The typed results the MCP tools return (FastMCP derives each tool's output schema from them): in
a module of their own, with no import of riffd's tools, so the server can describe its tools before
it loads them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SearchResult:
    """One place the words occur: in which session, when, said by whom, a snippet, and how to go
    back to it."""

    session_id: str | None
    project: str | None
    title: str | None
    time: str | None
    role: str | None
    snippet: str
    path: str
    line: int
    transcript_exists: bool
    go_back: str | None


@dataclass(frozen=True)
class SessionSummary:
    """One session as list_sessions gives it."""

    session_id: str
    title: str | None
    project: str | None
    last_activity: str | None
    size_bytes: int | None
    health: str
    archived: bool
    deleted: bool
    path: str
    go_back: str | None


@dataclass(frozen=True)
class Page:
    """A slice of a session's text: where it starts, the text, where the next starts (None: this
    is the last), the whole text's length, and whether it was read from the archive."""

    session_id: str
    start: int
    text: str
    next_start: int | None
    total_chars: int
    from_archive: bool


@dataclass(frozen=True)
class FindingReport:
    """One finding: its class, lines, what it is, the API error it causes on resume (None: it
    causes none), and what riffd does about it."""

    finding: str
    lines: list[int]
    message: str
    api_error: str | None
    riffd_repairs: bool
    when: str


@dataclass(frozen=True)
class Health:
    """A session's health: ok or not, its findings, the command that repairs what riffd repairs,
    and notes (live, deleted, not a transcript)."""

    session_id: str
    path: str
    ok: bool
    findings: list[FindingReport]
    repair_now: str | None
    notes: list[str]


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: the files it wrote (none: all was there), whether every file of the
    session is there now, its notes, and the command that resumes the session."""

    session_id: str
    written: list[str]
    complete: bool
    summary: str
    notes: list[str]
    resume: str | None
