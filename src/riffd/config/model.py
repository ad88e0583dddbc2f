"""The configuration's dataclasses: every key, its default (written here and nowhere else), its
meaning and its bounds; a folder whose default is derived at load time says how it is derived."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from riffd import paths
from riffd.claude_code import folders
from riffd.fsio import RetryPolicy
from riffd.transcript.findings import (
    DEFAULT_REPAIRS,
    OPT_IN_REPAIRS,
    REPAIRABLE,
    FindingClass,
)

CONFIG_ENV = "RIFFD_CONFIG"
STATE_DIR_ENV = "RIFFD_STATE_DIR"
CONFIG_FILE_NAME = "config.toml"


Observer = Literal["auto", "native", "polling"]
RepairMode = Literal["repair", "report-only"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["plain", "json"]

# The longest a setting of seconds may be: past them, the scheduler's and datetime's arithmetic
# overflows (a rescan interval of 1e14 s stopped the daemon) or a wait never ends.
HOUR = 3600.0
YEAR = 365 * 86400.0

# Given the environment and the resolved state_dir, return a derived default.
Derive = Callable[[dict[str, str], Path], object]


def _meta(
    doc: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    choices: frozenset[Any] | None = None,
    derive: Derive | None = None,
    command: bool = False,
) -> dict[str, Any]:
    """Return a config key's field metadata: its meaning (shown in the example file), its bounds,
    for a folder whose default ("" or []) is computed at load time the function that computes it,
    and whether the string is a command line (split into words as a shell does, so it must
    split)."""
    return {
        "doc": doc,
        "gt": gt,
        "ge": ge,
        "le": le,
        "choices": choices,
        "derive": derive,
        "command": command,
    }


class ConfigError(Exception):
    """The configuration cannot be used; `.errors` holds every problem found, one line each."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True, kw_only=True)
class WatcherConfig:
    """How riffd notices changed transcripts."""

    observer: Observer = field(
        default="auto",
        metadata=_meta(
            "How to watch for changes: native file-system events, polling, or auto (native where it works, polling "
            "where events are unreliable, e.g. WSL2 drvfs and network folders)."
        ),
    )
    polling_interval: float = field(
        default=5.0,
        metadata=_meta("Seconds between two polls when polling.", ge=0.1, le=HOUR),
    )
    debounce: float = field(
        default=1.0,
        metadata=_meta(
            "Seconds a burst of changes to one file must settle before the file is looked at.",
            ge=0,
            le=HOUR,
        ),
    )
    rescan_interval: float = field(
        default=900.0,
        metadata=_meta(
            "Seconds between full rescans, which catch changes no event reported (0 = never rescan).",
            ge=0,
            le=YEAR,
        ),
    )
    file_settle: float = field(
        default=2.0,
        metadata=_meta(
            "Seconds a file the archive keeps whole beside the transcripts (a saved tool output, a checkpoint, a "
            "subagent's settings) must stay unchanged before the daemon takes it; a file still being written is looked "
            "at again then.",
            ge=0,
            le=HOUR,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class RepairConfig:
    """What riffd does with the damage it finds."""

    mode: RepairMode = field(
        default="repair",
        metadata=_meta(
            "repair = repair idle sessions after a verified backup; report-only = only report what was found."
        ),
    )
    quiet_period: float = field(
        default=120.0,
        metadata=_meta(
            "Seconds a file must be unmodified before its session counts as idle.", ge=0, le=YEAR
        ),
    )
    add_missing_results: bool = field(
        default=True,
        metadata=_meta(
            "Add a placeholder result for a tool call that never got one (like riffd fix without --no-synthesize)."
        ),
    )
    classes: tuple[FindingClass, ...] = field(
        default=tuple(sorted(DEFAULT_REPAIRS)),
        metadata=_meta(
            "The kinds of damage to repair; the others are only reported. Not by default: "
            + ", ".join(sorted(OPT_IN_REPAIRS))
            + " (they change or drop bytes of a line Claude Code skips or reads leniently; name "
            "them to have riffd write what the client does in memory, for older clients).",
            choices=REPAIRABLE,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class BackupConfig:
    """The verified backups taken before every repair, and how long they are kept."""

    dir: Path = field(
        metadata=_meta(
            'Where backups go ("" = <state_dir>/backups).',
            derive=lambda environ, state_dir: state_dir / "backups",
        )
    )
    keep_per_file: int = field(
        default=10,
        metadata=_meta(
            "Backups kept per transcript (the newest one is always kept).", ge=1, le=1_000_000
        ),
    )
    max_age_days: float = field(
        default=90.0,
        metadata=_meta("Backups older than this many days are removed.", gt=0, le=1e7),
    )
    max_total_mb: float = field(
        default=0.0,
        metadata=_meta(
            "Then the oldest backups are removed until the store is under this many MB (0 = no size limit).",
            ge=0,
            le=1e9,
        ),
    )
    retention_interval: float = field(
        default=3600.0,
        metadata=_meta("Seconds between two retention passes.", gt=0, le=YEAR),
    )


@dataclass(frozen=True, kw_only=True)
class RetryConfig:
    """Retries of reads that fail with EIO, as cloud-synced folders do under WSL2."""

    attempts: int = field(
        default=3, metadata=_meta("Tries in all before a read is given up.", ge=1, le=100)
    )
    first_wait: float = field(
        default=0.5,
        metadata=_meta(
            "Seconds to wait before the second try; the wait doubles after each try.",
            ge=0,
            le=HOUR,
        ),
    )
    max_wait: float = field(
        default=8.0,
        metadata=_meta(
            "The longest wait between two tries, in seconds (at least first_wait).", ge=0, le=HOUR
        ),
    )

    @property
    def policy(self) -> RetryPolicy:
        """Return these settings as the RetryPolicy riffd.fsio reads with."""
        return RetryPolicy(
            attempts=self.attempts, first_wait=self.first_wait, max_wait=self.max_wait
        )


@dataclass(frozen=True, kw_only=True)
class TrackerConfig:
    """The tool-call tracker: the recent tool calls kept per session to spot redundant calls."""

    window: float = field(
        default=300.0,
        metadata=_meta(
            "Seconds a tool call is remembered; a repeat within this window counts as redundant.",
            gt=0,
            le=YEAR,
        ),
    )
    max_calls: int = field(
        default=50,
        metadata=_meta(
            "Tool calls remembered per session (the oldest go first).", ge=1, le=1_000_000
        ),
    )


@dataclass(frozen=True, kw_only=True)
class ArchiveConfig:
    """The archive of every transcript line (`<state_dir>/archive.db`)."""

    settle_after: float = field(
        default=300.0,
        metadata=_meta(
            "Seconds without new lines after which the daemon compresses the archive's last pack at the settled level "
            "and compacts the packs filled and the files kept whole meanwhile (for up to 2 minutes, stopping as soon "
            "as lines come in; the next time goes on where it stopped).",
            gt=0,
            le=YEAR,
        ),
    )
    write_delay: float = field(
        default=2.0,
        metadata=_meta(
            "Seconds the lines appended to a session wait before they go to the archive, together with the "
            "appends that follow (a write per append was the largest part of the daemon's CPU per line). "
            "Lines still waiting when the daemon is killed are archived from the file at its next start, "
            "if the file still holds them. 0 = each append at once; at most 60.",
            ge=0,
            le=60,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """The health reports the daemon writes."""

    dir: Path = field(
        metadata=_meta(
            'Where reports go ("" = <state_dir>/reports).',
            derive=lambda environ, state_dir: state_dir / "reports",
        )
    )
    interval: float = field(
        default=300.0, metadata=_meta("Seconds between two reports.", gt=0, le=YEAR)
    )
    keep: int = field(default=48, metadata=_meta("Timestamped reports kept.", ge=1, le=1_000_000))
    metrics_readable: bool = field(
        default=False,
        metadata=_meta(
            "Let other users read metrics.prom (node_exporter's textfile collector, run as its own "
            "user): it is written 0644 and the reports folder gets r and x for others, so others may "
            "list the reports' names (the reports stay readable by you only); metrics.prom holds "
            "figures, never transcript content. The folders above it must let that user through "
            "(x). Turning it off again writes metrics.prom 0600 and leaves the folder's mode."
        ),
    )


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """The daemon's log: on stderr (journald or a terminal), or in a file riffd rotates by size."""

    level: LogLevel = field(default="info", metadata=_meta("How much to log."))
    format: LogFormat = field(
        default="plain",
        metadata=_meta("plain = one readable line per event; json = one JSON object per line."),
    )
    file: str = field(
        default="",
        metadata=_meta(
            'A file to log to instead of stderr ("" = stderr), its folder made if missing, rotated at 10 MB with 3 old files kept (the launchd '
            "agent uses this; journald rotates its own)."
        ),
    )


@dataclass(frozen=True, kw_only=True)
class NotifyConfig:
    """Telling people and other programs when something happens."""

    command: str = field(
        default="",
        metadata=_meta(
            'A command run for "damaged" (new damage in a session), "repaired" and "repair_failed": the event as JSON '
            'on stdin, a one-line summary as its last argument ("" = none). E.g. "notify-send riffd" on Linux.',
            command=True,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Config:
    """riffd's whole configuration, every path resolved; `source` is the file it was read from
    (None: no file)."""

    roots: tuple[Path, ...] = field(
        metadata=_meta(
            "Transcript folders to watch ([] = Claude Code's: $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects, plus "
            "~/.config/claude/projects when it exists).",
            derive=lambda environ, state_dir: tuple(folders.default_roots(environ)),
        )
    )
    include: tuple[str, ...] = field(
        default=("*.jsonl",), metadata=_meta("Glob patterns a file name must match to be watched.")
    )
    exclude: tuple[str, ...] = field(
        default=(),
        metadata=_meta(
            "Glob patterns, matched against the path relative to its root, of files never touched (journal.jsonl and "
            "dot files are always left alone)."
        ),
    )
    state_dir: Path = field(
        metadata=_meta(
            """riffd's own state ("" = $RIFFD_STATE_DIR, else the platform's user state folder).""",
            derive=lambda environ, state_dir: paths.state_dir(environ),
        )
    )
    claude_dir: Path = field(
        metadata=_meta(
            """Claude Code's folder, whose sessions/ lists the running sessions ("" = $CLAUDE_CONFIG_DIR, else """
            "~/.claude).",
            derive=lambda environ, state_dir: folders.claude_config_dir(environ),
        )
    )
    watcher: WatcherConfig = field(default_factory=WatcherConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    backups: BackupConfig
    retry: RetryConfig = field(default_factory=RetryConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    archive: ArchiveConfig = field(default_factory=ArchiveConfig)
    reports: ReportConfig
    log: LogConfig = field(default_factory=LogConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    # Where the values came from is not part of the configuration: the same settings read from
    # another file are the same config.
    source: Path | None = field(default=None, compare=False)

    def to_toml_dict(self) -> dict[str, Any]:
        """Return the effective configuration as plain TOML-ready values (paths as strings),
        `source` left out."""
        return {name: value for name, value in plain_value(self).items() if name != "source"}


def plain_value(value: object) -> Any:
    """Return `value` as plain TOML-ready data: dataclasses as dicts, tuples as lists, paths and
    enums as str."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            item.name: plain_value(getattr(value, item.name)) for item in dataclasses.fields(value)
        }
    if isinstance(value, tuple | list):
        return [plain_value(item) for item in value]
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, Path):
        return str(value)
    return value
