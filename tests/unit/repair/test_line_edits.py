"""Editing one line: the smallest byte change, and never a silent change of any other value."""

from __future__ import annotations

import json

import pytest

from riffd.repair.line_edit import edited_line

PARENT = "11111111-1111-4111-8111-111111111111"
NEW_PARENT = "22222222-2222-4222-8222-222222222222"


def test_repoint_changes_only_the_parent_value() -> None:
    raw = (
        b'{"parentUuid":"%s","type":"assistant","uuid":"u","message":{"content":"caf\xc3\xa9 \\u00e9"}}\n'
        % (PARENT.encode())
    )
    edited = edited_line(raw, None, {"parentUuid": NEW_PARENT})
    assert edited == raw.replace(PARENT.encode(), NEW_PARENT.encode())


def test_repoint_to_null_for_a_new_root() -> None:
    raw = b'{"parentUuid":"%s","uuid":"u"}' % PARENT.encode()
    assert edited_line(raw, None, {"parentUuid": None}) == b'{"parentUuid":null,"uuid":"u"}'


def test_a_nested_lookalike_key_is_not_edited() -> None:
    """A tool result that holds a transcript line as structured data has its own "parentUuid"
    key."""
    raw = b'{"toolUseResult":{"parentUuid":"%s"},"parentUuid":"%s","uuid":"u"}\n' % (
        PARENT.encode(),
        PARENT.encode(),
    )
    edited = json.loads(edited_line(raw, None, {"parentUuid": NEW_PARENT}))
    assert edited == {
        "toolUseResult": {"parentUuid": PARENT},
        "parentUuid": NEW_PARENT,
        "uuid": "u",
    }


@pytest.mark.parametrize(
    "extra",
    [
        b'"big":123456789012345678901234567890',
        b'"lone":"\\ud800 x"',
        b'"float":1.0000000000000002',
    ],
)
def test_edited_lines_keep_values_orjson_would_change(extra: bytes) -> None:
    raw = (
        b'{"parentUuid":"%s","uuid":"u","message":{"content":[{"type":"tool_result","tool_use_id":"a"},'
        % (PARENT.encode())
        + b'{"type":"text","text":"t"}]},'
        + extra
        + b"}\n"
    )
    original = json.loads(raw)
    edited = edited_line(raw, [{"type": "text", "text": "t"}], {"parentUuid": NEW_PARENT})
    assert edited.endswith(b"\n") and edited.count(b"\n") == 1
    edited.decode("utf-8")  # always valid UTF-8, even with a lone surrogate escape in the line
    expected = dict(
        original, parentUuid=NEW_PARENT, message={"content": [{"type": "text", "text": "t"}]}
    )
    assert json.loads(edited) == expected


def test_bom_and_trailing_carriage_return_are_kept() -> None:
    raw = b'\xef\xbb\xbf{"parentUuid":"%s","uuid":"u"}\r\n' % PARENT.encode()
    edited = edited_line(raw, None, {"parentUuid": NEW_PARENT})
    assert edited == raw.replace(PARENT.encode(), NEW_PARENT.encode())
