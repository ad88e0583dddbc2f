"""JSON for the hooks, without the cost of importing `json`.

`json` imports `re` (and through it `enum`, `functools` and more): about 5 ms of a hook's start on
an interpreter whose site has not loaded them already, at every tool call and every session start.
Its speed comes from CPython's `_json` accelerator, which needs none of that, so `loads` and `dumps`
call it directly and give what `json.loads` and `json.dumps` give for the same arguments, errors
as ValueError included (an error message is built by `json.decoder`, imported then). An interpreter
without `_json` gets `json` itself.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

try:
    from _json import encode_basestring, encode_basestring_ascii, make_encoder, make_scanner

    ACCELERATED = True
except ImportError:  # pragma: no cover - an interpreter without the accelerator
    ACCELERATED = False

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _Context:
    """What `_json.make_scanner` reads of a JSONDecoder: `json.loads`'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


# (the stub wants a JSONDecoder; the scanner reads only the attributes _Context has)
_scan = make_scanner(_Context()) if ACCELERATED else None  # type: ignore[arg-type]


def loads(
    data: str | bytes, *, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None
) -> Any:
    """Parse one JSON document, as `json.loads` does (with `object_pairs_hook`, as it does with
    it); raise ValueError (UnicodeDecodeError for bytes that are not UTF-8) when it is not one."""
    if _scan is None or (
        isinstance(data, bytes) and (data[:3] == b"\xef\xbb\xbf" or b"\x00" in data[:4])
    ):
        import json  # (byte-order marks, UTF-16 and UTF-32: json guesses the encoding)

        return json.loads(data, object_pairs_hook=object_pairs_hook)
    text = data.decode("utf-8", "surrogatepass") if isinstance(data, bytes) else data
    start = len(text) - len(text.lstrip(_WHITESPACE))
    scan = _scan
    if object_pairs_hook is not None:
        context = _Context()
        context.object_pairs_hook = object_pairs_hook  # type: ignore[assignment]
        scan = make_scanner(context)  # type: ignore[arg-type]
    try:
        value, end = scan(text, start)
    except StopIteration as stop:
        raise ValueError(f"Expecting value: char {stop.value}") from None
    except SystemError:
        # The accelerator words most errors (an unterminated string, a key that is not one) with
        # json.decoder's JSONDecodeError, which it finds only once imported, failing without an
        # exception before: json itself then gives the error as json.loads does.
        import json

        return json.loads(data, object_pairs_hook=object_pairs_hook)
    if end != len(text) and text[end:].strip(_WHITESPACE):
        raise ValueError(f"Extra data: char {end}")
    return value


def dumps(
    value: Any,
    *,
    ensure_ascii: bool = True,
    sort_keys: bool = False,
    separators: tuple[str, str] = (", ", ": "),
    default: Callable[[Any], Any] | None = None,
) -> str:
    """Return `value` as JSON text, as `json.dumps` with these arguments does."""
    if not ACCELERATED:  # pragma: no cover - an interpreter without the accelerator
        import json

        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            sort_keys=sort_keys,
            separators=separators,
            default=default,
        )
    encode_text = encode_basestring_ascii if ensure_ascii else encode_basestring
    if isinstance(value, str):
        return str(encode_text(value))
    encode = make_encoder(
        {},
        default if default is not None else _not_serializable,
        encode_text,
        None,
        separators[1],
        separators[0],
        sort_keys,
        False,
        True,
    )
    return "".join(encode(value, 0))


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
