"""Characters in a line that are not text: what older clients and other readers choke on.

Claude Code reads bytes that are not UTF-8 as U+FFFD, and sends a lone surrogate escape or a NUL
character as it is; older clients were refused by the API for them (`no low surrogate in string`),
or cut the body at a NUL. `character_damage` names them in a line's bytes; `text_repaired` writes
U+FFFD in their place (what current clients send), changing no other byte. Escapes are read left to
right, so an escaped backslash is never taken for the start of one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import compress, repeat
from operator import attrgetter, eq
from typing import Any

from riffd.transcript.findings import FindingClass

NUL_ESCAPE = b"\\u0000"
_NUL_SEARCH = re.compile(re.escape(NUL_ESCAPE)).search
REPLACEMENT = "\ufffd".encode()
_TYPE = attrgetter("type")
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)


def has_nul_escape(lines: Sequence[bytes], records: Sequence[Any]) -> bool:
    """Whether a user line of `lines` (its fast-decoded `records` say which) holds the escape of a
    NUL character: the one damage of this module the fast decoder takes (the others make it decline
    the line). Only user lines: their tool results are what older clients cut at a NUL, and
    searching every byte of a file costs a fifth of a scan. A regular expression finds the escape a
    third faster than `in` (CPython's substring search skips poorly on it)."""
    users = compress(lines, map(eq, map(_TYPE, records), repeat("user")))
    return any(map(_NUL_SEARCH, users))


def bad_escapes(raw: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The (start, end) byte spans of the lone surrogate escapes and of the NUL escapes in `raw`."""
    lone: list[tuple[int, int]] = []
    nul: list[tuple[int, int]] = []
    high: tuple[int, int] | None = None  # a high surrogate escape waiting for its low half
    for found in _ESCAPE.finditer(raw):
        code = int(found.group(1), 16) if found.group(1) else None
        if high is not None and not (
            code is not None and 0xDC00 <= code <= 0xDFFF and found.start() == high[1]
        ):
            lone.append(high)
        elif high is not None:  # the low half of the pair
            high = None
            continue
        high = None
        if code is None:
            continue
        if 0xD800 <= code <= 0xDBFF:
            high = found.span()
        elif 0xDC00 <= code <= 0xDFFF:
            lone.append(found.span())
        elif code == 0:
            nul.append(found.span())
    if high is not None:
        lone.append(high)
    return lone, nul


def character_damage(raw: bytes, user: bool) -> list[tuple[FindingClass, str]]:
    """The character damage of one line's bytes: (class, what it is) for each kind found; NUL
    characters only in a `user` line (see has_nul_escape)."""
    found: list[tuple[FindingClass, str]] = []
    if not raw.isascii():
        try:
            raw.decode()
        except UnicodeDecodeError as exc:
            found.append(
                (
                    FindingClass.INVALID_UTF8,
                    f"bytes that are not UTF-8 (the first at byte {exc.start} of the line)",
                )
            )
    if b"\\u" in raw:
        lone, nul = bad_escapes(raw)
        if lone:
            found.append(
                (FindingClass.LONE_SURROGATE, f"{len(lone)} lone surrogate escape(s) (\\ud83d...)")
            )
        if nul and user:
            found.append((FindingClass.NUL_CHARACTER, f"{len(nul)} NUL character(s) (\\u0000)"))
    return found


def text_repaired(raw: bytes, classes: frozenset[FindingClass]) -> bytes:
    """`raw` with each damage of `classes` replaced by U+FFFD: invalid UTF-8 as Python's (and Claude
    Code's) decoder reads it, a lone surrogate or NUL escape by the character's UTF-8 bytes. Every
    other byte stays."""
    if FindingClass.INVALID_UTF8 in classes and not raw.isascii():
        raw = raw.decode("utf-8", "replace").encode()
    wanted = []
    if b"\\u" in raw and classes & {FindingClass.LONE_SURROGATE, FindingClass.NUL_CHARACTER}:
        lone, nul = bad_escapes(raw)
        wanted = (lone if FindingClass.LONE_SURROGATE in classes else []) + (
            nul if FindingClass.NUL_CHARACTER in classes else []
        )
    for start, end in sorted(wanted, reverse=True):
        raw = raw[:start] + REPLACEMENT + raw[end:]
    return raw
