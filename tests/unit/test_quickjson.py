"""riffd.quickjson gives what `json` gives: the same text from `dumps` for the arguments the hooks
use, the same values from `loads`, and a ValueError wherever `json.loads` raises one."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import examples
from helpers.run import riffd_env
from riffd import quickjson

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


def same(left: Any, right: Any) -> bool:
    """Equal values, NaN equal to NaN (its own text)."""
    return json.dumps(left) == json.dumps(right) or (
        isinstance(left, float)
        and isinstance(right, float)
        and math.isnan(left)
        and math.isnan(right)
    )


@settings(max_examples=examples(300), deadline=None)
@given(value=VALUES, ensure_ascii=st.booleans(), sort_keys=st.booleans())
def test_dumps_writes_what_json_writes(value: Any, ensure_ascii: bool, sort_keys: bool) -> None:
    for separators in ((", ", ": "), (",", ":")):
        assert quickjson.dumps(
            value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators
        ) == json.dumps(
            value, ensure_ascii=ensure_ascii, sort_keys=sort_keys, separators=separators
        )
    assert quickjson.dumps(value) == json.dumps(value)


def test_dumps_calls_default_for_other_objects_and_refuses_them_without_it() -> None:
    value = {"b": {1, 2}, "a": b"x"}
    assert quickjson.dumps(value, sort_keys=True, default=repr) == json.dumps(
        value, sort_keys=True, default=repr
    )
    with pytest.raises(TypeError):
        quickjson.dumps(value)


@settings(max_examples=examples(300), deadline=None)
@given(value=VALUES, space=st.sampled_from(["", " ", "\n", " \t\r\n"]))
def test_loads_reads_what_json_reads(value: Any, space: str) -> None:
    text = space + json.dumps(value) + space
    assert same(quickjson.loads(text), json.loads(text))
    assert same(quickjson.loads(text.encode()), json.loads(text.encode()))


@pytest.mark.parametrize(
    "data", [b'{"a": 1, "b": {"c": 2, "c": 3}, "a": 4}', '{"a": 1, "a": 2}'.encode("utf-16")]
)
def test_loads_hands_every_object_s_pairs_to_a_hook_as_json_does(data: bytes) -> None:
    """Keys given twice reach the hook twice, innermost object first."""
    seen: list[Any] = []
    want: list[Any] = []
    got = quickjson.loads(data, object_pairs_hook=lambda pairs: seen.append(pairs) or pairs)
    assert got == json.loads(data, object_pairs_hook=lambda pairs: want.append(pairs) or pairs)
    assert seen == want and len(seen[-1]) == 2 + (b"c" in data)


@settings(max_examples=examples(500), deadline=None)
@given(
    data=st.binary(max_size=30)
    | st.text(alphabet='{}[]",:0123456789.eE+-tfnrul aINfyd\\é\t', max_size=30).map(str.encode)
)
def test_loads_refuses_what_json_refuses(data: bytes) -> None:
    for document in (data, data.decode("utf-8", "surrogateescape")):
        try:
            want: Any = json.loads(document)
        except ValueError:
            with pytest.raises(ValueError):
                quickjson.loads(document)
            continue
        assert same(quickjson.loads(document), want)


@pytest.mark.parametrize(
    "data", [b"\xef\xbb\xbf{}", '{"a": 1}'.encode("utf-16"), b'{"a":"\xed\xa0\x80"}', b"NaN"]
)
def test_loads_reads_other_encodings_and_lone_surrogates_as_json_does(data: bytes) -> None:
    assert same(quickjson.loads(data), json.loads(data))


def test_loads_refuses_bad_json_with_a_value_error_before_json_is_imported(
    tmp_path: Path,
) -> None:
    """The hooks import no `json`: the accelerator then failed with a SystemError on an
    unterminated string or a bad key (its error class lives in json.decoder), which the hooks
    printed as `SystemError: <_json.Scanner ...> returned NULL`."""
    script = (
        "import sys\n"
        "from riffd.quickjson import loads\n"
        "assert 'json' not in sys.modules\n"
        "for bad in ('{bad', '\"abc', '{\"a\" 1}', '[1, 2'):\n"
        "    try:\n"
        "        loads(bad)\n"
        "    except ValueError as error:\n"
        "        print(type(error).__name__, error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", script],
        capture_output=True,
        text=True,
        env=riffd_env(),
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "JSONDecodeError Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        "JSONDecodeError Unterminated string starting at: line 1 column 1 (char 0)",
        "JSONDecodeError Expecting ':' delimiter: line 1 column 6 (char 5)",
        "JSONDecodeError Expecting ',' delimiter: line 1 column 6 (char 5)",
    ]
