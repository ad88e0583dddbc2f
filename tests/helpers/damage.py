"""Damage injectors for tests: each takes the lines of a healthy transcript and returns them
damaged.

Lines are bytes with their newline, as stored. An injector reads the file's tree (the riffd index
and the conversation Claude Code would load) to find a point where its damage produces exactly the
finding it is named after, then returns the damaged lines with the findings expected from them and
`marks`: the 0-based indexes, in the damaged lines, of the lines a test wants to look at.

Injection points are chosen from structure alone (parent links, tool ids, file order), never by
running detection on the result, so a detection bug cannot hide by making a point "invalid".
New uuids and tool ids are derived from the input bytes, so a damaged file is reproducible.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid as uuid_module
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from helpers import field_damage
from riffd.transcript.findings import CUTS_HISTORY, FindingClass
from riffd.transcript.index import SIDECHAIN
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.loaded import LoadedConversation, loaded_conversation
from riffd.transcript.reader import parse_line

INTERRUPTED_TEXT = "[Tool call interrupted: the session was resumed before this tool call returned]"
NO_RESPONSE_TEXT = "No response requested."
OOM_EXTRA_RESULTS = 101
FIELDS_OF_NEIGHBOURS = (
    "isSidechain",
    "userType",
    "cwd",
    "sessionId",
    "version",
    "gitBranch",
    "slug",
)


class NoPoint(LookupError):
    """The transcript has no place where this damage can be injected cleanly."""


@dataclass(frozen=True)
class Expect:
    """One finding a damaged file must give: class, 1-based line numbers, tool id, detail."""

    cls: FindingClass
    lines: tuple[int, ...]
    tool_id: str | None = None
    detail: str | None = None


@dataclass
class Damaged:
    """Damaged lines, the findings they must give, and the lines a test wants to look at
    (0-based)."""

    name: str
    lines: list[bytes]
    expected: list[Expect]
    marks: dict[str, int] = field(default_factory=dict)
    tool_id: str | None = None

    @property
    def data(self) -> bytes:
        """The damaged file's bytes."""
        return b"".join(self.lines)


# --- reading the tree -----------------------------------------------------------------------------


class Tree:
    """A transcript's lines with riffd's index of them and the conversation that would be loaded."""

    def __init__(self, lines: Sequence[bytes]) -> None:
        self.lines = list(lines)
        self.records: list[dict[str, Any] | None] = []
        builder = IndexBuilder("<damage>")
        offset = 0
        for raw in self.lines:
            terminated = raw.endswith(b"\n")
            body = raw[:-1] if terminated else raw
            parsed = parse_line(body)
            builder.add(offset, body, terminated)
            self.records.append(parsed if isinstance(parsed, dict) else None)
            offset += len(raw)
        self.index = builder.finish()
        self.loaded: LoadedConversation = loaded_conversation(self.index)
        self.chain = self.loaded.chain  # newest first
        self.on_chain = set(self.chain)
        self.seed = hashlib.sha256(b"".join(self.lines)).hexdigest()

    def uuid(self, line: int) -> str:
        """The uuid of a conversation line."""
        value = self.index.uuids[line]
        assert value is not None, f"line {line + 1} has no uuid"
        return value

    def content(self, line: int) -> list[Any] | None:
        """The content list of a line's message, or None when it has none."""
        record = self.records[line]
        message = record.get("message") if record else None
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, list) else None

    def blocks(self, line: int, kind: str) -> list[dict[str, Any]]:
        """The content blocks of `kind` (tool_use, tool_result, ...) of a line."""
        return [
            b for b in self.content(line) or [] if isinstance(b, dict) and b.get("type") == kind
        ]

    def is_prompt(self, line: int) -> bool:
        """A user line that holds only text: a typed prompt."""
        record = self.records[line]
        if (
            not record
            or record.get("type") != "user"
            or not isinstance(record.get("message"), dict)
        ):
            return False
        content = record["message"].get("content")
        if isinstance(content, str):
            return True
        return (
            isinstance(content, list)
            and bool(content)
            and all(isinstance(b, dict) and b.get("type") == "text" for b in content)
        )

    def children(self, line: int) -> list[int]:
        """The lines whose parentUuid names this line."""
        return [kid for kid, parent in enumerate(self.index.parents) if parent == line]

    def pairs(self) -> list[tuple[int, int, str]]:
        """(tool_use line, result line, id) for each loaded single pair: one use block, one result
        line holding only that result block, the result hanging from the use line, no other use or
        result."""
        index = self.index
        found = []
        for tool_id in index.tool_uses:
            use_lines, results = index.uses_of(tool_id), index.results.get(tool_id, [])
            if len(use_lines) != 1 or len(results) != 1:
                continue
            use, result = use_lines[0], results[0].line
            if (
                len(self.blocks(use, "tool_use")) == 1
                and len(self.content(result) or []) == 1
                and index.parents[result] == use
                and result in self.loaded.segment_of
                and not index.flags[result] & SIDECHAIN
            ):
                found.append((use, result, tool_id))
        return sorted(found)

    def clean_cut_prompts(self) -> list[int]:
        """On-chain prompt lines that no tool pairing crosses in file order (all uses and results of
        every id lie on one side): cutting the tree there loses history, never half a pair."""
        index = self.index
        spans = []
        for tool_id in index.tool_uses:
            lines = [
                *index.uses_of(tool_id),
                *(block.line for block in index.results.get(tool_id, [])),
            ]
            spans.append((min(lines), max(lines)))
        for tool_id, blocks in index.results.items():
            if tool_id not in index.tool_uses:
                lines = [block.line for block in blocks]
                spans.append((min(lines), max(lines)))
        return sorted(
            line
            for line in self.on_chain
            if self.is_prompt(line)
            and not index.flags[line] & SIDECHAIN
            and all(not (low < line < high) for low, high in spans)
        )

    def only_parent_references(self, line: int) -> bool:
        """True when no other line names this line's uuid except as its parentUuid."""
        needle = self.uuid(line).encode()
        pointer = b'"parentUuid":"' + needle + b'"'
        return all(
            raw.count(needle) == raw.count(pointer)
            for other, raw in enumerate(self.lines)
            if other != line
        )

    def new_uuid(self, salt: str) -> str:
        """A uuid that depends only on the file's bytes and `salt`."""
        return str(uuid_module.uuid5(uuid_module.NAMESPACE_URL, f"riffd-test:{self.seed}:{salt}"))

    def new_tool_id(self, salt: str) -> str:
        """A tool id shaped like Anthropic's that depends only on the file's bytes and `salt`."""
        return "toolu_01Riffd" + hashlib.sha256(f"{self.seed}:{salt}".encode()).hexdigest()[:14]

    def neighbours(self, line: int) -> dict[str, Any]:
        """The fields a new line copies from the line it is written next to."""
        record = self.records[line] or {}
        return {name: record[name] for name in FIELDS_OF_NEIGHBOURS if name in record}


# --- writing lines --------------------------------------------------------------------------------


def dumps(record: dict[str, Any]) -> bytes:
    """One compact JSON line with its newline, written the way Claude Code writes (UTF-8, no
    escapes; a lone surrogate, which UTF-8 cannot hold, as its escape)."""
    try:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(record, separators=(",", ":")).encode() + b"\n"


def set_parent(raw: bytes, parent: str | None) -> bytes:
    """Return `raw` with only the value of its parentUuid changed (every other byte kept)."""
    new_value = b"null" if parent is None else b'"' + parent.encode() + b'"'
    edited, count = re.subn(
        rb'("parentUuid"\s*:\s*)(?:null|"[^"]*")', lambda m: m.group(1) + new_value, raw
    )
    assert count == 1, f"expected one parentUuid field, found {count}"
    return edited


def repoint_children(
    tree: Tree, lines: list[bytes], line: int, new_parent: str, shift: Callable[[int], int]
) -> None:
    """Point every child of `line` (a line of `tree`) at `new_parent`, in `lines` (indexes via
    `shift`)."""
    for kid in tree.children(line):
        lines[shift(kid)] = set_parent(lines[shift(kid)], new_parent)


def with_content(tree: Tree, line: int, content: list[Any]) -> bytes:
    """Line `line` re-serialised with a new content list."""
    record = dict(tree.records[line] or {})
    record["message"] = dict(record["message"], content=content)
    return dumps(record)


def shifted(after: int, by: int) -> Callable[[int], int]:
    """Index map for lines of a tree once `by` lines are inserted after index `after`."""
    return lambda line: line + by if line > after else line


def _pick(points: Sequence[Any], choose: Callable[[Sequence[Any]], Any] | None) -> Any:
    if not points:
        raise NoPoint
    return choose(points) if choose else points[len(points) // 2]


Chooser = Callable[[Sequence[Any]], Any] | None


# --- duplicate results ----------------------------------------------------------------------------


def _resumed_lines(tree: Tree, use: int, tool_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Process B's two lines of section 4b: the synthetic interrupted result and "No response
    requested."."""
    synthetic_uuid = tree.new_uuid(f"resumed-result-{use}")
    result: dict[str, Any] = {"parentUuid": tree.uuid(use), **tree.neighbours(use), "type": "user"}
    result["message"] = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": tool_id,
                "content": INTERRUPTED_TEXT,
                "is_error": True,
            }
        ],
    }
    result["uuid"] = synthetic_uuid
    result["timestamp"] = (tree.records[use] or {}).get("timestamp", "2026-01-01T00:00:00.000Z")
    result["toolUseResult"] = "Error: " + INTERRUPTED_TEXT
    result["toolDenialKind"] = "interrupted"
    if tree.index.uses_source_tool_field:
        result["sourceToolAssistantUUID"] = tree.uuid(use)
    assistant: dict[str, Any] = {
        "parentUuid": synthetic_uuid,
        **tree.neighbours(use),
        "type": "assistant",
    }
    assistant["message"] = {
        "id": "msg_" + tree.new_uuid(f"resumed-message-{use}").replace("-", "")[:24],
        "type": "message",
        "role": "assistant",
        "model": "<synthetic>",
        "content": [{"type": "text", "text": NO_RESPONSE_TEXT}],
        "stop_reason": "stop_sequence",
        "stop_sequence": "",
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    assistant["uuid"] = tree.new_uuid(f"resumed-assistant-{use}")
    assistant["timestamp"] = result["timestamp"]
    return result, assistant


def _inject_resumed(tree: Tree, point: tuple[int, int, str], name: str) -> Damaged:
    use, result, tool_id = point
    synthetic, assistant = _resumed_lines(tree, use, tool_id)
    lines = [*tree.lines[:result], dumps(synthetic), dumps(assistant), *tree.lines[result:]]
    genuine = result + 2
    return Damaged(
        name,
        lines,
        [Expect(FindingClass.DUPLICATE_TOOL_RESULT, (result + 1, genuine + 1), tool_id)],
        {
            "tool_use": use,
            "synthetic": result,
            "synthetic_assistant": result + 1,
            "genuine": genuine,
        },
        tool_id,
    )


def resumed_duplicate_points(tree: Tree) -> list[tuple[int, int, str]]:
    """Single pairs whose result is on the chain the conversation continued from."""
    return [pair for pair in tree.pairs() if pair[1] in tree.on_chain]


def inject_resumed_duplicate(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """Section 4b: a second session wrote a synthetic interrupted result (and a synthetic assistant
    "No response requested." line) off the same tool_use line, before the genuine result."""
    tree = Tree(lines)
    return _inject_resumed(tree, _pick(resumed_duplicate_points(tree), choose), "resumed_duplicate")


def parallel_duplicate_points(tree: Tree) -> list[tuple[int, int, str]]:
    """Single pairs of a parallel tool call whose result is loaded but off the plain walk from the
    leaf."""
    return [pair for pair in tree.pairs() if pair[1] not in tree.on_chain]


def inject_parallel_duplicate(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """Section 4b's duplicate on a parallel call whose result hangs off the walk: neither result is
    on the chain, so the genuine one must win over the placeholder."""
    tree = Tree(lines)
    return _inject_resumed(
        tree, _pick(parallel_duplicate_points(tree), choose), "parallel_duplicate"
    )


def loaded_pair_points(tree: Tree) -> list[tuple[int, int, str]]:
    """Single pairs whose result line comes before the newest message (so a copy does not become
    it)."""
    leaf = tree.loaded.leaf if tree.loaded.leaf is not None else -1
    return [pair for pair in tree.pairs() if pair[1] < leaf]


def inject_duplicate_in_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """Two tool_result blocks for one id inside one line; the second says something else."""
    tree = Tree(lines)
    _use, result, tool_id = _pick(loaded_pair_points(tree), choose)
    block = tree.blocks(result, "tool_result")[0]
    replay = dict(block, content="replayed output (riffd test)")
    damaged = list(tree.lines)
    damaged[result] = with_content(tree, result, [block, replay])
    return Damaged(
        "duplicate_in_line",
        damaged,
        [Expect(FindingClass.DUPLICATE_TOOL_RESULT, (result + 1,), tool_id)],
        {"result": result},
        tool_id,
    )


def inject_identical_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A result line written twice, byte for byte: a repeated line (not a duplicate result)."""
    tree = Tree(lines)
    _use, result, tool_id = _pick(loaded_pair_points(tree), choose)
    damaged = [*tree.lines[: result + 1], tree.lines[result], *tree.lines[result + 1 :]]
    return Damaged(
        "identical_line",
        damaged,
        # Claude Code loads a uuid once: the API never sees the second result
        [Expect(FindingClass.REPEATED_LINE, (result + 2, result + 1))],
        {"first": result, "repeat": result + 1},
        tool_id,
    )


def inject_many_results(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A replay loop: 100 more copies of a result (fresh uuids) chained after it on the chain."""
    tree = Tree(lines)
    _use, result, tool_id = _pick(loaded_pair_points(tree), choose)
    record = tree.records[result] or {}
    new_lines = []
    parent = tree.uuid(result)
    for number in range(OOM_EXTRA_RESULTS - 1):
        copy = dict(record, parentUuid=parent, uuid=tree.new_uuid(f"replay-{result}-{number}"))
        new_lines.append(dumps(copy))
        parent = copy["uuid"]
    damaged = tree.lines[: result + 1] + new_lines + tree.lines[result + 1 :]
    repoint_children(tree, damaged, result, parent, shifted(result, len(new_lines)))
    numbers = tuple(range(result + 1, result + 2 + len(new_lines)))
    return Damaged(
        "many_results",
        damaged,
        [
            Expect(FindingClass.DUPLICATE_TOOL_RESULT, numbers, tool_id),
            Expect(FindingClass.OOM_RISK, numbers[:20], tool_id),
        ],
        {"result": result},
        tool_id,
    )


# --- missing results ------------------------------------------------------------------------------


def cut_points(tree: Tree) -> list[int]:
    """On-chain tool_use lines that end their API message and whose tool calls are answered only
    later."""
    index = tree.index
    points = []
    for line in tree.chain:
        if not tree.blocks(line, "tool_use") or index.flags[line] & SIDECHAIN:
            continue
        group = index.groups[line]
        siblings = index.group_lines[group] if group >= 0 else [line]
        if max(siblings) == line and _missing_after_cut(tree, line):
            points.append(line)
    return sorted(points)


def _missing_after_cut(tree: Tree, line: int) -> list[tuple[int, str]]:
    index = tree.index
    group = index.groups[line]
    siblings = index.group_lines[group] if group >= 0 else [line]
    missing = []
    for sibling in sorted(siblings):
        for block in tree.blocks(sibling, "tool_use"):
            tool_id = block.get("id")
            if isinstance(tool_id, str) and all(
                r.line > line for r in index.results.get(tool_id, [])
            ):
                missing.append((index.uses_of(tool_id)[0], tool_id))
    return missing


def inject_cut_after_tool_use(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """The file ends right after a tool_use line (a crash while the tool ran)."""
    tree = Tree(lines)
    line = _pick(cut_points(tree), choose)
    missing = _missing_after_cut(tree, line)
    return Damaged(
        "cut_after_tool_use",
        tree.lines[: line + 1],
        [
            Expect(FindingClass.MISSING_TOOL_RESULT, (use + 1,), tool_id, "latest_turn")
            for use, tool_id in missing
        ],
        {"tool_use": line},
        missing[0][1],
    )


def removable_result_points(tree: Tree) -> list[tuple[int, int, str]]:
    """On-chain single pairs whose result line is named by nothing but its children's parentUuid."""
    leaf = tree.loaded.leaf if tree.loaded.leaf is not None else -1
    return [
        pair
        for pair in tree.pairs()
        if pair[1] in tree.on_chain and pair[1] < leaf and tree.only_parent_references(pair[1])
    ]


def inject_removed_result(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A result line removed mid-conversation; its children re-pointed to the tool_use line."""
    tree = Tree(lines)
    use, result, tool_id = _pick(removable_result_points(tree), choose)
    damaged = list(tree.lines)
    repoint_children(tree, damaged, result, tree.uuid(use), lambda line: line)
    del damaged[result]
    # The latest turn is the last assistant message on the chain: until the model answers again, its
    # tools may still be running, and riffd says so.
    latest = next(
        line for line in tree.chain if (tree.records[line] or {}).get("type") == "assistant"
    )
    message_id = ((tree.records[latest] or {}).get("message") or {}).get("id")
    in_latest = ((tree.records[use] or {}).get("message") or {}).get("id") == message_id
    return Damaged(
        "removed_result",
        damaged,
        [
            Expect(
                FindingClass.MISSING_TOOL_RESULT,
                (use + 1,),
                tool_id,
                "latest_turn" if in_latest else None,
            )
        ],
        {"tool_use": use, "former_children": min(tree.children(result)) - 1},
        tool_id,
    )


# --- orphans, repeated tool_use, invalid blocks ---------------------------------------------------


def chain_result_points(tree: Tree) -> list[int]:
    """Result lines on the chain."""
    return sorted(
        line for line in tree.index.result_lines if line in tree.on_chain and tree.content(line)
    )


def _append_block(tree: Tree, line: int, block: Any) -> list[bytes]:
    damaged = list(tree.lines)
    damaged[line] = with_content(tree, line, [*(tree.content(line) or []), block])
    return damaged


def inject_orphan(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """An extra tool_result block, for an id no tool_use has, in an on-chain result line."""
    tree = Tree(lines)
    line = _pick(chain_result_points(tree), choose)
    tool_id = tree.new_tool_id(f"orphan-{line}")
    block = {
        "type": "tool_result",
        "tool_use_id": tool_id,
        "content": "output of a call compaction dropped",
    }
    return Damaged(
        "orphan",
        _append_block(tree, line, block),
        [Expect(FindingClass.ORPHAN_TOOL_RESULT, (line + 1,), tool_id)],
        {"result": line},
        tool_id,
    )


def inject_invalid_missing_field(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A tool_result block without tool_use_id."""
    tree = Tree(lines)
    line = _pick(chain_result_points(tree), choose)
    block = {"type": "tool_result", "content": "which call was this?"}
    return Damaged(
        "invalid_missing_field",
        _append_block(tree, line, block),
        [Expect(FindingClass.INVALID_TOOL_RESULT, (line + 1,), None, "missing_field")],
        {"result": line},
    )


def inject_invalid_type(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A tool_result block whose tool_use_id is a number."""
    tree = Tree(lines)
    line = _pick(chain_result_points(tree), choose)
    block = {"type": "tool_result", "tool_use_id": 12345, "content": "numbered"}
    return Damaged(
        "invalid_type",
        _append_block(tree, line, block),
        [Expect(FindingClass.INVALID_TOOL_RESULT, (line + 1,), None, "invalid_type")],
        {"result": line},
    )


def repeated_use_points(tree: Tree) -> list[int]:
    """On-chain tool_use lines before the newest message whose calls are all answered on the loaded
    conversation."""
    index = tree.index
    leaf = tree.loaded.leaf if tree.loaded.leaf is not None else -1
    points = []
    for line in tree.chain:
        uses = tree.blocks(line, "tool_use")
        if not uses or line >= leaf or index.flags[line] & SIDECHAIN:
            continue
        if all(
            len(index.uses_of(b.get("id"))) == 1
            and any(r.line in tree.loaded.segment_of for r in index.results.get(b.get("id"), []))
            for b in uses
        ):
            points.append(line)
    return sorted(points)


def inject_repeated_tool_use(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A copy of an assistant tool_use line (fresh uuid and message.id) inserted on the chain below
    it."""
    tree = Tree(lines)
    line = _pick(repeated_use_points(tree), choose)
    record = dict(tree.records[line] or {})
    copy_uuid = tree.new_uuid(f"repeated-use-{line}")
    record["parentUuid"] = tree.uuid(line)
    record["uuid"] = copy_uuid
    record["message"] = dict(record["message"], id="msg_" + copy_uuid.replace("-", "")[:24])
    damaged = [*tree.lines[: line + 1], dumps(record), *tree.lines[line + 1 :]]
    repoint_children(tree, damaged, line, copy_uuid, shifted(line, 1))
    ids = [b["id"] for b in tree.blocks(line, "tool_use")]
    return Damaged(
        "repeated_tool_use",
        damaged,
        [Expect(FindingClass.DUPLICATE_TOOL_USE, (line + 1, line + 2), tool_id) for tool_id in ids],
        {"tool_use": line, "copy": line + 1},
        ids[0],
    )


# --- lines that do not parse, links that name no line ---------------------------------------------------------


def position_points(tree: Tree) -> list[int]:
    """Places a new line can go (before line i), keeping an unterminated last line last."""
    last = (
        len(tree.lines) if not tree.lines or tree.lines[-1].endswith(b"\n") else len(tree.lines) - 1
    )
    return list(range(1, last + 1))


def _insert_malformed(lines: Sequence[bytes], choose: Chooser, raw: bytes, name: str) -> Damaged:
    tree = Tree(lines)
    position = _pick(position_points(tree), choose)
    damaged = [*tree.lines[:position], raw, *tree.lines[position:]]
    return Damaged(
        name,
        damaged,
        [Expect(FindingClass.MALFORMED_LINE, (position + 1,))],
        {"malformed": position},
    )


def inject_garbage_line(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A torn fragment that a later write closed with its leading newline: a malformed line
    mid-file."""
    fragment = b'{"parentUuid":"0b7d1c2e-aaaa-4bbb-8ccc-123456789abc","type":"user","message":{"role":"us\n'
    return _insert_malformed(lines, choose, fragment, "garbage_line")


def inject_nul_run(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A run of NUL bytes where a crash or a sync client padded the file."""
    return _insert_malformed(lines, choose, b"\x00" * 4096 + b"\n", "nul_run")


def inject_torn_tail(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """The first half of one more line, without its newline: a write cut off."""
    tree = Tree(lines)
    if not tree.lines or not tree.lines[-1].endswith(b"\n") or tree.loaded.leaf is None:
        raise NoPoint
    record = dict(tree.records[tree.loaded.leaf] or {}, uuid=tree.new_uuid("torn"))
    raw = dumps(record)
    fragment = raw[: max(10, len(raw) // 2)]
    return Damaged(
        "torn_tail",
        [*tree.lines, fragment],
        [Expect(FindingClass.TORN_TAIL, (len(tree.lines) + 1,))],
        {"torn": len(tree.lines)},
    )


def duplicate_uuid_points(tree: Tree) -> list[int]:
    """On-chain prompts before the newest message."""
    leaf = tree.loaded.leaf if tree.loaded.leaf is not None else -1
    return sorted(line for line in tree.on_chain if tree.is_prompt(line) and line < leaf)


def inject_duplicate_uuid(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A different line (an edited prompt) written with the uuid of an on-chain prompt."""
    tree = Tree(lines)
    line = _pick(duplicate_uuid_points(tree), choose)
    record = dict(tree.records[line] or {})
    record["message"] = {"role": "user", "content": "the same prompt, edited (riffd test)"}
    damaged = [*tree.lines[: line + 1], dumps(record), *tree.lines[line + 1 :]]
    return Damaged(
        "duplicate_uuid",
        damaged,
        [Expect(FindingClass.DUPLICATE_UUID, (line + 2, line + 1))],
        {"first": line, "repeat": line + 1},
    )


def dangling_points(tree: Tree) -> list[int]:
    """Clean-cut prompts that have a parent (not compact summaries) which, once lost, is where the
    client's guess leads with no age limit: the newest earlier line by time, alone, and the nearest
    before the prompt in the file (helpers.field_damage.ClientView: the client's rules)."""
    points = []
    for line in tree.clean_cut_prompts():
        parent = tree.index.parents[line]
        if parent < 0 or (tree.records[line] or {}).get("isCompactSummary"):
            continue
        lost = field_damage.set_parent(tree.lines[line], "00000000-0000-4000-8000-00000000dead")
        after = field_damage.ClientView(
            [*tree.lines[:line], lost, *tree.lines[line + 1 :]], bridge=False
        )
        if after.cut_at != line or after.rule_target(line) != parent:
            continue
        before = after.bridge_candidates(line, after.on_chain, window=None)
        if max(candidate for candidate in before if candidate < line) == parent:
            points.append(line)
    return points


def inject_dangling_parent(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A prompt whose parentUuid names no line of the file (resume shows a cut history)."""
    tree = Tree(lines)
    line = _pick(dangling_points(tree), choose)
    damaged = list(tree.lines)
    damaged[line] = set_parent(damaged[line], tree.new_uuid(f"dangling-{line}"))
    return Damaged(
        "dangling_parent",
        damaged,
        [
            Expect(
                FindingClass.DANGLING_PARENT,
                (line + 1,),
                detail=CUTS_HISTORY if line in tree.on_chain else None,
            )
        ],
        {"dangling": line},
    )


def inject_lost_record(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A dangling parent whose lost record is still in the file as a torn fragment that names its
    uuid, and a parent that is no line either: riffd does not guess where the line hangs."""
    dangling = inject_dangling_parent(lines, choose)
    line = dangling.marks["dangling"]
    missing = json.loads(dangling.lines[line])["parentUuid"]
    fragment = (
        b'{"parentUuid":"0b7d1c2e-aaaa-4bbb-8ccc-123456789abc","uuid":"'
        + missing.encode()
        + b'","type":"user","message":{"role":"us\n'
    )
    return Damaged(
        "lost_record",
        [*dangling.lines[:line], fragment, *dangling.lines[line:]],
        [
            Expect(FindingClass.MALFORMED_LINE, (line + 1,)),
            *(replace(expect, lines=(line + 2,)) for expect in dangling.expected),
        ],
        {"fragment": line, "dangling": line + 1},
    )


def cycle_points(tree: Tree) -> list[tuple[int, int]]:
    """(prompt, newer chain line up to 3 steps above it) pairs: the prompt's parent becomes that
    line."""
    points = []
    for line in tree.clean_cut_prompts():
        at = tree.chain.index(line)
        for steps in range(0, min(3, at) + 1):
            if tree.records[tree.chain[at - steps]] is not None:
                points.append((line, tree.chain[at - steps]))
    return points


def inject_cycle(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """A prompt whose parentUuid names itself or a newer line of its own chain: the links loop."""
    tree = Tree(lines)
    line, target = _pick(cycle_points(tree), choose)
    damaged = list(tree.lines)
    damaged[line] = set_parent(damaged[line], tree.uuid(target))
    at, top = tree.chain.index(line), tree.chain.index(target)
    loop = tuple(sorted(number + 1 for number in tree.chain[top : at + 1]))
    return Damaged(
        "cycle", damaged, [Expect(FindingClass.PARENT_CYCLE, loop)], {"loop_start": line}
    )


def inject_oom_off_chain(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
    """More than 100 results for one id, all on an abandoned branch: a memory risk the API never
    sees."""
    tree = Tree(lines)
    _use, result, tool_id = _pick(loaded_pair_points(tree), choose)
    branch_uuid = tree.new_uuid(f"oom-branch-{result}")
    branch = {
        "parentUuid": tree.uuid(result),
        **tree.neighbours(result),
        "type": "user",
        "message": {
            "role": "user",
            "content": "a prompt on a branch that was rewound (riffd test)",
        },
        "uuid": branch_uuid,
    }
    record = tree.records[result] or {}
    new_lines = [dumps(branch)]
    parent = branch_uuid
    for number in range(OOM_EXTRA_RESULTS):
        copy = dict(record, parentUuid=parent, uuid=tree.new_uuid(f"oom-{result}-{number}"))
        # 2.1.x: it equals parentUuid; the use line must not adopt these
        if "sourceToolAssistantUUID" in copy:
            copy["sourceToolAssistantUUID"] = parent
        new_lines.append(dumps(copy))
        parent = copy["uuid"]
    damaged = tree.lines[: result + 1] + new_lines + tree.lines[result + 1 :]
    numbers = (result + 1, *range(result + 3, result + 3 + OOM_EXTRA_RESULTS))
    return Damaged(
        "oom_off_chain",
        damaged,
        [Expect(FindingClass.OOM_RISK, numbers[:20], tool_id)],
        {"result": result, "branch": result + 1},
        tool_id,
    )


# --- a generated session --------------------------------------------------------------------------


def generated_session(
    segments: int = 9,
    turns: int = 3,
    parallel: int = 2,
    session_id: str = "5e55104e-0000-4000-8000-00000000c0de",
) -> list[bytes]:
    """A 2.1.x-shaped session: `segments` stretches separated by compact boundaries, each with
    `turns` prompts answered by `parallel` tool calls streamed as one message, each result hanging
    off its own tool_use line (section 4b), then a closing text line."""
    lines: list[bytes] = []
    counter = 0
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/home/user/project",
        "sessionId": session_id,
        "version": "2.1.39",
        "gitBranch": "main",
    }

    def new_uuid() -> str:
        nonlocal counter
        counter += 1
        return str(
            uuid_module.uuid5(uuid_module.NAMESPACE_URL, f"riffd-generated:{session_id}:{counter}")
        )

    def stamp() -> str:
        return f"2026-02-01T10:{counter // 60 % 60:02d}:{counter % 60:02d}.000Z"

    def emit(record: dict[str, Any]) -> str:
        lines.append(dumps(record))
        return str(record["uuid"])

    parent: str | None = None
    for segment in range(segments):
        if segment:
            boundary = {
                "parentUuid": None,
                "logicalParentUuid": parent,
                **base,
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "isMeta": False,
                "timestamp": stamp(),
                "uuid": new_uuid(),
                "level": "info",
                "compactMetadata": {"trigger": "auto", "preTokens": 150000},
            }
            parent = emit(boundary)
            summary = {
                "parentUuid": parent,
                **base,
                "type": "user",
                "isCompactSummary": True,
                "message": {"role": "user", "content": f"Summary of segment {segment - 1}"},
                "uuid": new_uuid(),
                "timestamp": stamp(),
            }
            parent = emit(summary)
        for turn in range(turns):
            prompt = {
                "parentUuid": parent,
                **base,
                "type": "user",
                "message": {
                    "role": "user",
                    "content": f"segment {segment} turn {turn}: look around",
                },
                "uuid": new_uuid(),
                "timestamp": stamp(),
            }
            parent = emit(prompt)
            message_id = f"msg_gen_{segment:02d}_{turn:02d}"
            use_lines: list[tuple[str, str]] = []
            for call in range(parallel):
                tool_id = f"toolu_01Gen{segment:02d}{turn:02d}{call:02d}"
                use = {
                    "parentUuid": parent,
                    **base,
                    "type": "assistant",
                    "requestId": f"req_{message_id}",
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": "claude-x",
                        "content": [
                            {
                                "type": "tool_use",
                                "id": tool_id,
                                "name": "Read",
                                "input": {"file_path": f"/f{call}"},
                            }
                        ],
                        "stop_reason": "tool_use" if call == parallel - 1 else None,
                    },
                    "uuid": new_uuid(),
                    "timestamp": stamp(),
                }
                parent = emit(use)
                use_lines.append((parent, tool_id))
            for use_uuid, tool_id in use_lines:
                result = {
                    "parentUuid": use_uuid,
                    **base,
                    "type": "user",
                    "message": {
                        "role": "user",
                        "content": [
                            {
                                "tool_use_id": tool_id,
                                "type": "tool_result",
                                "content": f"contents of {tool_id}",
                            }
                        ],
                    },
                    "uuid": new_uuid(),
                    "timestamp": stamp(),
                    "toolUseResult": {"ok": True},
                    "sourceToolAssistantUUID": use_uuid,
                }
                parent = emit(result)
            answer = {
                "parentUuid": parent,
                **base,
                "type": "assistant",
                "requestId": f"req_{message_id}b",
                "message": {
                    "id": message_id + "b",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-x",
                    "content": [{"type": "text", "text": "done"}],
                    "stop_reason": "end_turn",
                },
                "uuid": new_uuid(),
                "timestamp": stamp(),
            }
            parent = emit(answer)
    return lines


# --- the damage the field reports (helpers.field_damage), with the findings it must give ----------


def _server_id(raw: bytes) -> str:
    """The tool id of the one server tool block of a line."""
    (block,) = json.loads(raw)["message"]["content"]
    return str(block.get("id") or block.get("tool_use_id"))


def _simple_glued(view: field_damage.ClientView, record: int, lost: int) -> bool:
    """Whether losing `lost` and the record at `record` (glued after it) cuts the chain and nothing
    else: the record and the line lost hold no tool blocks, the record has one child, which holds
    no result, and nothing else hangs from the line lost."""
    kids = view.children(record)
    tools = {"tool_use", "tool_result"}
    return (
        len(kids) == 1
        and not tools & set(view.block_types(record))
        and not tools & set(view.block_types(lost))
        and "tool_result" not in view.block_types(kids[0])
        and (lost == record or view.children(lost) == [record])
    )


def _field(
    kind: str, expect: Callable[[field_damage.Damaged28], list[Expect]], **options: Any
) -> Injector:
    """The field injector `kind` as a catalogue injector that gives `expect(damaged)`."""

    def inject(lines: Sequence[bytes], choose: Chooser = None) -> Damaged:
        view = field_damage.ClientView(lines)

        def simple(points: Sequence[Any]) -> Any:
            if kind in ("2", "3b"):
                points = [
                    point for point in points if _simple_glued(view, point + (kind == "3b"), point)
                ]
            return _pick(points, choose)

        try:
            damaged = field_damage.INJECTORS[kind](lines, simple, **options)
        except (field_damage.NoPoint, NoPoint):
            raise NoPoint from None
        return Damaged(f"field_{kind}", damaged.lines, expect(damaged), damaged.marks)

    return inject


def _glued_expect(damaged: field_damage.Damaged28) -> list[Expect]:
    glued = damaged.marks["glued"]
    record = json.loads(damaged.lines[glued][damaged.marks["record_start"] :])
    kids = [
        line
        for line, raw in enumerate(damaged.lines)
        if (field_damage.client_parse(raw) or {}).get("parentUuid") == record["uuid"]
    ]
    return [
        Expect(FindingClass.GLUED_RECORD, (glued + 1,), detail=str(damaged.marks["record_start"])),
        *(Expect(FindingClass.DANGLING_PARENT, (kid + 1,), detail=CUTS_HISTORY) for kid in kids),
    ]


def _at(cls: FindingClass, mark: str) -> Callable[[field_damage.Damaged28], list[Expect]]:
    return lambda damaged: [Expect(cls, (damaged.marks[mark] + 1,))]


def _server(cls: FindingClass, mark: str) -> Callable[[field_damage.Damaged28], Expect]:
    return lambda damaged: Expect(
        cls, (damaged.marks[mark] + 1,), _server_id(damaged.lines[damaged.marks[mark]])
    )


FIELD_INJECTORS: dict[str, Injector] = {
    "server_use_without_result": _field(
        "1a", lambda d: [_server(FindingClass.ORPHAN_SERVER_TOOL_USE, "use")(d)]
    ),
    "server_result_without_use": _field(
        "1b", lambda d: [_server(FindingClass.ORPHAN_SERVER_TOOL_RESULT, "result")(d)]
    ),
    "server_pair_split": _field(
        "1b",
        lambda d: [
            _server(FindingClass.ORPHAN_SERVER_TOOL_USE, "use")(d),
            _server(FindingClass.ORPHAN_SERVER_TOOL_RESULT, "result")(d),
        ],
        split=True,
    ),
    "glued_record": _field("2", _glued_expect),
    "nul_glued_record": _field("3b", _glued_expect),
    "lone_surrogate": _field("4", _at(FindingClass.LONE_SURROGATE, "result")),
    "nul_characters": _field("5a", _at(FindingClass.NUL_CHARACTER, "result")),
    "invalid_utf8": _field("5b", _at(FindingClass.INVALID_UTF8, "result")),
    "thinking_tail": _field("6", _at(FindingClass.THINKING_ONLY_TAIL, "thinking")),
}


# --- the catalogue --------------------------------------------------------------------------------

Injector = Callable[[Sequence[bytes], Chooser], Damaged]

# Damage riffd repairs, by the name of the injector.
REPAIRABLE_INJECTORS: dict[str, Injector] = {
    **FIELD_INJECTORS,
    "resumed_duplicate": inject_resumed_duplicate,
    "parallel_duplicate": inject_parallel_duplicate,
    "duplicate_in_line": inject_duplicate_in_line,
    "identical_line": inject_identical_line,
    "many_results": inject_many_results,
    "cut_after_tool_use": inject_cut_after_tool_use,
    "removed_result": inject_removed_result,
    "orphan": inject_orphan,
    "repeated_tool_use": inject_repeated_tool_use,
    "torn_tail": inject_torn_tail,
    "garbage_line": inject_garbage_line,
    "nul_run": inject_nul_run,
    "dangling_parent": inject_dangling_parent,
}

# Damage riffd reports and never edits.
REPORTED_INJECTORS: dict[str, Injector] = {
    "invalid_missing_field": inject_invalid_missing_field,
    "invalid_type": inject_invalid_type,
    "duplicate_uuid": inject_duplicate_uuid,
    "cycle": inject_cycle,
    "lost_record": inject_lost_record,
    "oom_off_chain": inject_oom_off_chain,
}

INJECTORS: dict[str, Injector] = {**REPAIRABLE_INJECTORS, **REPORTED_INJECTORS}


def injected(
    lines: list[bytes], names: list[str], choose: Callable[[str, list[int]], int]
) -> list[bytes]:
    """`lines` with each named damage injected in turn at the point `choose(name, points)` picks (a
    name with no point to inject at is skipped)."""
    for name in names:
        try:
            lines = INJECTORS[name](lines, lambda points, name=name: choose(name, points)).lines
        except NoPoint:
            continue
    return lines
