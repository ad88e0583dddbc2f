"""The health report as typed values: what `build` makes and every renderer reads.

A `HealthReport` holds the verdict and its problems, the daemon's state, the watcher and the queue,
the files and their findings (`attention` lists each with the command that deals with it), the
repairs, the backups, I/O, latency, throughput, the tool-call tracker, the archive, the databases
and the recent errors. `HistoryPoint` and `RecentRepair` are what latest.html draws beside it. The
JSON form (schema 1) is `riffd.reports.json`'s alone to write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from riffd.display import display_path

# What became of a finding that needs attention: riffd repairs it when the session is idle, it
# tried and it was not safe, it never edits this class, or the user accepted it as it is.
AttentionState = Literal["waiting_for_repair", "not_repaired", "never_repaired", "acknowledged"]


@dataclass(frozen=True)
class Reload:
    """The daemon's last configuration reload: when, whether it took, and what was wrong."""

    time: float
    ok: bool
    errors: tuple[str, ...]


@dataclass(frozen=True)
class DaemonState:
    """The daemon as the report sees it: running, starting, stopping or blocked, and its figures'
    age."""

    running: bool
    starting: bool
    blocked: str | None  # what keeps a running daemon from working, said as a problem
    stopping: bool
    last_seen: datetime | None  # when it last stored its figures (local time)
    figures_age_seconds: float | None
    repair_mode: str | None
    version: str
    pid: int | None
    uptime_seconds: float | None
    config_path: str | None
    last_reload: Reload | None


@dataclass(frozen=True)
class WatcherFigures:
    """The roots watched, the observer watching them (and why that one), events and rescans."""

    roots: tuple[str, ...]
    observer: str | None
    observer_reason: str | None
    # the roots not there as folders when the report was made (missing: watched once they appear)
    missing_roots: tuple[str, ...]
    events: int
    rescans: int


@dataclass(frozen=True)
class QueueFigures:
    """Files waiting to be looked at, and files looked at since the daemon started."""

    depth: int
    processed: int


@dataclass(frozen=True)
class FileCounts:
    """Transcripts watched, those with open findings, those repaired, and those repaired since riffd
    last read them (being read again: their findings from before the repair are not counted)."""

    watched: int
    with_findings: int
    repaired: int
    rechecking: int = 0


@dataclass(frozen=True)
class AttentionItem:
    """One finding that needs attention (or was acknowledged): where, what, and what deals with
    it."""

    path: str
    finding_class: str
    lines: tuple[int, ...]
    message: str
    repairable: bool
    state: AttentionState
    action: str  # the advice, its commands in `backquotes`


@dataclass(frozen=True)
class PendingCall:
    """A tool call of a live session still waiting for its result (not damage yet)."""

    path: str
    tool_id: str | None
    line: int


@dataclass(frozen=True)
class FindingCounts:
    """Findings by class: open, acknowledged, informational, repaired; and the pending tool
    calls."""

    open: Mapping[str, int]
    acknowledged: Mapping[str, int]
    informational: Mapping[str, int]
    repaired: Mapping[str, int]
    pending: tuple[PendingCall, ...]


@dataclass(frozen=True)
class RepairCounts:
    """Repairs done, and those skipped or failed by reason, since the state store began."""

    done: int
    skipped: Mapping[str, int]
    failed: Mapping[str, int]


@dataclass(frozen=True)
class BackupFigures:
    """The verified backups kept: how many, their size, and the oldest one's time."""

    count: int
    total_bytes: int
    oldest: datetime | None


@dataclass(frozen=True)
class IoFigures:
    """Reads retried and given up after I/O errors, and read errors met."""

    retries: int
    give_ups: int
    read_errors: int


@dataclass(frozen=True)
class Latency:
    """From a change on disk to riffd done with it (seconds, recent samples)."""

    p50: float | None
    p95: float | None
    maximum: float | None
    samples: int


@dataclass(frozen=True)
class Throughput:
    """Lines and bytes read since the state store began, and per second of the daemon's uptime."""

    lines: int
    bytes_read: int
    lines_per_second: float | None
    bytes_per_second: float | None


@dataclass(frozen=True)
class TopSession:
    """A session among those with the most redundant tool calls."""

    session: str
    redundant: int
    bytes_wasted: int


@dataclass(frozen=True)
class TrackerFigures:
    """The tool-call tracker's figures since the daemon started (zeros when it does not run)."""

    calls_seen: int
    redundant: int
    by_tool: Mapping[str, int]
    top_sessions: tuple[TopSession, ...]
    bytes_wasted: int


@dataclass(frozen=True)
class ArchiveFigures:
    """The archive's size, what it holds and what it lags behind, and the transcripts Claude Code's
    cleanup deletes soon that it does not hold whole (each None when the daemon did not say)."""

    stored_bytes: int | None
    raw_bytes: int | None
    ratio: float | None
    sessions: int | None
    files_behind: int | None
    bytes_behind: int | None
    cleanup_days: float | None
    cleanup_at_risk: tuple[str, ...] | None
    cleanup_at_risk_count: int | None
    as_of: datetime | None = None  # when the daemon gathered these figures (local time)
    age_seconds: float | None = None  # how old they are at the report's moment
    # every version of the files kept whole (None from a daemon that did not count them)
    whole_bytes: int | None = None


@dataclass(frozen=True)
class DatabaseFiles:
    """A database's path and the damaged copies of it moved aside, oldest first."""

    path: str
    moved_aside: tuple[str, ...]


@dataclass(frozen=True)
class Databases:
    """The state database and the archive."""

    state: DatabaseFiles
    archive: DatabaseFiles


@dataclass(frozen=True)
class ErrorRecord:
    """An error the daemon met (in the last hour), with what to do about it."""

    time: float
    message: str
    suggestion: str
    about: str | None  # what it was about (a file), so that going well there takes it back


@dataclass(frozen=True)
class HealthReport:
    """What the daemon has seen and done, and what needs attention; healthy when no problem is
    named, once the daemon has looked at the files it found at start."""

    generated_at: datetime  # UTC, whole seconds
    problems: tuple[str, ...]
    daemon: DaemonState
    watcher: WatcherFigures
    queue: QueueFigures
    files: FileCounts
    # open first, then acknowledged; the first ATTENTION_LISTED
    attention: tuple[AttentionItem, ...]
    attention_total: int
    findings: FindingCounts
    repairs: RepairCounts
    backups: BackupFigures
    io: IoFigures
    latency: Latency
    throughput: Throughput
    tracker: TrackerFigures
    archive: ArchiveFigures
    databases: Databases
    errors: tuple[ErrorRecord, ...]
    # the words the commands its renderers advise start with (riffd.display.riffd_invocation: the
    # configuration it was made with); not in the JSON
    riffd: str = "riffd"

    @property
    def healthy(self) -> bool | None:
        """True when the report names no problem; None (no verdict yet) while the daemon is still
        looking at the files it found at start and no problem is named; False when one is."""
        if self.problems:
            return False
        return None if self.daemon.running and self.daemon.starting else True


@dataclass(frozen=True)
class HistoryPoint:
    """One hour's figures that latest.html charts (None where a point kept earlier lacks one)."""

    hour: int  # hours since the epoch
    open: Mapping[str, float]
    repairs: float | None
    archive_stored: float | None
    archive_raw: float | None
    latency_p50: float | None
    latency_p95: float | None
    at: float | None = None  # when its report was made (None: a point an earlier riffd kept)


@dataclass(frozen=True)
class RecentRepair:
    """One repair attempt as latest.html lists it."""

    time: float
    path: str
    outcome: str
    reason: str | None
    backup_id: str | None
    fixes: Mapping[str, int]
    detail: str | None


STARTING_WORDS = "starting: no verdict until the files found at start are looked at"


def verdict_words(report: HealthReport) -> str:
    """The verdict as every renderer words it: healthy, needs attention, or starting (no verdict
    yet)."""
    healthy = report.healthy
    return "healthy" if healthy else STARTING_WORDS if healthy is None else "needs attention"


def iso_seconds(moment: datetime | None) -> str | None:
    """Return `moment` as every renderer writes a time (ISO 8601 to the second), or None."""
    return None if moment is None else moment.isoformat(timespec="seconds")


Shown = TypeVar("Shown")


def displayed_values(value: Shown) -> Shown:
    """Return `value` (a report, a part of one, or a sequence of them) with every string in it, keys
    too, as display_path shows it: a path that is not UTF-8 written with its bytes as `\\xNN`."""
    return cast(Shown, _displayed(value))


def _displayed(value: Any) -> Any:
    if isinstance(value, str):
        return display_path(value)
    if is_dataclass(value) and not isinstance(value, type):
        changed = {field.name: _displayed(getattr(value, field.name)) for field in fields(value)}
        return replace(value, **changed)
    if isinstance(value, Mapping):
        return {_displayed(key): _displayed(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return type(value)(_displayed(item) for item in value)
    return value
