"""Reading the few fields detection needs from a transcript line: fast, and exactly what a full
parse gives.

Detection needs a dozen short fields of each line (ids, parents, the type, the tool ids of the
content blocks), while most of a transcript's bytes are tool output and message text. `read_record`
decodes a line with msgspec into typed structs that name only those fields: the decoder checks every
other value's syntax but never builds it as a Python object, which is what makes `riffd scan` faster
than parsing every line with orjson.

Exactness: riffd's verdict on a line is the reference parse (`reader.parse_line`: orjson, then the
standard library for the valid JSON orjson refuses). The fast decoder takes a line only when it is
sure to agree:

- the decoder refuses anything that is not strict JSON (and a UTF-8 BOM, NaN, lone surrogate
  escapes, a nesting deeper than its limit): the reference decides those;
- it does not check the UTF-8 of values it skips, so a line that is not all ASCII must also decode
  as strict UTF-8, else the reference decides;
- each field is typed as detection expects it (a string, a boolean, null; content a string or a list
  of objects): any other value goes to the reference, so values of unusual types are exactly the
  reference's;
- duplicate keys: the last one wins, as in orjson, the standard library and JavaScript's JSON.parse.

`tests/test_records.py` checks the agreement on generated and mutated lines.
"""

from __future__ import annotations

from collections import deque
from itertools import filterfalse
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from riffd.transcript.reader import Unparsed, parse_line


class Block(msgspec.Struct, gc=False):
    """A content block: its type and the tool id it carries (`tool_use_id` UNSET when the key is
    absent)."""

    type: str | None = None
    id: str | None = None
    tool_use_id: str | UnsetType | None = UNSET


class Message(msgspec.Struct, gc=False):
    """A line's `message`: its id and its content (a string, or a list of blocks)."""

    id: str | None = None
    content: str | list[Block] | None = None


class Record(msgspec.Struct, gc=False):
    """The fields of a transcript line that detection reads. Built from the reference parse
    (`record_of`), a field may hold any JSON value, and `message` or a content item may be something
    other than a Message or a Block: callers check types, as they would on the parsed dict."""

    uuid: str | None = None
    parentUuid: str | None = None  # the transcript's own spelling
    leafUuid: str | None = None
    type: str | None = None
    message: Message | None = None
    isSidechain: bool | None = None
    sourceToolAssistantUUID: str | None = None
    subtype: str | None = None
    logicalParentUuid: str | None = None
    sessionId: str | None = None


# The decoder, and what it raises on a line it declines.
decode_record = msgspec.json.Decoder(Record).decode
DECLINED = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError)


def fast_record(raw: bytes) -> Record | None:
    """The line's Record from the fast decoder, or None when it declines the line (the reference
    decides)."""
    try:
        record = decode_record(raw)
        if not raw.isascii():
            raw.decode()  # the UTF-8 of skipped values: raises UnicodeDecodeError
    except DECLINED:
        return None
    return record


def fast_records(lines: list[bytes]) -> list[Record] | None:
    """`fast_record` of each line, the batch decoded at once (the scan's hot path); None when the
    decoder declines any line of it (then `read_record` takes the batch line by line)."""
    try:
        records = list(map(decode_record, lines))
        # the UTF-8 of skipped values
        deque(map(bytes.decode, filterfalse(bytes.isascii, lines)), 0)
    except DECLINED:
        return None
    return records


def record_of(obj: dict[str, Any]) -> Record:
    """The Record of a line parsed whole (the reference), with the same values the fast decoder
    gives."""
    message = obj.get("message")
    if type(message) is dict:
        content = message.get("content")
        if type(content) is list:
            content = [
                Block(item.get("type"), item.get("id"), item.get("tool_use_id", UNSET))
                if type(item) is dict
                else item
                for item in content
            ]
        message = Message(message.get("id"), content)
    return Record(
        obj.get("uuid"),
        obj.get("parentUuid"),
        obj.get("leafUuid"),
        obj.get("type"),
        message,
        obj.get("isSidechain"),
        obj.get("sourceToolAssistantUUID"),
        obj.get("subtype"),
        obj.get("logicalParentUuid"),
        obj.get("sessionId"),
    )


def read_record(raw: bytes) -> Record | Unparsed | None:
    """One line's bytes (no newline) -> its Record, None for a blank line, or Unparsed (kept and
    reported)."""
    record = fast_record(raw)
    if record is not None:
        return record
    obj = parse_line(raw)
    return record_of(obj) if isinstance(obj, dict) else obj
