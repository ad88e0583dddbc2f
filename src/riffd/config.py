"""riffd's configuration: one TOML file read into frozen dataclasses, with every error reported at once.

Where the file is: `--config PATH`, else `$RIFFD_CONFIG`, else `<platformdirs user config dir>/riffd/config.toml`
(`~/.config/riffd/config.toml` on Linux). A missing file at that default location means "all defaults"; a
missing file named by `--config` or `$RIFFD_CONFIG` is an error.

Precedence, highest first (one rule for every key):

1. command-line flags, passed to `load_config` as `overrides` with dotted keys (`"log.level"`, `"state_dir"`);
2. the environment: `RIFFD_STATE_DIR` replaces `state_dir`;
3. the file;
4. the defaults, which are written in exactly one place: the dataclass fields below.

Folders whose default is "" (or `[]` for `roots`) are derived when the config is loaded: `state_dir` from
`riffd.paths.state_dir()`, `claude_dir` and `roots` from `riffd.paths` (so `CLAUDE_CONFIG_DIR`, Claude Code's own
variable, changes those defaults but never a value the file sets), `backups.dir` and `reports.dir` inside
`state_dir`. `~` is expanded everywhere; a relative path in the file is relative to the file's folder, one from a
flag or the environment to the current folder.

Errors read `<where>: <key.path>: <problem>; expected <form>`, where `<where>` is the file (or "command line", or
the environment variable) the value came from, e.g.
`/home/me/.config/riffd/config.toml: watcher.debounse: unknown key (did you mean "watcher.debounce"?); expected
one of: observer, polling_interval, debounce, rescan_interval`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import sys
import textwrap
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import platformdirs
import tomlkit

from riffd import paths
from riffd.findings import REPAIRABLE, FindingClass
from riffd.fsio import RetryPolicy

CONFIG_ENV = "RIFFD_CONFIG"
STATE_DIR_ENV = "RIFFD_STATE_DIR"
CONFIG_FILE_NAME = "config.toml"
COMMAND_LINE = "command line"

Observer = Literal["auto", "native", "polling"]
RepairMode = Literal["repair", "report-only"]
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["plain", "json"]

# Given the environment and the resolved state_dir, return a derived default.
Derive = Callable[[dict[str, str], Path], object]


def _meta(doc: str, *, gt: float | None = None, ge: float | None = None, choices: frozenset[Any] | None = None,
          derive: Derive | None = None) -> dict[str, Any]:
    """Return a config key's field metadata: its meaning (shown in the example file), its bounds, and for a folder
    whose default ("" or []) is computed at load time, the function that computes it."""
    return {"doc": doc, "gt": gt, "ge": ge, "choices": choices, "derive": derive}


class ConfigError(Exception):
    """The configuration cannot be used; `.errors` holds every problem found, one line each."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True, kw_only=True)
class WatcherConfig:
    """How riffd notices changed transcripts."""

    observer: Observer = field(default="auto", metadata=_meta(
        "How to watch for changes: native file-system events, polling, or auto (native where it works, polling "
        "where events are unreliable, e.g. WSL2 drvfs and network folders)."))
    polling_interval: float = field(default=5.0, metadata=_meta("Seconds between two polls when polling.", gt=0))
    debounce: float = field(default=1.0, metadata=_meta(
        "Seconds a burst of changes to one file must settle before the file is looked at.", ge=0))
    rescan_interval: float = field(default=900.0, metadata=_meta(
        "Seconds between full rescans, which catch changes no event reported (0 = never rescan).", ge=0))


@dataclass(frozen=True, kw_only=True)
class RepairConfig:
    """What riffd does with the damage it finds."""

    mode: RepairMode = field(default="repair", metadata=_meta(
        "repair = repair idle sessions after a verified backup; report-only = only report what was found."))
    quiet_period: float = field(default=120.0, metadata=_meta(
        "Seconds a file must be unmodified before its session counts as idle.", ge=0))
    add_missing_results: bool = field(default=True, metadata=_meta(
        "Add a placeholder result for a tool call that never got one (like riffd fix without --no-synthesize)."))
    classes: tuple[FindingClass, ...] = field(
        default=(FindingClass.DUPLICATE_TOOL_RESULT, FindingClass.ORPHAN_TOOL_RESULT,
                 FindingClass.DUPLICATE_TOOL_USE, FindingClass.MISSING_TOOL_RESULT),
        metadata=_meta("The kinds of damage to repair; the others are only reported.", choices=REPAIRABLE))


@dataclass(frozen=True, kw_only=True)
class BackupConfig:
    """The verified backups taken before every repair, and how long they are kept."""

    dir: Path = field(metadata=_meta('Where backups go ("" = <state_dir>/backups).',
                                     derive=lambda environ, state_dir: state_dir / "backups"))
    keep_per_file: int = field(default=10, metadata=_meta(
        "Backups kept per transcript (the newest one is always kept).", ge=1))
    max_age_days: float = field(default=90.0, metadata=_meta(
        "Backups older than this many days are removed.", gt=0))
    max_total_mb: float = field(default=0.0, metadata=_meta(
        "Then the oldest backups are removed until the store is under this many MB (0 = no size limit).", ge=0))
    retention_interval: float = field(default=3600.0, metadata=_meta(
        "Seconds between two retention passes.", gt=0))


@dataclass(frozen=True, kw_only=True)
class RetryConfig:
    """Retries of reads that fail with EIO, as cloud-synced folders do under WSL2."""

    attempts: int = field(default=3, metadata=_meta("Tries in all before a read is given up.", ge=1))
    first_wait: float = field(default=0.5, metadata=_meta(
        "Seconds to wait before the second try; the wait doubles after each try.", ge=0))
    max_wait: float = field(default=8.0, metadata=_meta(
        "The longest wait between two tries, in seconds (at least first_wait).", ge=0))

    @property
    def policy(self) -> RetryPolicy:
        """Return these settings as the RetryPolicy riffd.fsio reads with."""
        return RetryPolicy(attempts=self.attempts, first_wait=self.first_wait, max_wait=self.max_wait)


@dataclass(frozen=True, kw_only=True)
class TrackerConfig:
    """The tool-call tracker: the recent tool calls kept per session to spot redundant calls."""

    window: float = field(default=300.0, metadata=_meta(
        "Seconds a tool call is remembered; a repeat within this window counts as redundant.", gt=0))
    max_calls: int = field(default=50, metadata=_meta("Tool calls remembered per session (the oldest go first).", ge=1))


@dataclass(frozen=True, kw_only=True)
class ReportConfig:
    """The health reports the daemon writes."""

    dir: Path = field(metadata=_meta('Where reports go ("" = <state_dir>/reports).',
                                     derive=lambda environ, state_dir: state_dir / "reports"))
    interval: float = field(default=300.0, metadata=_meta("Seconds between two reports.", gt=0))
    keep: int = field(default=48, metadata=_meta("Timestamped reports kept.", ge=1))


@dataclass(frozen=True, kw_only=True)
class LogConfig:
    """The daemon's log on stderr."""

    level: LogLevel = field(default="info", metadata=_meta("How much to log."))
    format: LogFormat = field(default="plain", metadata=_meta(
        "plain = one readable line per event; json = one JSON object per line."))


@dataclass(frozen=True, kw_only=True)
class Config:
    """riffd's whole configuration, every path resolved; `source` is the file it was read from (None: no file)."""

    roots: tuple[Path, ...] = field(metadata=_meta(
        "Transcript folders to watch ([] = Claude Code's: $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects, plus "
        "~/.config/claude/projects when it exists).",
        derive=lambda environ, state_dir: tuple(paths.default_roots(environ))))
    include: tuple[str, ...] = field(default=("*.jsonl",), metadata=_meta(
        "Glob patterns a file name must match to be watched."))
    exclude: tuple[str, ...] = field(default=(), metadata=_meta(
        "Glob patterns, matched against the path relative to its root, of files never touched (journal.jsonl and "
        "dot files are always left alone)."))
    state_dir: Path = field(metadata=_meta(
        '''riffd's own state ("" = $RIFFD_STATE_DIR, else the platform's user state folder).''',
        derive=lambda environ, state_dir: paths.state_dir(environ)))
    claude_dir: Path = field(metadata=_meta(
        '''Claude Code's folder, whose sessions/ lists the running sessions ("" = $CLAUDE_CONFIG_DIR, else '''
        "~/.claude).",
        derive=lambda environ, state_dir: paths.claude_config_dir(environ)))
    watcher: WatcherConfig = field(default_factory=WatcherConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    backups: BackupConfig
    retry: RetryConfig = field(default_factory=RetryConfig)
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    reports: ReportConfig
    log: LogConfig = field(default_factory=LogConfig)
    # Where the values came from is not part of the configuration: the same settings read from another file are
    # the same config.
    source: Path | None = field(default=None, compare=False)

    def to_toml_dict(self) -> dict[str, Any]:
        """Return the effective configuration as plain TOML-ready values (paths as strings), `source` left out."""
        return {name: value for name, value in _plain(self).items() if name != "source"}


# --- the schema, read off the dataclasses ----------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    """One config key: its dotted name, its dataclass field and the field's resolved type."""

    name: str
    spec: dataclasses.Field[Any]
    hint: Any

    @property
    def short(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def derive(self) -> Derive | None:
        derive: Derive | None = self.spec.metadata.get("derive")
        return derive


def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _build_schema() -> tuple[dict[str, _Key], dict[str, type]]:
    keys: dict[str, _Key] = {}
    sections: dict[str, type] = {}
    config_hints = _hints(Config)
    for config_field in dataclasses.fields(Config):
        hint = config_hints[config_field.name]
        if config_field.name == "source":
            continue
        if dataclasses.is_dataclass(hint):
            assert isinstance(hint, type)
            sections[config_field.name] = hint
            section_hints = _hints(hint)
            for section_field in dataclasses.fields(hint):
                name = f"{config_field.name}.{section_field.name}"
                keys[name] = _Key(name, section_field, section_hints[section_field.name])
        else:
            keys[config_field.name] = _Key(config_field.name, config_field, hint)
    return keys, sections


SCHEMA, SECTIONS = _build_schema()


def _file_default(key: _Key) -> object:
    """Return the key's default as the file spells it: "" / [] for a derived folder."""
    if key.spec.default is not dataclasses.MISSING:
        return _plain(key.spec.default)
    return [] if get_origin(key.hint) is tuple else ""


def _plain(value: object) -> Any:
    """Return `value` as plain TOML-ready data: dataclasses as dicts, tuples as lists, paths and enums as str."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {item.name: _plain(getattr(value, item.name)) for item in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, Path):
        return str(value)
    return value


def _expected(key: _Key) -> str:
    """Return the form a key's value must take, in words."""
    return _form(key.hint, key.spec.metadata, derived=key.derive is not None)


def _form(hint: Any, meta: Mapping[str, Any], *, derived: bool = False) -> str:
    bounds = " and ".join(f"{op} {_number(meta[name])}" for name, op in (("gt", ">"), ("ge", ">="))
                          if meta.get(name) is not None)
    bounds = f" {bounds}" if bounds else ""
    if hint is bool:
        return "true or false"
    if hint is int:
        return f"an integer{bounds}"
    if hint is float:
        return f"a number{bounds}"
    if hint is Path:
        return 'a folder path as a string ("" = the default)' if derived else "a folder path as a string"
    if get_origin(hint) is Literal:
        return "one of " + ", ".join(f'"{choice}"' for choice in get_args(hint))
    if get_origin(hint) is tuple:
        item = get_args(hint)[0]
        if item is Path:
            return "a list of folder paths ([] = the default)" if derived else "a list of folder paths"
        if isinstance(item, type) and issubclass(item, Enum):
            return "a list of any of " + ", ".join(f'"{choice}"' for choice in _choices(item, meta))
        return "a list of strings"
    return "a string"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _choices(enum: type[Enum], meta: Mapping[str, Any]) -> list[str]:
    allowed = meta.get("choices")
    return [str(member.value) for member in enum if allowed is None or member in allowed]


# --- checking one value ----------------------------------------------------------------------------------


class _Invalid(Exception):
    """One value that does not fit its key; the message is the problem, without the key or the expected form."""


def _describe(value: object) -> str:
    """Return how a value looks in TOML terms, for an error message."""
    kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", tuple: "list",
            dict: "table"}.get(type(value), type(value).__name__)
    if isinstance(value, dict):
        return kind
    shown = str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, str) else str(value)
    if isinstance(value, str):
        shown = '"' + shown[1:-1] + '"'
    return f"{kind} {shown[:80]}{'...' if len(shown) > 80 else ''}"


def _check(value: object, hint: Any, meta: Mapping[str, Any], base: Path) -> object:
    """Return `value` converted to `hint`'s type (None for "" / [] of a derived folder); raise _Invalid if it
    does not fit."""
    if hint is bool:
        if not isinstance(value, bool):
            raise _Invalid(f"wrong type: {_describe(value)}")
        return value
    if hint is int or hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or (hint is int and isinstance(value, float)):
            raise _Invalid(f"wrong type: {_describe(value)}")
        number: int | float = value if hint is int else float(value)
        if not math.isfinite(number):
            raise _Invalid(f"out of range: {number}")
        if (meta.get("gt") is not None and not number > meta["gt"]) or (
            meta.get("ge") is not None and not number >= meta["ge"]
        ):
            raise _Invalid(f"out of range: {_number(number)}")
        return number
    if hint is Path:
        if not isinstance(value, str | os.PathLike):
            raise _Invalid(f"wrong type: {_describe(value)}")
        text = os.fspath(value)
        if not text:
            return None
        if "\0" in text:
            raise _Invalid("bad value: the path contains a NUL character")
        path = Path(text).expanduser()
        return path if path.is_absolute() else base / path
    if get_origin(hint) is Literal:
        choices = [str(choice) for choice in get_args(hint)]
        if not isinstance(value, str):
            raise _Invalid(f"wrong type: {_describe(value)}")
        if value not in choices:
            raise _Invalid(f"bad value: {_describe(value)}{_did_you_mean(value, choices)}")
        return value
    if get_origin(hint) is tuple:
        return _check_list(value, get_args(hint)[0], meta, base)
    if not isinstance(value, str):
        raise _Invalid(f"wrong type: {_describe(value)}")
    return value


def _check_list(value: object, item_hint: Any, meta: Mapping[str, Any], base: Path) -> object:
    if not isinstance(value, list | tuple):
        raise _Invalid(f"wrong type: {_describe(value)}")
    if not value and item_hint is Path:
        return None
    problems: list[str] = []
    items: list[object] = []
    for position, item in enumerate(value):
        if isinstance(item_hint, type) and issubclass(item_hint, Enum):
            choices = _choices(item_hint, meta)
            if not isinstance(item, str):
                problems.append(f"item {position}: wrong type: {_describe(item)}")
            elif item not in choices:
                problems.append(f"item {position}: bad value: {_describe(item)}{_did_you_mean(item, choices)}")
            elif item_hint(item) not in items:
                items.append(item_hint(item))
            continue
        try:
            checked = _check(item, item_hint, {}, base)
        except _Invalid as exc:
            problems.append(f"item {position}: {exc}")
            continue
        if checked is None:
            problems.append(f"item {position}: bad value: empty path")
        else:
            items.append(checked)
    if problems:
        raise _Invalid(", ".join(problems))
    return tuple(items)


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


# --- reading the layers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    """One value from one layer: where it came from (for errors) and what relative paths are relative to."""

    value: object
    origin: str
    base: Path


def _unknown(name: str, origin: str) -> str:
    """Return the error for an unknown dotted key, with the closest known key as a hint."""
    if name in SECTIONS:
        first = dataclasses.fields(SECTIONS[name])[0].name
        return f"{origin}: {name}: is a table, not a value; expected one of its keys, such as {name}.{first}"
    section, _, short = name.rpartition(".")
    if section in SECTIONS:
        known = [item.name for item in dataclasses.fields(SECTIONS[section])]
        close = difflib.get_close_matches(short, known, n=1)
        hint = f' (did you mean "{section}.{close[0]}"?)' if close else ""
    else:
        known = [key for key in SCHEMA if "." not in key] + list(SECTIONS)
        close = difflib.get_close_matches(name, known, n=1)
        elsewhere = [key for key in SCHEMA if key.rpartition(".")[2] == short]
        hint = f' (did you mean "{(close or elsewhere)[0]}"?)' if close or elsewhere else ""
    return f"{origin}: {name}: unknown key{hint}; expected one of: {', '.join(known)}"


def _read_file(path: Path, errors: list[str]) -> dict[str, Any] | None:
    """Return the parsed TOML document at `path`; append an error and return None when it cannot be read."""
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        errors.append(_syntax_error(path, exc))
    except UnicodeDecodeError as exc:
        errors.append(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a UTF-8 TOML file")
    except OSError as exc:
        errors.append(f"{path}: cannot read the file: {exc.strerror or exc}; expected a readable riffd config file "
                      "(`riffd config init` writes one)")
    return None


def _syntax_error(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    """Return a TOML syntax error as `<file>: line L, column C: TOML syntax error: ...; expected valid TOML`."""
    message = str(exc)
    match = re.fullmatch(r"(.*) \(at (line \d+, column \d+|end of document)\)", message, re.DOTALL)
    problem, where = (match.group(1), f"{match.group(2)}: ") if match else (message, "")
    return f"{path}: {where}TOML syntax error: {problem[:1].lower()}{problem[1:]}; expected valid TOML (https://toml.io)"


def _file_settings(document: Mapping[str, Any], path: Path, errors: list[str]) -> dict[str, _Setting]:
    """Return the file's values by dotted key; append an error for every unknown key or misplaced table."""
    origin, base = str(path), path.parent
    settings: dict[str, _Setting] = {}
    for name, value in document.items():
        if name in SECTIONS:
            if not isinstance(value, dict):
                errors.append(f"{origin}: {name}: wrong type: {_describe(value)}; expected a table [{name}]")
                continue
            for short, item in value.items():
                dotted = f"{name}.{short}"
                if "." not in short and dotted in SCHEMA:
                    settings[dotted] = _Setting(item, origin, base)
                else:
                    errors.append(_unknown(dotted, origin))
        elif "." not in name and name in SCHEMA:
            settings[name] = _Setting(value, origin, base)
        else:
            errors.append(_unknown(name, origin))
    return settings


def _override_settings(overrides: Mapping[str, object], errors: list[str]) -> dict[str, _Setting]:
    """Return the command-line values by dotted key; strings for non-string keys are read as TOML values."""
    settings: dict[str, _Setting] = {}
    for name, value in overrides.items():
        key = SCHEMA.get(name)
        if key is None:
            errors.append(_unknown(name, COMMAND_LINE))
            continue
        if isinstance(value, str) and (key.hint in (bool, int, float) or get_origin(key.hint) is tuple):
            value = parse_toml_value(value)
        settings[name] = _Setting(value, COMMAND_LINE, Path.cwd())
    return settings


def parse_toml_value(text: str) -> object:
    """Given a command-line VALUE, return it as a TOML value when it parses as one (number, boolean, array,
    quoted string, ...), else as the plain string."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


# --- locating and loading --------------------------------------------------------------------------------


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return where the config file lives when nothing names one: <platformdirs user config dir>/riffd/config.toml.

    On Linux and the BSDs this honours `XDG_CONFIG_HOME` from `environ` (default: the process environment) the
    way platformdirs does; macOS and Windows have fixed folders.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    if xdg and sys.platform not in ("win32", "darwin"):
        return Path(xdg).expanduser() / paths.APP_NAME / CONFIG_FILE_NAME
    return Path(platformdirs.user_config_dir(paths.APP_NAME)) / CONFIG_FILE_NAME


def config_path(flag: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """Return the config file in use: `flag` (--config), else $RIFFD_CONFIG, else default_config_path()."""
    return _locate(flag, environ)[0]


def _locate(flag: Path | None, environ: Mapping[str, str] | None) -> tuple[Path, bool]:
    """Return the config file in use and whether it was named explicitly (by flag or environment)."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return Path(flag).expanduser(), True
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser(), True
    return default_config_path(env), False


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Read the config file (`path`, else $RIFFD_CONFIG, else the default location), apply the environment and
    `overrides` (dotted keys, from command-line flags), and return the checked Config.

    Raise ConfigError listing every problem when the file is missing although named explicitly, is not valid
    TOML, or holds unknown keys or values of the wrong type or out of range.
    """
    env = dict(os.environ if environ is None else environ)
    file_path, explicit = _locate(path, env)
    errors: list[str] = []
    settings: dict[str, _Setting] = {}
    source: Path | None = None
    if file_path.exists() or explicit:
        if explicit and not file_path.exists():
            errors.append(f"{file_path}: no such file; expected a riffd config file (`riffd config init` writes "
                          "one)")
        else:
            document = _read_file(file_path, errors)
            if document is not None:
                source = file_path.absolute()
                settings = _file_settings(document, source, errors)
    return _build(settings, env, overrides or {}, source, errors)


def loads_config(
    text: str,
    *,
    source: Path,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Given the text of a config file that would live at `source`, return the checked Config as load_config
    would; raise ConfigError listing every problem. Used to check an edit before it is written."""
    errors: list[str] = []
    settings: dict[str, _Setting] = {}
    source = source.absolute()
    try:
        settings = _file_settings(tomllib.loads(text), source, errors)
    except tomllib.TOMLDecodeError as exc:
        errors.append(_syntax_error(source, exc))
    return _build(settings, dict(os.environ if environ is None else environ), overrides or {}, source, errors)


def _build(file_settings: Mapping[str, _Setting], environ: dict[str, str], overrides: Mapping[str, object],
           source: Path | None, errors: list[str]) -> Config:
    """Layer the environment and `overrides` over the file's settings, check every value, derive the folder
    defaults and return the Config; raise ConfigError with `errors` and every new problem if there is any."""
    settings = dict(file_settings)
    if environ.get(STATE_DIR_ENV):
        settings["state_dir"] = _Setting(environ[STATE_DIR_ENV], f"environment ({STATE_DIR_ENV})", Path.cwd())
    settings.update(_override_settings(overrides, errors))
    values: dict[str, object] = {}
    for name, setting in settings.items():
        key = SCHEMA[name]
        try:
            checked = _check(setting.value, key.hint, key.spec.metadata, setting.base)
        except _Invalid as exc:
            errors.append(f"{setting.origin}: {name}: {exc}; expected {_expected(key)}")
            continue
        if checked is not None:
            values[name] = checked
    first_wait = values.get("retry.first_wait", RetryConfig.first_wait)
    max_wait = values.get("retry.max_wait", RetryConfig.max_wait)
    if isinstance(first_wait, float) and isinstance(max_wait, float) and max_wait < first_wait:
        origin = settings.get("retry.max_wait", settings.get("retry.first_wait"))
        errors.append(f"{origin.origin if origin else COMMAND_LINE}: retry.max_wait: out of range: "
                      f"{_number(max_wait)} is less than retry.first_wait ({_number(first_wait)}); expected a "
                      "number >= retry.first_wait")
    if errors:
        raise ConfigError(errors)
    state_dir = values.get("state_dir") or _derive(SCHEMA["state_dir"], environ, Path())
    assert isinstance(state_dir, Path)
    for name, key in SCHEMA.items():
        if name not in values and key.derive is not None:
            values[name] = _derive(key, environ, state_dir)
    top: dict[str, Any] = {name: value for name, value in values.items() if "." not in name}
    for section, cls in SECTIONS.items():
        prefix = f"{section}."
        top[section] = cls(**{name[len(prefix):]: value for name, value in values.items()
                              if name.startswith(prefix)})
    return Config(**top, source=source)


def _derive(key: _Key, environ: dict[str, str], state_dir: Path) -> object:
    assert key.derive is not None
    derived = key.derive(environ, state_dir)
    if isinstance(derived, tuple):
        return tuple(item.absolute() for item in derived)
    assert isinstance(derived, Path)
    return derived.absolute()


# --- the example file ------------------------------------------------------------------------------------


def example_toml() -> str:
    """Return the commented example config (every key at its default, with its meaning), as `riffd config init`
    writes it and config/riffd.toml holds it."""
    lines = [
        "# riffd configuration: every key, at its default, with what it means.",
        "#",
        "# Where riffd looks: --config PATH, else $RIFFD_CONFIG, else <user config dir>/riffd/config.toml",
        "# (~/.config/riffd/config.toml on Linux). `riffd config init` writes this file there; `riffd config set",
        "# KEY VALUE` changes one key and keeps your comments; `riffd config validate` checks the file.",
        "# Precedence: command-line flag > environment (RIFFD_STATE_DIR) > this file > default.",
        "# Unknown keys are errors. Times are in seconds. Paths may start with ~; a relative path is relative",
        "# to this file's folder.",
    ]
    current_section = ""
    for name, key in SCHEMA.items():
        section = name.rpartition(".")[0]
        if section != current_section:
            current_section = section
            lines += ["", *_comment((SECTIONS[section].__doc__ or "").strip()), f"[{section}]"]
        lines.append("")
        lines += _comment(key.spec.metadata["doc"])
        lines += _comment(f"Expected: {_expected(key)}.")
        lines.append(f"{key.short} = {tomlkit.item(_file_default(key)).as_string()}")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, width=110, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False)
