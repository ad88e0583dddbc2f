"""Finding and loading the config file: file, environment and flags layered in one documented
precedence, every error collected with the place its value came from (see riffd.config)."""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import stat
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_origin

import platformdirs

from riffd import paths
from riffd.config.model import (
    CONFIG_ENV,
    CONFIG_FILE_NAME,
    STATE_DIR_ENV,
    Config,
    ConfigError,
    RetryConfig,
)
from riffd.config.schema import (
    SCHEMA,
    SECTIONS,
    InvalidValue,
    Key,
    check_value,
    describe_value,
    expected_form,
    format_number,
)

COMMAND_LINE = "command line"


@dataclass(frozen=True)
class _Setting:
    """One value from one layer: where it came from (for errors) and what relative paths are
    relative to."""

    value: object
    origin: str
    base: Path


def _unknown(name: str, origin: str) -> str:
    """Return the error for an unknown dotted key, with the closest known key as a hint."""
    import difflib  # only for a bad key: every command loads the config

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


def _read_file(path: Path, errors: list[str]) -> tuple[dict[str, Any], str] | None:
    """Return the parsed TOML document at `path` with its text; append an error and return None
    when it cannot be read."""
    try:
        text = read_config_bytes(path).decode("utf-8")
        return tomllib.loads(text), text
    except ConfigTooLarge as exc:
        errors.append(f"{path}: {exc}; expected a riffd config file")
    except tomllib.TOMLDecodeError as exc:
        errors.append(_syntax_error(path, exc))
    except UnicodeDecodeError as exc:
        errors.append(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); expected a UTF-8 TOML file"
        )
    except IsADirectoryError:
        errors.append(f"{path}: a folder; --config and RIFFD_CONFIG name a riffd config file")
    except OSError as exc:
        errors.append(
            f"{path}: cannot read the file: {exc.strerror or exc}; expected a readable riffd config file"
        )
    return None


def _syntax_error(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    """Return a TOML syntax error as `<file>: line L, column C: TOML syntax error: ...; expected
    valid TOML`."""
    message = str(exc)
    match = re.fullmatch(r"(.*) \(at (line \d+, column \d+|end of document)\)", message, re.DOTALL)
    problem, where = (match.group(1), f"{match.group(2)}: ") if match else (message, "")
    return f"{path}: {where}TOML syntax error: {problem[:1].lower()}{problem[1:]}; expected valid TOML (https://toml.io)"


def _file_settings(
    document: Mapping[str, Any], path: Path, text: str, errors: list[str]
) -> dict[str, _Setting]:
    """Return the file's values by dotted key, each with the file and line it is on as its origin;
    append an error for every unknown key or misplaced table."""
    lines, base = key_lines(text), path.parent

    def origin(dotted: str) -> str:
        # the key's own line; else its first key below (`classes.x = 1` gives `classes`); else the
        # table's
        below = [line for key, line in lines.items() if key.startswith(dotted + ".")]
        line = lines.get(dotted) or min(below, default=None)
        line = line or next((lines[key] for key in _prefixes(dotted) if key in lines), None)
        return f"{path}: line {line}" if line else str(path)

    settings: dict[str, _Setting] = {}
    for name, value in document.items():
        if name in SECTIONS:
            if not isinstance(value, dict):
                errors.append(
                    f"{origin(name)}: {name}: wrong type: {describe_value(value)}; expected a table [{name}]"
                )
                continue
            for short, item in value.items():
                dotted = f"{name}.{short}"
                if "." not in short and dotted in SCHEMA:
                    settings[dotted] = _Setting(item, origin(dotted), base)
                else:
                    errors.append(_unknown(dotted, origin(dotted)))
        elif "." not in name and name in SCHEMA:
            settings[name] = _Setting(value, origin(name), base)
        else:
            errors.append(_unknown(name, origin(name)))
    return settings


def _prefixes(dotted: str) -> list[str]:
    """Return `dotted` and each key it is inside, the longest first: `a.b.c`, `a.b`, `a`."""
    parts = dotted.split(".")
    return [".".join(parts[:end]) for end in range(len(parts), 0, -1)]


_BARE_OR_QUOTED = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_BARE_OR_QUOTED}(?:\s*\.\s*{_BARE_OR_QUOTED})*"
_TABLE_LINE = re.compile(rf"\s*\[\s*({_DOTTED})\s*\]\s*(?:#.*)?")
_KEY_LINE = re.compile(rf"\s*({_DOTTED})\s*=\s*(.*)")
_KEY_PART = re.compile(_BARE_OR_QUOTED)


def key_lines(text: str) -> dict[str, int]:
    """Return the line (from 1) on which each dotted key and table of a TOML text that parsed is
    given: a reading by lines that leaves multi-line strings out, for the errors found after
    parsing (tomllib keeps no places), which name the line as its syntax errors do."""

    def dotted(spelled: str) -> list[str]:
        return [part[1:-1] if part[:1] in "\"'" else part for part in _KEY_PART.findall(spelled)]

    found: dict[str, int] = {}
    table: list[str] | None = []  # (None: in an array of tables, which riffd has none of)
    closing = ""  # the quotes that end the multi-line string a line is in
    for number, line in enumerate(text.split("\n"), start=1):
        if closing:
            closing = "" if closing in line else closing
            continue
        if line.lstrip().startswith("[["):
            table = None
            continue
        if header := _TABLE_LINE.fullmatch(line.rstrip("\r")):
            table = dotted(header.group(1))
            found.setdefault(".".join(table), number)
            continue
        if pair := _KEY_LINE.fullmatch(line.rstrip("\r")):
            if table is not None:
                found.setdefault(".".join([*table, *dotted(pair.group(1))]), number)
            value = pair.group(2)
            for quotes in ('"""', "'''"):  # (one opened and not closed on this line)
                if value.count(quotes) % 2:
                    closing = quotes
    return found


def _override_settings(overrides: Mapping[str, object], errors: list[str]) -> dict[str, _Setting]:
    """Return the command-line values by dotted key; strings for non-string keys are read as TOML
    values."""
    settings: dict[str, _Setting] = {}
    for name, value in overrides.items():
        key = SCHEMA.get(name)
        if key is None:
            errors.append(_unknown(name, COMMAND_LINE))
            continue
        if isinstance(value, str) and (
            key.hint in (bool, int, float) or get_origin(key.hint) is tuple
        ):
            value = parse_toml_value(value)
        settings[name] = _Setting(value, COMMAND_LINE, Path.cwd())
    return settings


def parse_toml_value(text: str) -> object:
    """Given a command-line VALUE, return it as a TOML value when it parses as one (number, boolean,
    array, quoted string, ...), else as the plain string."""
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return where the config file lives when nothing names one: <platformdirs user config
    dir>/riffd/config.toml.

    On Linux and the BSDs this honours `XDG_CONFIG_HOME` from `environ` (default: the process
    environment) the way platformdirs does; macOS and Windows have fixed folders.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "").strip()
    if xdg and sys.platform not in ("win32", "darwin"):
        return Path(xdg).expanduser() / paths.APP_NAME / CONFIG_FILE_NAME
    return Path(platformdirs.user_config_dir(paths.APP_NAME)) / CONFIG_FILE_NAME


def _unless_default(path: Path | None) -> Path | None:
    """`path`, unless it is the default config file (which riffd reads unasked: a command riffd
    advises need not name it)."""
    return None if path is None or path.absolute() == default_config_path().absolute() else path


def advised_config(config: Config) -> Path | None:
    """The file a command riffd advises names with `--config` to act on the same configuration:
    the one `config` was read from, unless it is the default one or is not there
    (riffd.display.config_named)."""
    from riffd.display import config_named

    named = config_named(_unless_default(config.source))
    return None if named is None else Path(named)


def validate_command(path: Path) -> str:
    """The command that checks the config file at `path` (`riffd config validate`, naming it unless
    it is the default file)."""
    from riffd.display import riffd_invocation

    return f"{riffd_invocation(_unless_default(path))} config validate"


def config_path(flag: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """Return the config file in use: `flag` (--config), else $RIFFD_CONFIG, else
    default_config_path()."""
    return _locate(flag, environ)[0]


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """Return what tells a config file saved again from the one read (editors save by rename): its
    inode, mtime and size; None when it cannot be read (absent, or its folder not there yet)."""
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_ino, status.st_mtime_ns, status.st_size)


def _locate(flag: Path | None, environ: Mapping[str, str] | None) -> tuple[Path, bool]:
    """Return the config file in use and whether it was named explicitly (by flag or
    environment)."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return Path(flag).expanduser(), True
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser(), True
    return default_config_path(env), False


def file_in_the_way(folder: Path) -> Path | None:
    """The file at `folder` or at the nearest of its parents that exists, when it is not a folder
    (nothing can be made below it); None when the folder is there or can be made."""
    for place in (folder, *folder.parents):
        if os.path.lexists(place):
            # (a link to nothing, a drive not mounted yet: no claim on it)
            return None if place.is_dir() or not os.path.exists(place) else place
    return None


CONFIG_LIMIT = 1 << 20  # bytes: a config file is a few KiB; /dev/zero must not fill the memory


class ConfigTooLarge(ValueError):
    """What was read as the config is larger than CONFIG_LIMIT."""


def read_config_bytes(path: Path) -> bytes:
    """The bytes of the config file at `path`: a file, `/dev/null`, or a FIFO (`--config <(...)`)
    read to its end, never waiting for a writer that is not there (it reads as empty), and never
    more than CONFIG_LIMIT (ConfigTooLarge). Raise IsADirectoryError for a folder, OSError when it
    cannot be read."""
    # opened without blocking (a FIFO no one writes to must not hang every command), then read
    # blocking: a FIFO's writer, if any, is waited for; none gives its end at once
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        os.set_blocking(fd, True)
        data = handle.read(CONFIG_LIMIT + 1)
    if len(data) > CONFIG_LIMIT:
        raise ConfigTooLarge(f"more than {CONFIG_LIMIT // (1 << 20)} MiB")
    return data


def _target_can_be_made(link: Path) -> bool:
    """Whether the file a symbolic link names can be made (its folder's path resolves: no loop)."""
    try:
        link.resolve(strict=False)
    except (RuntimeError, OSError):  # (a loop: RuntimeError before Python 3.13, OSError after)
        return False
    return True


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Read the config file (`path`, else $RIFFD_CONFIG, else the default location), apply the
    environment and `overrides` (dotted keys, from command-line flags), and return the checked
    Config.

    Raise ConfigError listing every problem when the file is missing although named explicitly, is
    not valid TOML, or holds unknown keys or values of the wrong type or out of range.
    """
    env = dict(os.environ if environ is None else environ)
    file_path, explicit = _locate(path, env)
    errors: list[str] = []
    settings: dict[str, _Setting] = {}
    source: Path | None = None
    if file_path.exists() or explicit:
        if explicit and not file_path.exists():
            from riffd.display import riffd_invocation

            errors.append(
                f"{file_path}: a symbolic link to nothing (its target is missing, or it links in "
                "a loop); point it at a riffd config file, or remove it"
                if os.path.lexists(file_path) and not _target_can_be_made(file_path)
                else f"{file_path}: no such file; expected a riffd config file "
                f"(`{riffd_invocation(file_path)} config init` writes one)"
            )
        else:
            read = _read_file(file_path, errors)
            if read is not None:
                source = file_path.absolute()
                settings = _file_settings(read[0], source, read[1], errors)
    return _build(settings, env, overrides or {}, source, errors)


def loads_config(
    text: str,
    *,
    source: Path,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Given the text of a config file that would live at `source`, return the checked Config as
    load_config would; raise ConfigError listing every problem. Used to check an edit before it is
    written."""
    errors: list[str] = []
    settings: dict[str, _Setting] = {}
    source = source.absolute()
    try:
        settings = _file_settings(tomllib.loads(text), source, text, errors)
    except tomllib.TOMLDecodeError as exc:
        errors.append(_syntax_error(source, exc))
    return _build(
        settings, dict(os.environ if environ is None else environ), overrides or {}, source, errors
    )


def _build(
    file_settings: Mapping[str, _Setting],
    environ: dict[str, str],
    overrides: Mapping[str, object],
    source: Path | None,
    errors: list[str],
) -> Config:
    """Layer the environment and `overrides` over the file's settings, check every value, derive the
    folder defaults and return the Config; raise ConfigError with `errors` and every new problem if
    there is any."""
    settings = dict(file_settings)
    if environ.get(STATE_DIR_ENV):
        settings["state_dir"] = _Setting(
            environ[STATE_DIR_ENV], f"environment ({STATE_DIR_ENV})", Path.cwd()
        )
    settings.update(_override_settings(overrides, errors))
    values: dict[str, object] = {}
    for name, setting in settings.items():
        key = SCHEMA[name]
        try:
            checked = check_value(setting.value, key.hint, key.spec.metadata, setting.base)
        except InvalidValue as exc:
            errors.append(f"{setting.origin}: {name}: {exc}; expected {expected_form(key)}")
            continue
        if checked is not None:
            values[name] = checked
    first_wait = values.get("retry.first_wait", RetryConfig.first_wait)
    max_wait = values.get("retry.max_wait", RetryConfig.max_wait)
    if isinstance(first_wait, float) and isinstance(max_wait, float) and max_wait < first_wait:
        origin = settings.get("retry.max_wait", settings.get("retry.first_wait"))
        errors.append(
            f"{origin.origin if origin else COMMAND_LINE}: retry.max_wait: out of range: "
            f"{format_number(max_wait)} is less than retry.first_wait ({format_number(first_wait)}); "
            "expected a number >= retry.first_wait"
        )
    # A folder riffd makes (or a log file's folder) where a file stands in the way: said here, as
    # the setting it is, not as an errno when the daemon or a command first writes there.
    for name, setting in settings.items():
        value = values.get(name)
        if name == "log.file" and isinstance(value, str) and value:
            value = Path(value).expanduser().absolute()
        if name in ("state_dir", "backups.dir", "reports.dir", "log.file") and isinstance(
            value, Path
        ):
            blocked = file_in_the_way(value.parent if name == "log.file" else value)
            if name == "log.file" and value.is_dir():
                errors.append(f"{setting.origin}: {name}: {value}: a folder; expected a file")
            elif blocked is not None:
                errors.append(
                    f"{setting.origin}: {name}: {value}: "
                    + (f"{blocked} is a file" if blocked != value else "a file")
                    + ", not a folder; expected "
                    + ("a file in a folder" if name == "log.file" else "a folder")
                    + " riffd can make or use"
                )
    roots = values.get("roots")
    for number, root in enumerate(roots if isinstance(roots, tuple | list) else (), start=1):
        # (a folder not there yet is waited for; a file is never one)
        if isinstance(root, Path) and os.path.exists(root) and not root.is_dir():
            errors.append(
                f"{settings['roots'].origin}: roots: item {number}: {root} is not a folder; expected the folders "
                "holding Claude Code's project folders (its projects/)"
            )
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
        top[section] = cls(
            **{
                name[len(prefix) :]: value
                for name, value in values.items()
                if name.startswith(prefix)
            }
        )
    return Config(**top, source=source)


def _derive(key: Key, environ: dict[str, str], state_dir: Path) -> object:
    assert key.derive is not None
    derived = key.derive(environ, state_dir)
    if isinstance(derived, tuple):
        return tuple(Path(os.path.abspath(item)) for item in derived)
    assert isinstance(derived, Path)
    return Path(os.path.abspath(derived))
