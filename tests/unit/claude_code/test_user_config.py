"""Claude Code's user configuration edited as text: adding riffd's server and taking it out again
gives back every byte, whatever else the file holds and however it is laid out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from riffd.claude_code.user_config import (
    ConfigFileError,
    stdio_server,
    user_config_path,
    with_server,
    without_server,
)

WHERE = Path("claude.json")
ENTRY = stdio_server(["/opt/riffd/bin/riffd", "mcp"])
scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
servers = st.dictionaries(
    st.text(min_size=1, max_size=6).filter(lambda name: name != "riffd"),
    st.fixed_dictionaries({"command": st.text(max_size=5)}),
    max_size=3,
)
documents = st.dictionaries(
    st.text(max_size=6).filter(lambda key: key != "mcpServers"), values, max_size=5
)


def _layouts(document: dict[str, Any]) -> list[str]:
    return [
        json.dumps(document, indent=2) + "\n",
        json.dumps(document, indent=4, ensure_ascii=False),
        json.dumps(document, separators=(",", ":")),
        json.dumps(document, indent="\t"),
    ]


@given(documents, servers | st.none())
def test_adding_then_removing_the_server_gives_back_every_byte(
    document: dict[str, Any], others: dict[str, Any] | None
) -> None:
    if others is not None:
        document = document | {"mcpServers": others}
    for text in _layouts(document):
        added = with_server(text, "riffd", ENTRY, WHERE)
        assert json.loads(added) == document | {"mcpServers": (others or {}) | {"riffd": ENTRY}}
        assert with_server(added, "riffd", ENTRY, WHERE) == added
        assert without_server(added, "riffd", WHERE, drop_empty=others is None) == text


def test_a_changed_entry_is_replaced_and_the_rest_kept() -> None:
    old = stdio_server(["/old/riffd", "mcp"])
    text = json.dumps({"a": 1, "mcpServers": {"riffd": old, "b": {}}, "z": [1]}, indent=2)
    updated = json.loads(with_server(text, "riffd", ENTRY, WHERE))
    assert updated == {"a": 1, "mcpServers": {"b": {}, "riffd": ENTRY}, "z": [1]}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1, 2]", "not a JSON object"),
        ('{"a": 1, "a": 2}', "appears twice"),
        ('{"mcpServers": []}', '"mcpServers" is not an object'),
        ('{"a": }', "not valid JSON"),
    ],
)
def test_a_file_riffd_cannot_edit_safely_is_refused(text: str, says: str) -> None:
    with pytest.raises(ConfigFileError, match=says):
        with_server(text, "riffd", ENTRY, WHERE)


def test_the_file_is_in_claude_config_dir_when_set() -> None:
    assert user_config_path({"CLAUDE_CONFIG_DIR": "/x/claude"}) == Path("/x/claude/.claude.json")
    assert user_config_path({}) == Path.home() / ".claude.json"
