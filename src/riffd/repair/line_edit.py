"""Editing one transcript line: new top-level fields or a new content list, changing as few bytes as
possible.

The planner (riffd.repair.planner) decides what a line becomes; this module makes its new bytes,
exact to the value: integers beyond 64 bits, lone surrogates and the spacing of an unchanged key
stay as written.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from riffd.transcript.reader import BOM


def edited_line(raw: bytes, content: list[Any] | None, fields: dict[str, Any]) -> bytes:
    """Return `raw` with its content list and/or top-level fields replaced, changing as few bytes as
    possible.

    Field-only changes are made in place on the bytes and accepted only if the result reads back as
    the intended object; anything else is re-serialised. Parsing here is exact (the standard
    library: orjson would turn integers beyond 64 bits into floats). The BOM, trailing spaces and
    newline are kept.
    """
    terminated = raw.endswith(b"\n")
    body = raw[:-1] if terminated else raw
    bom = BOM if body.startswith(BOM) else b""
    body = body[len(bom) :]
    stripped = body.rstrip()
    trailing = body[len(stripped) :]
    original = _exact(stripped)
    intended = dict(original)
    intended.update(fields)
    if content is not None:
        intended["message"] = dict(original["message"], content=content)
    new_body = _substitute_fields(stripped, original, fields) if content is None else None
    if new_body is None or _exact(new_body) != intended:
        new_body = _serialise(intended)
        if _exact(new_body) != intended:
            raise ValueError("re-serialised line does not read back as intended")
    return bom + new_body + trailing + (b"\n" if terminated else b"")


def _exact(body: bytes) -> dict[str, Any]:
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError("planner asked to edit a line that is not a JSON object")
    return value


def _substitute_fields(
    body: bytes, original: dict[str, Any], fields: dict[str, Any]
) -> bytes | None:
    for name, value in fields.items():
        old = original.get(name)
        if not isinstance(old, str):
            return None
        key, old_value = re.escape(name.encode()), re.escape(_json_str(old))
        pattern = re.compile(rb'(?<!\\)("' + key + rb'"\s*:\s*)"' + old_value + rb'"')
        matches = list(pattern.finditer(body))
        if len(matches) != 1:
            return None
        new_value = b"null" if value is None else b'"' + _json_str(value) + b'"'
        found = matches[0]
        # Keep the key and the spacing around its colon as written: only the value changes.
        body = body[: found.start()] + found.group(1) + new_value + body[found.end() :]
    return body


def _json_str(text: str) -> bytes:
    return orjson.dumps(text)[1:-1]


def _serialise(obj: dict[str, Any]) -> bytes:
    try:
        return orjson.dumps(obj)
    # integers beyond 64 bits or lone surrogates: the standard library writes them exactly
    except TypeError:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate cannot be UTF-8: escape non-ASCII instead
            return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode("ascii")
