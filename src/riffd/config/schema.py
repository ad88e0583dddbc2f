"""The config schema, read off the dataclasses: every dotted key and its type, how a value is
checked (with an error that names the problem and the expected form), and the commented example file
rendered from it."""

from __future__ import annotations

import dataclasses
import math
import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

from riffd.config.model import Config, Derive, plain_value


@dataclass(frozen=True)
class Key:
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


def _build_schema() -> tuple[dict[str, Key], dict[str, type]]:
    keys: dict[str, Key] = {}
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
                keys[name] = Key(name, section_field, section_hints[section_field.name])
        else:
            keys[config_field.name] = Key(config_field.name, config_field, hint)
    return keys, sections


SCHEMA, SECTIONS = _build_schema()


def _file_default(key: Key) -> object:
    """Return the key's default as the file spells it: "" / [] for a derived folder."""
    if key.spec.default is not dataclasses.MISSING:
        return plain_value(key.spec.default)
    return [] if get_origin(key.hint) is tuple else ""


def expected_form(key: Key) -> str:
    """Return the form a key's value must take, in words."""
    return _form(key.hint, key.spec.metadata, derived=key.derive is not None)


def _form(hint: Any, meta: Mapping[str, Any], *, derived: bool = False) -> str:
    bounds = " and ".join(
        f"{op} {format_number(meta[name])}"
        for name, op in (("gt", ">"), ("ge", ">="), ("le", "<="))
        if meta.get(name) is not None
    )
    bounds = f" {bounds}" if bounds else ""
    if hint is bool:
        return "true or false"
    if hint is int:
        return f"an integer{bounds}"
    if hint is float:
        return f"a number{bounds}"
    if hint is Path:
        return (
            'a folder path as a string ("" = the default)'
            if derived
            else "a folder path as a string"
        )
    if get_origin(hint) is Literal:
        return "one of " + ", ".join(f'"{choice}"' for choice in get_args(hint))
    if get_origin(hint) is tuple:
        item = get_args(hint)[0]
        if item is Path:
            return (
                "a list of folder paths ([] = the default)" if derived else "a list of folder paths"
            )
        if isinstance(item, type) and issubclass(item, Enum):
            return "a list of any of " + ", ".join(f'"{choice}"' for choice in _choices(item, meta))
        return "a list of strings"
    if meta.get("command"):
        return "a command line as a string, its words split as a shell does (quotes closed, no trailing \\)"
    return "a string"


def format_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _choices(enum: type[Enum], meta: Mapping[str, Any]) -> list[str]:
    allowed = meta.get("choices")
    return [str(member.value) for member in enum if allowed is None or member in allowed]


class InvalidValue(Exception):
    """One value that does not fit its key; the message is the problem, without the key or the
    expected form."""


def describe_value(value: object) -> str:
    """Return how a value looks in TOML terms, for an error message."""
    kind = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        tuple: "list",
        dict: "table",
    }.get(type(value), type(value).__name__)
    if isinstance(value, dict):
        return kind
    shown = (
        str(value).lower()
        if isinstance(value, bool)
        else repr(value)
        if isinstance(value, str)
        else str(value)
    )
    if isinstance(value, str):
        shown = '"' + shown[1:-1] + '"'
    return f"{kind} {shown[:80]}{'...' if len(shown) > 80 else ''}"


def check_value(value: object, hint: Any, meta: Mapping[str, Any], base: Path) -> object:
    """Return `value` converted to `hint`'s type (None for "" / [] of a derived folder); raise
    InvalidValue if it does not fit."""
    if hint is bool:
        if not isinstance(value, bool):
            raise InvalidValue(f"wrong type: {describe_value(value)}")
        return value
    if hint is int or hint is float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (hint is int and isinstance(value, float))
        ):
            raise InvalidValue(f"wrong type: {describe_value(value)}")
        number: int | float = value if hint is int else float(value)
        if not math.isfinite(number):
            raise InvalidValue(f"out of range: {number}")
        if (
            (meta.get("gt") is not None and not number > meta["gt"])
            or (meta.get("ge") is not None and not number >= meta["ge"])
            or (meta.get("le") is not None and not number <= meta["le"])
        ):
            raise InvalidValue(f"out of range: {format_number(number)}")
        return number
    if hint is Path:
        if not isinstance(value, str | os.PathLike):
            raise InvalidValue(f"wrong type: {describe_value(value)}")
        text = os.fspath(value)
        if not text:
            return None
        if "\0" in text:
            raise InvalidValue("bad value: the path contains a NUL character")
        path = Path(text).expanduser()
        # `..` and `.` collapsed, as riffd.archive.ingest.archive_key does: one transcript, one path
        # string
        return Path(os.path.normpath(path if path.is_absolute() else base / path))
    if get_origin(hint) is Literal:
        choices = [str(choice) for choice in get_args(hint)]
        if not isinstance(value, str):
            raise InvalidValue(f"wrong type: {describe_value(value)}")
        if value not in choices:
            raise InvalidValue(f"bad value: {describe_value(value)}{_did_you_mean(value, choices)}")
        return value
    if get_origin(hint) is tuple:
        return _check_list(value, get_args(hint)[0], meta, base)
    if not isinstance(value, str):
        raise InvalidValue(f"wrong type: {describe_value(value)}")
    if meta.get("command"):
        import shlex  # only for a command: every command loads the config

        try:
            shlex.split(value)
        # the daemon runs the command by these words: a line that does not split is none
        except ValueError as exc:
            raise InvalidValue(f"bad value: {describe_value(value)}: {str(exc).lower()}") from None
    return value


def _check_list(value: object, item_hint: Any, meta: Mapping[str, Any], base: Path) -> object:
    if not isinstance(value, list | tuple):
        raise InvalidValue(f"wrong type: {describe_value(value)}")
    if not value and item_hint is Path:
        return None
    problems: list[str] = []
    items: list[object] = []
    for position, item in enumerate(value, start=1):  # (counted from 1, as people count)
        if isinstance(item_hint, type) and issubclass(item_hint, Enum):
            choices = _choices(item_hint, meta)
            if not isinstance(item, str):
                problems.append(f"item {position}: wrong type: {describe_value(item)}")
            elif item not in choices:
                problems.append(
                    f"item {position}: bad value: {describe_value(item)}{_did_you_mean(item, choices)}"
                )
            elif item_hint(item) not in items:
                items.append(item_hint(item))
            continue
        try:
            checked = check_value(item, item_hint, {}, base)
        except InvalidValue as exc:
            problems.append(f"item {position}: {exc}")
            continue
        if checked is None:
            problems.append(f"item {position}: bad value: empty path")
        else:
            items.append(checked)
    if problems:
        raise InvalidValue(", ".join(problems))
    return tuple(items)


def _did_you_mean(name: str, candidates: list[str]) -> str:
    import difflib  # only for a bad value: every command loads the config

    close = difflib.get_close_matches(name, candidates, n=1)
    return f' (did you mean "{close[0]}"?)' if close else ""


def example_toml() -> str:
    """Return the commented example config (every key at its default, with its meaning), as `riffd
    config init` writes it and config/riffd.toml holds it."""
    import tomlkit  # only the example needs it: loading a config does not

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
        lines += _comment(f"Expected: {expected_form(key)}.")
        lines.append(f"{key.short} = {tomlkit.item(_file_default(key)).as_string()}")
    return "\n".join(lines) + "\n"


def _comment(text: str) -> list[str]:
    return textwrap.wrap(
        text, width=110, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False
    )
