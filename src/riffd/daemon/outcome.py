"""What the worker is set to do (`WorkerSettings`, from the configuration) and what it says it did
with one file (`Outcome`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from riffd.claude_code.liveness import look_again_after
from riffd.fsio import DEFAULT_RETRY, RetryPolicy
from riffd.transcript.findings import DEFAULT_REPAIRS, FindingClass


@dataclass(frozen=True)
class WorkerSettings:
    """What the worker needs from the configuration."""

    repair: bool = True  # False: report only
    quiet_period: float = 120.0
    add_missing_results: bool = True
    classes: frozenset[FindingClass] = DEFAULT_REPAIRS
    backup_dir: Path = Path()
    claude_dir: Path = Path()
    roots: tuple[Path, ...] = ()
    retry: RetryPolicy = DEFAULT_RETRY
    archive_delay: float = 0.0  # seconds appended lines wait to go to the archive together

    @property
    def look_again_after(self) -> float:
        """Seconds after which a session live now may have become idle."""
        return look_again_after(self.quiet_period)


@dataclass
class Outcome:
    """What processing one file did: `kind` is unchanged / appended / rebuilt (the same file read
    again to rebuild its index) / read (a new or rewritten file) / gone / skipped; `lines` counts
    lines processed for the first time."""

    path: str
    kind: str
    lines: int = 0
    bytes: int = 0
    findings: int = 0
    seconds: float = 0.0
    repair: str | None = None  # repaired / skipped:<reason> / failed:<reason>
    retry_after: float | None = None  # process again after this many seconds (a repair is waiting)
    why: str = ""
    # the file's findings by class after this processing
    classes: dict[str, int] = field(default_factory=dict)
    session_id: str | None = None
    fixed: dict[str, int] = field(default_factory=dict)  # what a repair fixed, by class
    backup_id: str | None = None
