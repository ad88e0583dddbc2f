"""The pieces of content in a transcript line, as the archive finds, keys and indexes them.

A line's pieces are each text, thinking, tool input and tool result block of `message.content` (or
the content string), a summary, and its `toolUseResult`. Each is found in the line's bytes exactly
as written, so cutting it out and putting it back gives the same bytes: where the value written as
Claude Code writes it (compact, as orjson writes it) occurs once in the line, there; otherwise (JSON
other tools wrote, with spaces or other escapes, or a value whose bytes occur twice in the line, as
a tool result's in its `toolUseResult`) at the place the line's own structure gives it
(`value_spans`). A piece is keyed by the first 8 bytes of the SHA-256 of its role and its normalised
text (trimmed, CRLF as LF, runs of spaces and tabs as one space; the exact bytes when it has no
text); two pieces are the same only when their bytes compare equal, never on the key alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
import orjson

from riffd.transcript.reader import BOM, parse_line
from riffd.transcript.sessions import prompt_text, shorten

MARK = b"\x00"  # where a piece seen before was cut out of a stored line (never in a JSON line)
# a piece without text shorter than this stays in its line without a content of its own
MIN_PIECE = 128
ROLES = {"user": 1, "assistant": 2, "system": 3, "summary": 4}
ROLE_NAMES = {value: name for name, value in ROLES.items()}
ROLE_TOKEN = "riffdrole{}"  # added to each indexed text: a role filter is one more FTS term
_SPACES = re.compile("  +")  # runs of 2+ spaces; a literal prefix, which `re` searches for fast


def normalise(text: str) -> str:
    """Return `text` as the archive compares it: trimmed, CRLF as LF, runs of spaces and tabs as one
    space (tabs made spaces first, then runs of spaces made one: twice as fast as one pattern for
    both on transcripts)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    if "\t" in text:
        text = text.replace("\t", " ")
    if "  " in text:
        text = _SPACES.sub(" ", text)
    return text.strip()


def text_of(value: Any) -> str:
    """Return the searchable text of a content value: strings, text blocks, tool inputs and
    results."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(filter(None, (text_of(part) for part in value)))
    if isinstance(value, dict):
        kind = value.get("type")
        if kind in ("text", None) and isinstance(value.get("text"), str):
            return str(value["text"])
        if kind == "thinking":
            return str(value.get("thinking", ""))
        if kind == "tool_use":
            return f"{value.get('name', '')} {orjson.dumps(value.get('input')).decode()}"
        if kind == "tool_result":
            return text_of(value.get("content"))
        if isinstance(value.get("content"), (str, list)):
            return text_of(value.get("content"))
        return ""
    return ""


def title_of(obj: dict[str, Any], kind: object) -> str | None:
    """The title a line of type `kind` gives its session (the last of its title keys holding a
    string), or None."""
    if kind not in ("custom-title", "ai-title", "summary"):
        return None
    found = None
    for key in ("customTitle", "aiTitle", "title", "summary"):
        if isinstance(obj.get(key), str):
            found = obj[key]
    return found


def epoch(stamp: object) -> int | None:
    """Given a line's `timestamp` (ISO-8601), return it in seconds since the epoch, or None."""
    if not isinstance(stamp, str):
        return None
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


@dataclass
class Piece:
    """A piece of content found in a line: where, its exact bytes, its text and role."""

    start: int
    exact: bytes
    text: str
    role: int


def pieces_of(raw: bytes, obj: dict[str, Any], role: int) -> list[Piece]:
    """Return the pieces of content of a parsed line, each found exactly once in its bytes, in line
    order, none overlapping another."""
    # (where in the line, key, value, text)
    found: list[tuple[tuple[str | int, ...], bytes, Any, str]] = []
    message = obj.get("message")
    if isinstance(message, dict) and "content" in message:
        content = message["content"]
        if isinstance(content, list):
            for number, block in enumerate(content):
                if not isinstance(block, dict):
                    continue
                if isinstance(block.get("text"), str):
                    found.append(
                        (
                            ("message", "content", number, "text"),
                            b'"text":',
                            block["text"],
                            block["text"],
                        )
                    )
                elif isinstance(block.get("thinking"), str):
                    found.append(
                        (
                            ("message", "content", number, "thinking"),
                            b'"thinking":',
                            block["thinking"],
                            block["thinking"],
                        )
                    )
                elif "input" in block:
                    found.append(
                        (
                            ("message", "content", number, "input"),
                            b'"input":',
                            block["input"],
                            text_of(block),
                        )
                    )
                elif block.get("type") == "tool_result" and "content" in block:
                    found.append(
                        (
                            ("message", "content", number, "content"),
                            b'"content":',
                            block["content"],
                            text_of(block["content"]),
                        )
                    )
        else:
            found.append((("message", "content"), b'"content":', content, text_of(content)))
    if obj.get("type") == "summary" and isinstance(obj.get("summary"), str):
        found.append((("summary",), b'"summary":', obj["summary"], obj["summary"]))
    # stored, not indexed: it repeats the tool_result block, which is indexed
    if "toolUseResult" in obj:
        found.append((("toolUseResult",), b'"toolUseResult":', obj["toolUseResult"], ""))
    pieces = []
    spans: dict[tuple[str | int, ...], tuple[int, int]] | None = None
    for where, key, value, text in found:
        try:
            exact = orjson.dumps(value)
        except TypeError:
            continue  # (a lone surrogate: it stays in its line as it is, unindexed, as SQLite takes only UTF-8)
        text = normalise(text)
        if not text and len(exact) < MIN_PIECE:
            continue
        needle = key + exact
        at = raw.find(needle)
        # written as Claude Code writes it, once: the fast way
        if at >= 0 and raw.find(needle, at + 1) < 0:
            pieces.append(Piece(at + len(key), exact, text, role))
            continue
        if spans is None:
            spans = value_spans(raw)
        start, end = spans.get(where, (0, 0))
        exact = raw[start:end]
        if end and (text or len(exact) >= MIN_PIECE) and _same_value(exact, value):
            pieces.append(Piece(start, exact, text, role))
    pieces.sort(key=lambda piece: piece.start)
    kept: list[Piece] = []
    for piece in pieces:
        if not kept or kept[-1].start + len(kept[-1].exact) <= piece.start:
            kept.append(piece)
    return kept


_BLOCK = {"text": None, "thinking": None, "input": None, "content": None}
# The values a piece can be: member names to look into (None: only the value's span), a list: each
# element so
_PIECE_PLACES: dict[str, Any] = {
    "message": {"content": [_BLOCK]},
    "summary": None,
    "toolUseResult": None,
}
# The standard library's C scanner: (value, end) of the JSON value at a place of a text
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_SPACE = re.compile("[ \t\n\r]+")


def _past_space(text: str, at: int) -> int:
    """The place of the first character from `at` on that is not JSON whitespace."""
    space = _SPACE.match(text, at)
    return at if space is None else space.end()


def value_spans(raw: bytes) -> dict[tuple[str | int, ...], tuple[int, int]]:
    """Given a line that holds a JSON object, return the byte span of each value a piece can be, by
    where it is (("message", "content", 2, "text"), ("toolUseResult",), ...); a member named twice:
    the last, as a parse takes. Empty when the line is not JSON the standard library's scanner
    takes."""
    # Latin-1 gives one character per byte, so places in the text are byte offsets: the scanner
    # needs only the structure, and the values it builds of non-ASCII strings are never used
    text = raw.decode("latin-1")
    found: dict[tuple[str | int, ...], tuple[int, int]] = {}
    try:
        _walk(
            text,
            _past_space(text, len(BOM) if raw.startswith(BOM) else 0),
            _PIECE_PLACES,
            (),
            found,
        )
    except (StopIteration, ValueError, IndexError, RecursionError):
        return {}
    return found


def _walk(
    text: str,
    at: int,
    places: Any,
    where: tuple[str | int, ...],
    found: dict[tuple[str | int, ...], tuple[int, int]],
) -> int:
    """Go over the JSON value at `at`, noting in `found` the span of each value `places` names;
    return its end."""
    if text[at] == "{" and isinstance(places, dict):
        at = _past_space(text, at + 1)
        closing = "}"
        while text[at] != closing:
            if text[at] != '"':
                raise ValueError("a member name expected")
            name, at = _SCAN(text, at)
            at = _past_space(text, at)
            if text[at] != ":":
                raise ValueError("':' expected")
            start = _past_space(text, at + 1)
            if name in places:
                end = _walk(text, start, places[name], (*where, name), found)
                found[(*where, name)] = (start, end)
            else:
                end = _SCAN(text, start)[1]
            at = _past_space(text, end)
            if text[at] == ",":
                at = _past_space(text, at + 1)
            elif text[at] != closing:
                raise ValueError("',' expected")
        return at + 1
    if text[at] == "[" and isinstance(places, list):
        at = _past_space(text, at + 1)
        number = 0
        while text[at] != "]":
            end = _walk(text, at, places[0], (*where, number), found)
            found[(*where, number)] = (at, end)
            number += 1
            at = _past_space(text, end)
            if text[at] == ",":
                at = _past_space(text, at + 1)
            elif text[at] != "]":
                raise ValueError("',' expected")
        return at + 1
    return int(_SCAN(text, at)[1])


def _same_value(exact: bytes, value: Any) -> bool:
    """Whether `exact` is JSON for `value` (a span found by structure, checked against the
    parse)."""
    try:
        return bool(orjson.loads(exact) == value)
    except orjson.JSONDecodeError:
        return False


def content_key(piece: Piece) -> int:
    """The first 8 bytes of the SHA-256 of the piece's role and normalised text (of its exact bytes
    without text), as a signed integer: the lookup key. Pieces are the same only when their bytes
    compare equal."""
    data = (
        bytes([piece.role]) + piece.text.encode("utf-8", "surrogatepass")
        if piece.text
        else b"\xff" + piece.exact
    )
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big", signed=True)


class Parsed(msgspec.Struct, array_like=True, gc=False):
    """What the archive takes from one line before it looks in the database (`parse`): its time
    (epoch seconds), role, session id, working folder, title, the prompt it gives a session without
    a title, its pieces, each (start, end, key, normalised text), in line order (None: the line is
    stored as written), and the slug that names its session's plan file. The same in this process
    and from an ingest's reader process (riffd.archive.ingest), which sends it as msgpack."""

    ts: int | None = None
    role: int = 0
    session: str | None = None
    project: str | None = None
    title: str | None = None
    prompt: str | None = None
    pieces: list[tuple[int, int, int, str]] | None = None
    slug: str | None = None  # the name of the session's plan file (riffd.claude_code.session_files)


def parse(raw: bytes, want_prompt: bool) -> Parsed:
    """Given a line, return what the archive takes from it; its prompt only when `want_prompt` (the
    first user prompt of a batch names a session without a title) and it is a prompt the user
    typed."""
    obj = parse_line(raw)
    if not isinstance(obj, dict):
        return Parsed()
    kind = obj.get("type")
    role = ROLES.get(kind, 0) if isinstance(kind, str) else 0
    session, project = obj.get("sessionId"), obj.get("cwd")
    prompt = None
    if want_prompt and kind == "user" and not obj.get("isMeta") and not obj.get("isSidechain"):
        prompt = prompt_text(obj.get("message"))
        prompt = shorten(prompt) if prompt else None
    pieces = None
    # a NUL byte of its own (not JSON): nothing is cut, so restore never confuses it
    if MARK not in raw:
        pieces = [
            (piece.start, piece.start + len(piece.exact), content_key(piece), piece.text)
            for piece in pieces_of(raw, obj, role)
        ]
    return Parsed(
        epoch(obj.get("timestamp")),
        role,
        _storable(session),
        _storable(project),
        _storable(title_of(obj, kind)),
        _storable(prompt),
        pieces,
        _storable(obj.get("slug")),
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _storable(value: object) -> str | None:
    """A string of the line for the archive's `files` row, or None: a lone surrogate (JSON may
    escape one, as a prompt cut in the middle of an emoji) made U+FFFD, since SQLite takes only
    UTF-8 (the line itself is stored as written; pieces with one are never cut, orjson refusing
    them)."""
    if not isinstance(value, str):
        return None
    return value if value.isascii() else _SURROGATE.sub("\ufffd", value)
