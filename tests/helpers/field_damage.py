"""Damage injectors for the 13 kinds of damage the field reports (issue 28), built from real
transcripts, each with the ideal repair.

Each injector takes the lines of a healthy transcript (bytes, with their newlines, as stored) and returns a
`Damaged28`: the damaged lines, which of them are the damage, and the ideal repaired file (the smallest edit
by the rules of issue 28). Injection points are chosen from structure alone, judged the way Claude Code
2.1.332 loads a file (`ClientView`, measured with the real client: see notes.md), never by running riffd's
detection on the result. New uuids and ids are derived from the input bytes, so a damaged file is reproducible.

Stdlib only on purpose: it does not depend on riffd's index, whose view of these files is what is
tested (the same `choose` convention as helpers.damage).

A test per kind: build, scan, fix, then check that every line of `damaged.lines` whose index is not in
`damaged.touched` is in the repaired file byte for byte and in order, and (for the kinds riffd must repair)
that the repaired file equals `damaged.ideal`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import uuid as uuid_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

BRIDGE_SECONDS = (
    5.0  # Claude Code 2.1.332 bridges a missing parent only to a line at most this much older
)
CONVERSATION_TYPES = (
    "user",
    "assistant",
    "system",
    "attachment",
)  # progress lines are chain links, not bridges
ENCRYPTED_SAMPLE = (
    "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2QS"  # shape of the docs' sample
)
FIELDS_OF_NEIGHBOURS = (
    "isSidechain",
    "userType",
    "cwd",
    "sessionId",
    "version",
    "gitBranch",
    "slug",
)

# Which clients a kind breaks (the wording riffd's findings should use).
BREAKS_CURRENT = "breaks resume in current clients"
BREAKS_OLDER = "current clients cope; older clients and other readers fail"
HARMLESS = "current clients cope; other readers see a repeated line"


class NoPoint(LookupError):
    """The transcript has no place where this damage can be injected cleanly."""


@dataclass
class Damaged28:
    """A damaged file, what in it is damage, and what the ideal repair must produce.

    `lines`: the damaged file. `damage`: 0-based indexes into `lines` of the lines that are the damage (new or
    changed). `touched`: indexes into `lines` the ideal repair may change or remove (the damage plus lines it
    re-points); every other line must stay byte for byte. `ideal`: the ideal repaired file. `required`: True when
    riffd must repair this kind (the client cannot resume), False for the optional class. `breaks`: which clients
    it breaks. `marks`: named line indexes (into `lines`) a test wants to look at.
    """

    kind: str
    lines: list[bytes]
    damage: list[int]
    touched: list[int]
    ideal: list[bytes]
    required: bool
    breaks: str
    description: str
    marks: dict[str, int] = field(default_factory=dict)

    @property
    def data(self) -> bytes:
        """The damaged file's bytes."""
        return b"".join(self.lines)

    @property
    def ideal_data(self) -> bytes:
        """The ideal repaired file's bytes."""
        return b"".join(self.ideal)


# --- how Claude Code 2.1.332 loads a file ---------------------------------------------------------


def client_parse(raw: bytes) -> dict[str, Any] | None:
    """One line as the client reads it: invalid UTF-8 as U+FFFD, JSON that does not parse skipped (None).
    Lone surrogate escapes parse (JSON.parse takes them, as Python's json does)."""
    text = raw.rstrip(b"\n").decode("utf-8", "replace")
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_ts(value: Any) -> float | None:
    """An ISO-8601 timestamp in seconds, None when absent or not one."""
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stamp(seconds: float) -> str:
    """Seconds since the epoch as Claude Code writes a timestamp (milliseconds, Z)."""
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class ClientView:
    """The conversation Claude Code 2.1.332 loads from a file (measured with the real client, notes.md):

    - a line that does not parse is skipped whole; invalid UTF-8 reads as U+FFFD;
    - a uuid is loaded once: the LAST line with it wins (a later copy replaces an earlier one);
    - the walk starts at the newest user/assistant line (file order, not a sidechain) and follows parentUuid;
      progress lines are followed like any line;
    - a parentUuid naming no loaded line is bridged to the newest line by timestamp (user, assistant, system,
      attachment: not progress) that is not on the chain yet and at most 5 s older than the orphan; of equal
      timestamps the first in file order; none within 5 s: the walk stops there (the history is cut).
    """

    def __init__(
        self,
        lines: Sequence[bytes],
        bridge: bool = True,
        records: Sequence[dict[str, Any] | None] | None = None,
    ) -> None:
        self.lines = list(lines)
        self.bridge = bridge
        # (`records`: the lines as client_parse gives them, when known; never changed in place)
        self.records = (
            list(records) if records is not None else [client_parse(raw) for raw in self.lines]
        )
        self.by_uuid: dict[str, int] = {}
        for line, record in enumerate(self.records):
            if record and isinstance(record.get("uuid"), str):
                self.by_uuid[record["uuid"]] = line  # the last one wins
        self.leaf = self._leaf()
        self.chain: list[int] = []  # newest first
        self.bridges: dict[int, int] = {}  # orphan line -> line it was bridged to
        self.cut_at: int | None = None  # the line whose parent was missing and not bridged
        self._walk()
        self.on_chain = set(self.chain)

    def without(self, *dropped: int, bridge: bool = True) -> ClientView:
        """The file with lines `dropped` taken out (its lines not parsed again)."""
        keep = [number for number in range(len(self.lines)) if number not in dropped]
        return ClientView(
            [self.lines[number] for number in keep],
            bridge,
            [self.records[number] for number in keep],
        )

    def replaced(self, line: int, raw: bytes, bridge: bool = True) -> ClientView:
        """The file with line `line` written as `raw` (the others not parsed again)."""
        lines, records = list(self.lines), list(self.records)
        lines[line], records[line] = raw, client_parse(raw)
        return ClientView(lines, bridge, records)

    def record(self, line: int) -> dict[str, Any]:
        return self.records[line] or {}

    def uuid(self, line: int) -> str:
        value = self.record(line).get("uuid")
        assert isinstance(value, str), f"line {line + 1} has no uuid"
        return value

    def ts(self, line: int) -> float | None:
        return parse_ts(self.record(line).get("timestamp"))

    def is_message(self, line: int) -> bool:
        record = self.record(line)
        return record.get("type") in ("user", "assistant") and isinstance(
            record.get("message"), dict
        )

    def content(self, line: int) -> list[Any]:
        message = self.record(line).get("message")
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, list) else []

    def block_types(self, line: int) -> list[str]:
        return [str(b.get("type")) for b in self.content(line) if isinstance(b, dict)]

    def message_id(self, line: int) -> str | None:
        message = self.record(line).get("message")
        value = message.get("id") if isinstance(message, dict) else None
        return value if isinstance(value, str) else None

    def is_prompt(self, line: int) -> bool:
        """A typed prompt: a user line with string content or only text blocks, not meta."""
        record = self.record(line)
        if record.get("type") != "user" or record.get("isMeta") or record.get("isCompactSummary"):
            return False
        content = (record.get("message") or {}).get("content")
        return isinstance(content, str) or (
            bool(content) and all(t == "text" for t in self.block_types(line))
        )

    def children(self, line: int) -> list[int]:
        me = self.record(line).get("uuid")
        return [
            kid
            for kid, rec in enumerate(self.records)
            if rec and me and rec.get("parentUuid") == me
        ]

    def _leaf(self) -> int | None:
        for line in range(len(self.records) - 1, -1, -1):
            record = self.records[line]
            if record and self.is_message(line) and record.get("isSidechain") is not True:
                return line
        return None

    def rule_target(self, orphan: int) -> int | None:
        """riffd's re-point target for an orphan (issue 28, kind 7): the client's bridge candidate with no age
        limit, among the lines not on the chain above the orphan; None when there is none or two share the
        newest timestamp. Judge it on a view made with bridge=False, so the chain stops at the orphan."""
        candidates = self.bridge_candidates(orphan, self.on_chain, window=None)
        if not candidates:
            return None
        best = candidates[0]
        if len([c for c in candidates if self.ts(c) == self.ts(best)]) > 1:
            return None
        return best

    def bridge_candidates(
        self, orphan: int, exclude: set[int], window: float | None = BRIDGE_SECONDS
    ) -> list[int]:
        """The lines the client would bridge `orphan` to, best first: the newest by timestamp not later than the
        orphan (within `window` seconds; None: any age), not in `exclude`, conversation lines only."""
        when = self.ts(orphan)
        if when is None:
            return []
        found = []
        for line, record in enumerate(self.records):
            if (
                not record
                or line in exclude
                or line == orphan
                or record.get("type") not in CONVERSATION_TYPES
            ):
                continue
            if (
                record.get("isSidechain") is True
                or self.by_uuid.get(record.get("uuid", "")) != line
            ):
                continue
            other = self.ts(line)
            if other is None or other > when or (window is not None and when - other > window):
                continue
            found.append((-other, line))
        return [line for _, line in sorted(found)]

    def _walk(self) -> None:
        line = self.leaf
        seen: set[int] = set()
        while line is not None and line not in seen:
            seen.add(line)
            self.chain.append(line)
            parent = self.record(line).get("parentUuid")
            if not isinstance(parent, str):
                return
            if parent in self.by_uuid:
                line = self.by_uuid[parent]
                continue
            candidates = self.bridge_candidates(line, seen) if self.bridge else []
            if not candidates:
                self.cut_at = line
                return
            self.bridges[line] = candidates[0]
            line = candidates[0]


# --- writing lines --------------------------------------------------------------------------------


def dumps(record: dict[str, Any]) -> bytes:
    """One compact JSON line with its newline, written the way Claude Code writes (UTF-8, no escapes)."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def set_parent(raw: bytes, parent: str | None) -> bytes:
    """Return `raw` with only the value of its parentUuid changed (every other byte kept)."""
    new_value = b"null" if parent is None else b'"' + parent.encode() + b'"'
    edited, count = re.subn(
        rb'("parentUuid"\s*:\s*)(?:null|"[^"]*")', lambda m: m.group(1) + new_value, raw, count=1
    )
    assert count == 1, "expected a parentUuid field"
    return edited


def seed_of(lines: Sequence[bytes]) -> str:
    return hashlib.sha256(b"".join(lines)).hexdigest()


def new_uuid(lines: Sequence[bytes], salt: str) -> str:
    return str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, f"riffd-i28:{seed_of(lines)}:{salt}"))


def new_id(lines: Sequence[bytes], prefix: str, salt: str) -> str:
    """An id shaped like Anthropic's (toolu_01..., srvtoolu_01..., msg_01...), from the file's bytes."""
    return prefix + "01Riffd" + hashlib.sha256(f"{seed_of(lines)}:{salt}".encode()).hexdigest()[:17]


def neighbours(record: dict[str, Any]) -> dict[str, Any]:
    return {name: record[name] for name in FIELDS_OF_NEIGHBOURS if name in record}


def _pick(points: Sequence[Any], choose: Callable[[Sequence[Any]], Any] | None) -> Any:
    if not points:
        raise NoPoint
    return choose(points) if choose else points[len(points) // 2]


Chooser = Callable[[Sequence[Any]], Any] | None


def _assistant_like(
    view: ClientView, line: int, content: list[Any], salt: str, parent: str, ts: float
) -> dict[str, Any]:
    """A new assistant line of the same API message as `line` (same message.id and requestId)."""
    record = dict(view.record(line))
    record["parentUuid"] = parent
    record["message"] = dict(record["message"], content=content)
    record["uuid"] = new_uuid(view.lines, salt)
    record["timestamp"] = stamp(ts)
    return record


# --- 1a / 1b: server tools ------------------------------------------------------------------------


def server_tool_points(view: ClientView) -> list[int]:
    """Assistant lines on the chain (text or thinking only) that are followed, in their API message, by a
    tool_use line hanging from them: a server tool call can sit between the two."""
    points = []
    for line in view.chain:
        if (
            view.record(line).get("type") != "assistant"
            or view.record(line).get("isSidechain") is True
        ):
            continue
        if not view.block_types(line) or set(view.block_types(line)) - {"text", "thinking"}:
            continue
        kids = [kid for kid in view.children(line) if kid in view.on_chain]
        same_message = len(kids) == 1 and view.message_id(kids[0]) == view.message_id(line)
        if same_message and "tool_use" in view.block_types(kids[0]):
            points.append(line)
    return sorted(points)


def server_blocks(
    lines: Sequence[bytes], name: str, salt: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A server_tool_use block and its result, shaped as the Messages API returns them (platform.claude.com docs:
    web search tool, advisor tool; the advisor's result content is {type: advisor_result, text})."""
    tool_id = new_id(lines, "srvtoolu_", salt)
    use: dict[str, Any]
    result: dict[str, Any]
    if name == "advisor":
        use = {"type": "server_tool_use", "id": tool_id, "name": "advisor", "input": {}}
        result = {
            "type": "advisor_tool_result",
            "tool_use_id": tool_id,
            "content": {
                "type": "advisor_result",
                "text": "Check the failing test first; the fix belongs in the parser, not the caller.",
            },
        }
    else:
        use = {
            "type": "server_tool_use",
            "id": tool_id,
            "name": "web_search",
            "input": {"query": "elixir credo dialyxir setup mix.exs"},
        }
        result = {
            "type": "web_search_tool_result",
            "tool_use_id": tool_id,
            "content": [
                {
                    "type": "web_search_result",
                    "url": "https://hexdocs.pm/credo/installation.html",
                    "title": "Installation - Credo",
                    "page_age": "March 3, 2026",
                    "encrypted_content": ENCRYPTED_SAMPLE,
                }
            ],
        }
    return use, result


def _server_lines(
    lines: Sequence[bytes], choose: Chooser, name: str, which: tuple[str, ...]
) -> tuple[ClientView, int, list[bytes], list[bytes]]:
    """Insert the server tool lines named by `which` ("use", "result") after a chosen text line of an assistant
    message, chained, the tool_use line re-pointed below them. Returns the view, the point, the new file and
    the new lines."""
    view = ClientView(lines)
    point = _pick(server_tool_points(view), choose)
    use, result = server_blocks(view.lines, name, f"{name}-{point}")
    kid = next(k for k in view.children(point) if k in view.on_chain)
    start = view.ts(point) or 0.0
    new_lines: list[bytes] = []
    parent = view.uuid(point)
    for number, part in enumerate(which):
        block = use if part == "use" else result
        record = _assistant_like(
            view, point, [block], f"{name}-{part}-{point}", parent, start + 0.1 * (number + 1)
        )
        new_lines.append(dumps(record))
        parent = record["uuid"]
    out = [*view.lines[: point + 1], *new_lines, *view.lines[point + 1 :]]
    kid_at = kid + len(new_lines) if kid > point else kid
    out[kid_at] = set_parent(out[kid_at], parent)
    return view, point, out, new_lines


def with_server_tool(
    lines: Sequence[bytes], choose: Chooser = None, name: str = "advisor"
) -> Damaged28:
    """Not damage: a server tool call and its result as Claude Code writes them (one line per block, one API
    message). The control for 1a/1b: the client must send it as it is."""
    _view, point, out, _new = _server_lines(lines, choose, name, ("use", "result"))
    return Damaged28(
        f"server_tool_pair_{name}",
        out,
        [],
        [],
        out,
        False,
        "",
        "a healthy server tool pair",
        {"point": point, "use": point + 1, "result": point + 2},
    )


def inject_server_use_without_result(
    lines: Sequence[bytes], choose: Chooser = None, name: str = "web_search"
) -> Damaged28:
    """1a: a server_tool_use line whose result line never made it to the file (the process stopped between the
    two streamed blocks). Current clients drop the orphan use before sending."""
    view, point, out, _new = _server_lines(lines, choose, name, ("use",))
    return Damaged28(
        "1a",
        out,
        [point + 1],
        [point + 1, point + 2],
        view.lines,
        False,
        BREAKS_OLDER,
        f"server_tool_use ({name}) without its result: drop the use line, re-point its child",
        {"point": point, "use": point + 1},
    )


def inject_server_result_without_use(
    lines: Sequence[bytes],
    choose: Chooser = None,
    name: str = "advisor",
    split: bool = False,
    between: str = "user",
    repair: str = "drop",
) -> Damaged28:
    """1b: an advisor_tool_result whose server_tool_use is not before it in the same API message.

    split=False: the use line is gone (compaction dropped it, #56515). split=True: both lines are there but a
    user line written between them (a queued prompt or hook notice, #65938 #92509) splits the message in two,
    the result opening the second. With the advisor on, the API answers 400 and the client (2.1.332) repeats it:
    the session is dead. The ideal repair drops the orphan result (and, split, the use left unanswered);
    split with repair="reorder", it instead re-points three parentUuids so the chain reads use, result, the
    interleaved line, the rest (nothing removed). between="system": the interleaved line is a local-command
    system line (/usage) instead of a user line."""
    if not split:
        view, point, out, _new = _server_lines(lines, choose, name, ("result",))
        return Damaged28(
            "1b",
            out,
            [point + 1],
            [point + 1, point + 2],
            view.lines,
            True,
            BREAKS_CURRENT,
            f"{name}_tool_result without its server_tool_use: drop the result line, re-point its child",
            {"point": point, "result": point + 1},
        )
    view, point, out, _new = _server_lines(lines, choose, name, ("use", "result"))
    use_at, result_at = point + 1, point + 2
    use_record = client_parse(out[use_at]) or {}
    if between == "system":
        notice = {
            "parentUuid": use_record["uuid"],
            **neighbours(use_record),
            "type": "system",
            "subtype": "local_command",
            "content": "<command-name>/usage</command-name>\n"
            "            <command-message>usage</command-message>\n            <command-args></command-args>",
            "level": "info",
            "timestamp": stamp((view.ts(point) or 0.0) + 0.15),
            "uuid": new_uuid(view.lines, f"split-notice-{point}"),
            "isMeta": False,
        }
    else:
        notice = {
            "parentUuid": use_record["uuid"],
            **neighbours(use_record),
            "type": "user",
            "message": {
                "role": "user",
                "content": [{"type": "text", "text": "also check the README while you are at it"}],
            },
            "uuid": new_uuid(view.lines, f"split-notice-{point}"),
            "timestamp": stamp((view.ts(point) or 0.0) + 0.15),
        }
    out.insert(result_at, dumps(notice))
    result_at += 1
    out[result_at] = set_parent(out[result_at], notice["uuid"])
    # ideal: the notice stays (it is a real prompt); the use and the result go; what hung from them is re-pointed
    result_uuid = (client_parse(out[result_at]) or {})["uuid"]
    kid_at = next(
        at
        for at, raw in enumerate(out)
        if (client_parse(raw) or {}).get("parentUuid") == result_uuid
    )
    ideal = list(out)
    if repair == "reorder":
        ideal[result_at] = set_parent(ideal[result_at], use_record["uuid"])
        ideal[result_at - 1] = set_parent(ideal[result_at - 1], result_uuid)
        ideal[kid_at] = set_parent(ideal[kid_at], notice["uuid"])
    else:
        ideal[result_at - 1] = set_parent(ideal[result_at - 1], view.uuid(point))
        ideal[kid_at] = set_parent(ideal[kid_at], notice["uuid"])
        del ideal[result_at]
        del ideal[use_at]
    return Damaged28(
        "1b_split",
        out,
        [use_at, result_at],
        [use_at, result_at - 1, result_at, kid_at],
        ideal,
        True,
        BREAKS_CURRENT,
        "server tool pair split by a user line: the result opens an API message",
        {"point": point, "use": use_at, "notice": result_at - 1, "result": result_at},
    )


# --- 2 / 3b / 9: torn records ---------------------------------------------------------------------


def cut_points(view: ClientView, kinds: tuple[str, ...] = ("user", "assistant")) -> list[int]:
    """Chain lines (not the leaf, not sidechain) whose loss the client cannot bridge: their child on the chain
    finds no line within 5 s to hang from, so the history is cut there."""
    points = []
    for line in view.chain[1:]:
        record = view.record(line)
        if record.get("type") not in kinds or record.get("isSidechain") is True:
            continue
        kids = [kid for kid in view.children(line) if kid in view.on_chain]
        if len(kids) != 1:
            continue
        without = view.without(line)
        if without.cut_at is not None and without.lines[without.cut_at] == view.lines[kids[0]]:
            points.append(line)
    return sorted(points)


def torn_record(view: ClientView, after: int, salt: str) -> bytes:
    """The first part of an assistant text line that was being written after line `after`: cut mid-string,
    no newline (the bytes a crash leaves)."""
    base = next(
        (line for line in reversed(view.chain) if view.record(line).get("type") == "assistant"),
        None,
    )
    if base is None:
        raise NoPoint
    record = _assistant_like(
        view,
        base,
        [
            {
                "type": "text",
                "text": "Now I will update the configuration so that "
                "the new checks run on every commit, starting with",
            }
        ],
        salt,
        view.uuid(after),
        (view.ts(after) or 0.0) + 0.8,
    )
    record["message"] = dict(record["message"], id=new_id(view.lines, "msg_", salt))
    raw = dumps(record)
    return raw[: int(len(raw) * 0.6)]


def glued_points(view: ClientView, live: bool) -> list[int]:
    """Chain lines N (user or assistant, not the leaf) such that gluing a torn record before N cuts the history
    for the client (N's child cannot be bridged) and, live, riffd's re-point rule finds N's parent alone once
    the line is split."""
    points = []
    for line in cut_points(view):
        parent = view.record(line).get("parentUuid")
        if not isinstance(parent, str) or view.by_uuid.get(parent) is None:
            continue
        if live:
            after = view.replaced(
                line,
                set_parent(view.lines[line], "00000000-0000-4000-8000-000000000000"),
                bridge=False,
            )
            if after.cut_at != line or after.rule_target(line) != view.by_uuid[parent]:
                continue
        points.append(line)
    return points


def inject_glued_record(
    lines: Sequence[bytes], choose: Chooser = None, live: bool = False
) -> Damaged28:
    """2: a torn record with the next record glued to it on one line.

    A writer died mid-record; the next write (a resume, or an older client that does not start its writes with
    a newline) appended line N right after the fragment. The client skips the whole line, so N is lost and its
    child's parent is missing: the history is cut there. live=False (a resume wrote N): N's parent is the line
    before the fragment, and splitting the line restores the chain. live=True (the same process went on): N's
    parent is the torn record's uuid, so after the split N still needs re-pointing (kind 7's rule), which finds
    the line the torn record hung from. The ideal repair splits the line at the start of N (the last whole record
    it holds); the fragment stays, as a line of its own, which the client skips."""
    view = ClientView(lines)
    n_line = _pick(glued_points(view, live), choose)
    parent_line = view.by_uuid[view.record(n_line)["parentUuid"]]
    fragment = torn_record(view, parent_line, f"torn-{n_line}")
    torn_uuid = new_uuid(view.lines, f"torn-{n_line}")
    n_raw = set_parent(view.lines[n_line], torn_uuid) if live else view.lines[n_line]
    out = [*view.lines[:n_line], fragment + n_raw, *view.lines[n_line + 1 :]]
    ideal = [*view.lines[:n_line], fragment + b"\n", view.lines[n_line], *view.lines[n_line + 1 :]]
    return Damaged28(
        "2_live" if live else "2",
        out,
        [n_line],
        [n_line],
        ideal,
        True,
        BREAKS_CURRENT,
        "torn record glued to the next record: split before the last whole record"
        + (", then re-point it to the line before the torn record" if live else ""),
        {"glued": n_line, "record_start": len(fragment)},
    )


def nul_points(view: ClientView) -> list[int]:
    """Chain lines T (assistant, text or thinking only) whose next line in the file is their only chain child N,
    such that losing both cuts the history for the client, and once split, riffd's re-point rule finds T's
    parent alone for N."""
    points = []
    for line in view.chain[1:]:
        if line + 1 >= len(view.lines) or view.record(line).get("type") != "assistant":
            continue
        if not view.block_types(line) or set(view.block_types(line)) - {"text", "thinking"}:
            continue
        if [kid for kid in view.children(line) if kid in view.on_chain] != [line + 1]:
            continue
        parent = view.record(line).get("parentUuid")
        if not isinstance(parent, str) or view.by_uuid.get(parent) is None:
            continue
        lost = view.without(line, line + 1)
        if lost.cut_at is None:
            continue
        split = view.without(line, bridge=False)
        if split.cut_at == line and split.rule_target(line) == view.by_uuid[parent] - (
            view.by_uuid[parent] > line
        ):
            points.append(line)
    return sorted(points)


def inject_nul_glued(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """3b: the end of record T (with its newline) became NUL bytes (a crash after the file grew but before its
    data reached the disk), and the next record N was appended right after them: T and N are lost to the client.
    The ideal repair splits before N (T's remains stay, a malformed line) and re-points N, whose parent T is gone,
    to the line T hung from: the newest line before it, as the client would bridge it, here with no 5 s limit."""
    view = ClientView(lines)
    t_line = _pick(nul_points(view), choose)
    t_raw, n_raw = view.lines[t_line], view.lines[t_line + 1]
    lost = max(1, len(t_raw) // 3)
    damaged_t = t_raw[: len(t_raw) - lost] + b"\x00" * lost
    out = [*view.lines[:t_line], damaged_t + n_raw, *view.lines[t_line + 2 :]]
    target = view.record(t_line).get("parentUuid")
    ideal = [
        *view.lines[:t_line],
        damaged_t + b"\n",
        set_parent(n_raw, target),
        *view.lines[t_line + 2 :],
    ]
    return Damaged28(
        "3b",
        out,
        [t_line],
        [t_line],
        ideal,
        True,
        BREAKS_CURRENT,
        "NULs replace a record's end, the next record glued after them: split before the next record, "
        "re-point it to the line the lost record hung from",
        {"glued": t_line, "record_start": len(damaged_t)},
    )


def position_points(view: ClientView) -> list[int]:
    """Places a stray line can go (before line i), between two chain lines, keeping the last line last."""
    return sorted(line for line in view.on_chain if 0 < line < len(view.lines) - 1)


def _insert_stray(
    lines: Sequence[bytes], choose: Chooser, raw: bytes, kind: str, what: str
) -> Damaged28:
    view = ClientView(lines)
    position = _pick(position_points(view), choose)
    out = [*view.lines[:position], raw, *view.lines[position:]]
    return Damaged28(
        kind,
        out,
        [position],
        [position],
        list(view.lines),
        False,
        BREAKS_OLDER,
        f"{what} on a line of its own: the client skips it; optional repair drops it",
        {"stray": position},
    )


def inject_nul_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """3a: a run of NUL bytes on a line of its own (a crash padded the file; the next write started a line)."""
    return _insert_stray(lines, choose, b"\x00" * 4096 + b"\n", "3a", "a run of NUL bytes")


def inject_fragment_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """9: a torn fragment closed by the next write's leading newline: a malformed line mid-file."""
    view = ClientView(lines)
    fragment = torn_record(view, view.chain[-1], "fragment") + b"\n"
    return _insert_stray(lines, choose, fragment, "9", "a torn fragment")


# --- 4 / 5a / 5b: bad characters in a tool_result --------------------------------------------------


def result_points(view: ClientView) -> list[int]:
    """Chain lines holding one tool_result whose content is a non-empty string."""
    points = []
    for line in view.chain:
        content = view.content(line)
        if (
            view.record(line).get("type") == "user"
            and len(content) == 1
            and isinstance(content[0], dict)
            and content[0].get("type") == "tool_result"
            and isinstance(content[0].get("content"), str)
            and len(content[0]["content"]) >= 8
        ):
            points.append(line)
    return sorted(points)


def _result_insert(
    lines: Sequence[bytes],
    choose: Chooser,
    inserted: bytes,
    replacement: bytes,
    kind: str,
    required: bool,
    breaks: str,
    what: str,
) -> Damaged28:
    """Insert `inserted` (raw bytes, as they stand in the JSON text) into the first 8 characters of a chain
    tool_result's content string; the ideal repair writes `replacement` there instead."""
    view = ClientView(lines)
    line = _pick(result_points(view), choose)
    text = view.content(line)[0]["content"]
    head = json.dumps(text[:8], ensure_ascii=False)[1:-1].encode()
    raw = view.lines[line]
    marker = b'"type":"tool_result","content":"' + head
    at = raw.find(marker)
    if at < 0:
        raise NoPoint
    at += len(marker)
    out = list(view.lines)
    out[line] = raw[:at] + inserted + raw[at:]
    ideal = list(view.lines)
    ideal[line] = raw[:at] + replacement + raw[at:]
    return Damaged28(
        kind, out, [line], [line], ideal, required, breaks, what, {"result": line, "at": at}
    )


FFFD = "\ufffd".encode()


def inject_lone_surrogate(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """4: a lone high surrogate escape in a tool_result (an emoji cut in half by a tool's output limit).
    2.1.332 sends U+FFFD; older clients sent it as it is: 400 `no low surrogate in string`."""
    return _result_insert(
        lines,
        choose,
        b"\\ud83d",
        FFFD,
        "4",
        False,
        BREAKS_OLDER,
        "lone surrogate escape in a tool_result: optional repair writes U+FFFD",
    )


def inject_nul_chars(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """5a: NUL characters (JSON escapes) in a tool_result (binary output). 2.1.270-271 cut the body there."""
    return _result_insert(
        lines,
        choose,
        b"\\u0000\\u0000\\u0000",
        FFFD * 3,
        "5a",
        False,
        BREAKS_OLDER,
        "NUL characters in a tool_result: optional repair writes U+FFFD",
    )


def inject_bad_utf8(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """5b: bytes that are not UTF-8 in a tool_result (Latin-1 output, a multi-byte character cut). The client
    reads each bad sequence as U+FFFD; riffd today calls the line malformed and its child dangling."""
    return _result_insert(
        lines,
        choose,
        b"caf\xe9 \xff\xfe \xe2\x82",
        "caf\ufffd \ufffd\ufffd \ufffd".encode(),
        "5b",
        False,
        BREAKS_OLDER,
        "invalid UTF-8 in a tool_result: optional repair writes U+FFFD",
    )


# --- 6: a thinking-only message at the end ---------------------------------------------------------


def inject_thinking_tail(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """6: the process stopped after writing the thinking block of its answer: the chain ends in an assistant
    message that holds only thinking. If the newest message is not a prompt, a typed prompt is written first
    (history, not damage). The client drops the message; optional repair drops the line."""
    view = ClientView(lines)
    if view.leaf is None:
        raise NoPoint
    last = len(view.lines) - 1
    if not view.lines[last].endswith(b"\n"):
        raise NoPoint
    base = next(
        (
            line
            for line in view.chain
            if view.record(line).get("type") == "assistant" and "thinking" in view.block_types(line)
        ),
        None,
    )
    if base is None:
        base = next(
            (line for line in view.chain if view.record(line).get("type") == "assistant"), None
        )
    if base is None:
        raise NoPoint
    last_uuid_line = max(
        line
        for line, rec in enumerate(view.records)
        if rec and isinstance(rec.get("uuid"), str) and rec.get("isSidechain") is not True
    )
    when = max(view.ts(line) or 0.0 for line in range(len(view.lines)))
    added: list[bytes] = []
    parent = view.uuid(last_uuid_line)
    if not view.is_prompt(view.leaf):
        prompt = {
            "parentUuid": parent,
            **neighbours(view.record(base)),
            "type": "user",
            "message": {"role": "user", "content": "and now run the whole test suite"},
            "uuid": new_uuid(view.lines, "thinking-prompt"),
            "timestamp": stamp(when + 30),
        }
        added.append(dumps(prompt))
        parent = prompt["uuid"]
    record = _assistant_like(
        view,
        base,
        [
            {
                "type": "thinking",
                "thinking": "The user wants the full suite. I should run mix test and then look at",
                "signature": "EpcCCkYIBhgCKkC",
            }
        ],
        "thinking-tail",
        parent,
        when + 33,
    )
    record["message"] = dict(
        record["message"], id=new_id(view.lines, "msg_", "thinking-tail"), stop_reason=None
    )
    added.append(dumps(record))
    out = [*view.lines, *added]
    ideal = [*view.lines, *added[:-1]]
    return Damaged28(
        "6",
        out,
        [len(out) - 1],
        [len(out) - 1],
        ideal,
        False,
        BREAKS_OLDER,
        "the chain ends in a thinking-only assistant message: optional repair drops that line",
        {"thinking": len(out) - 1},
    )


# --- 7: a message line missing mid-file -------------------------------------------------------------


def missing_points(view: ClientView) -> list[int]:
    """Chain message lines (text/thinking only, or a prompt) whose loss the client cannot bridge (cut) while
    the line they hung from is the one riffd's rule finds, alone: the newest earlier conversation line by
    timestamp not on the chain, of any age, no other of the same timestamp."""
    points = []
    for line in cut_points(view):
        types = set(view.block_types(line))
        if not (view.is_prompt(line) or (types and not types - {"text", "thinking"})):
            continue
        parent = view.record(line).get("parentUuid")
        if not isinstance(parent, str) or view.by_uuid.get(parent) is None:
            continue
        without = view.without(line)
        orphan = without.cut_at
        if orphan is None:
            continue
        candidates = without.bridge_candidates(orphan, without.on_chain, window=None)
        if not candidates:
            continue
        best = candidates[0]
        tied = [c for c in candidates if without.ts(c) == without.ts(best)]
        if len(tied) == 1 and without.record(best).get("uuid") == parent:
            points.append(line)
    return sorted(points)


def inject_missing_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """7: a message line missing mid-file: its child's parentUuid names no line. The client bridges only to a
    line within 5 s, so the history is cut. The ideal repair re-points the orphan to the newest earlier
    conversation line by timestamp that is not on the loaded chain (unique), which here is the lost line's
    parent."""
    view = ClientView(lines)
    line = _pick(missing_points(view), choose)
    kid = next(k for k in view.children(line) if k in view.on_chain)
    out = [raw for number, raw in enumerate(view.lines) if number != line]
    kid_at = kid - 1 if kid > line else kid
    ideal = list(out)
    ideal[kid_at] = set_parent(out[kid_at], view.record(line).get("parentUuid"))
    return Damaged28(
        "7",
        out,
        [],
        [kid_at],
        ideal,
        True,
        BREAKS_CURRENT,
        "a message line missing: re-point the orphan to the newest earlier line not on the chain",
        {"orphan": kid_at, "removed_original_line": line},
    )


# --- 8 / 10: repeats --------------------------------------------------------------------------------


def repeated_use_points(view: ClientView) -> list[int]:
    """Chain tool_use lines (not the leaf) with one child on the chain."""
    return sorted(
        line
        for line in view.chain[1:]
        if "tool_use" in view.block_types(line)
        and view.record(line).get("type") == "assistant"
        and len([k for k in view.children(line) if k in view.on_chain]) >= 1
    )


def inject_repeated_tool_use(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """8: a copy of a tool_use line (fresh uuid and message.id) on the chain below it (2.1.19 regression):
    one tool_use id on two lines. The client drops the repeat; riffd removes it today (kept as is)."""
    view = ClientView(lines)
    line = _pick(repeated_use_points(view), choose)
    record = dict(view.record(line))
    copy_uuid = new_uuid(view.lines, f"repeated-use-{line}")
    record["parentUuid"] = view.uuid(line)
    record["uuid"] = copy_uuid
    record["message"] = dict(
        record["message"], id=new_id(view.lines, "msg_", f"repeated-use-{line}")
    )
    out = [*view.lines[: line + 1], dumps(record), *view.lines[line + 1 :]]
    touched = [line + 1]
    for kid in view.children(line):
        at = kid + 1 if kid > line else kid
        out[at] = set_parent(out[at], copy_uuid)
        touched.append(at)
    return Damaged28(
        "8",
        out,
        [line + 1],
        sorted(touched),
        list(view.lines),
        True,
        BREAKS_OLDER,
        "one tool_use id on two lines: remove the repeat, re-point its children",
        {"tool_use": line, "copy": line + 1},
    )


def inject_identical_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged28:
    """10: a tool_result line written again byte for byte right after itself. The client loads a uuid once, so
    the API never sees two results: not a duplicate_tool_result. Optional repair drops the repeat."""
    view = ClientView(lines)
    line = _pick(result_points(view), choose)
    out = [*view.lines[: line + 1], view.lines[line], *view.lines[line + 1 :]]
    return Damaged28(
        "10",
        out,
        [line + 1],
        [line + 1],
        list(view.lines),
        False,
        HARMLESS,
        "a line written again byte for byte: optional repair drops the repeat",
        {"first": line, "repeat": line + 1},
    )


# --- the catalogue ----------------------------------------------------------------------------------

Injector = Callable[..., Damaged28]

INJECTORS: dict[str, Injector] = {
    "1a": inject_server_use_without_result,
    "1b": inject_server_result_without_use,
    "2": inject_glued_record,
    "3a": inject_nul_line,
    "3b": inject_nul_glued,
    "4": inject_lone_surrogate,
    "5a": inject_nul_chars,
    "5b": inject_bad_utf8,
    "6": inject_thinking_tail,
    "7": inject_missing_line,
    "8": inject_repeated_tool_use,
    "9": inject_fragment_line,
    "10": inject_identical_line,
}


def kept_in_order(damaged: Damaged28, repaired: Sequence[bytes]) -> list[int]:
    """The indexes of `damaged.lines` outside `touched` that are missing from `repaired` (byte for byte, in
    order): empty when the repair kept every line it was not allowed to change."""
    missing, at = [], 0
    for index, raw in enumerate(damaged.lines):
        if index in damaged.touched:
            continue
        while at < len(repaired) and repaired[at] != raw:
            at += 1
        if at == len(repaired):
            missing.append(index)
            at = 0
        else:
            at += 1
    return missing
