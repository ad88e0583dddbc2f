"""The sidechains (subagent runs) of a session, each named by its agent.

`find_sidechains(index, agent_files)` reads: a subagent's name is the `input.subagent_type` of the
Task (or, in newer releases, Agent) tool call that started it, and what links a run of sidechain
lines to that call differs by layout (see shared/transcript-format.md, section 1):

- inline `isSidechain` lines (1.0.x): the run's first user message is the Task call's
  `input.prompt`.
- `agent-<id>.jsonl` beside the session (2.0.x) and `<session>/subagents/agent-<id>.jsonl` (2.1.x):
  the session holds `progress` lines with `data.type == "agent_progress"`, `data.agentId` and
  `parentToolUseID` (the Task's tool_use id), and the Task's result line carries
  `toolUseResult.agentId`; either names the call. Failing both, the agent's first user message is
  matched against the prompts of the Task calls not linked yet, and failing that, the `agentType` of
  `agent-<id>.meta.json` (2.1.x) names it without a call.
- compaction runs as an agent whose id starts with `acompact` (`agent-acompact-*.jsonl`); no Task
  call starts it, and it is named "compaction".

A sidechain is "unknown" only when none of this links it. The links are read by
riffd.transcript.agent_links (only the few lines that can hold one are parsed).
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import orjson

from riffd.fsio import REAL_FILES, RetryingFS
from riffd.transcript.agent_links import Links, TaskCall, scan_links
from riffd.transcript.index import ASSISTANT, MESSAGE, SIDECHAIN, TranscriptIndex
from riffd.transcript.index_builder import IndexBuilder
from riffd.transcript.loaded import newest_leaf
from riffd.transcript.reader import iter_chunks, parse_line, read_span

log = logging.getLogger(__name__)

COMPACTION_AGENT = "compaction"
UNKNOWN_AGENT = "unknown"
COMPACTION_PREFIX = "acompact"


# Sidechain layouts.
INLINE = "inline"  # 1.0.x: isSidechain lines in the session file
BESIDE = "beside"  # 2.0.x: agent-<id>.jsonl next to the session file
SUBAGENTS = "subagents"  # 2.1.x: <session>/subagents/agent-<id>.jsonl


@dataclass(frozen=True)
class Sidechain:
    """One subagent run, named by its agent.

    `path` holds its lines: from `first_line`, `line_count` lines with a uuid (a whole agent file,
    or one inline run). `anchor` is the line it hangs from in `anchor_path` (the Task tool_use line;
    for a compaction agent, the session line it summarises up to), None when nothing links it;
    `result_line` is the Task's result line there. `linked_by` says what gave the name: "prompt",
    "progress", "tool_result", "meta", "compaction" or "none".
    """

    agent: str
    layout: str
    path: str
    first_line: int
    line_count: int
    agent_id: str | None = None
    tool_use_id: str | None = None
    anchor: int | None = None
    anchor_path: str | None = None
    result_line: int | None = None
    linked_by: str = "none"


@dataclass
class _AgentFile:
    path: Path
    agent_id: str
    index: TranscriptIndex


def find_sidechains(
    index: TranscriptIndex,
    agent_files: Sequence[Path] = (),
    *,
    fs: RetryingFS = REAL_FILES,
) -> list[Sidechain]:
    """Given a finished session index and its agent files
    (`riffd.transcript.targets.agent_files_of`), return its sidechains named by agent, ordered by
    the line they hang from (unlinked ones last). Raise OSError when a file cannot be read."""
    links = Links()
    scan_links(index, links, fs=fs)
    agents = []
    for path in agent_files:
        agent_index = _index_agent_file(path, index, fs=fs)
        scan_links(agent_index, links, fs=fs)
        agents.append(_AgentFile(path, path.stem.removeprefix("agent-"), agent_index))
    indexes = {index.path: index, **{str(agent.path): agent.index for agent in agents}}
    decided: dict[int, Sidechain] = {}
    for position, agent in enumerate(agents):  # links by id first: they are certain
        found = _by_agent_id(agent, links, indexes)
        if found is not None:
            decided[position] = found
    runs = _inline_runs(index)
    inline = [
        _inline_sidechain(index, start, count, links, indexes, fs=fs) for start, count in runs
    ]
    for position, agent in enumerate(agents):
        if position not in decided:
            decided[position] = _by_prompt_or_meta(agent, index, links, indexes, fs=fs)
    sidechains = inline + [decided[position] for position in range(len(agents))]
    return _ordered(sidechains, index.path)


def _index_agent_file(path: Path, session: TranscriptIndex, *, fs: RetryingFS) -> TranscriptIndex:
    """Index an agent file; parents that are lines of the session (compaction agents) become
    cross-file links."""
    builder = IndexBuilder(str(path))
    for offset, lines, terminated in iter_chunks(path, fs=fs):
        builder.add_lines(offset, lines, terminated)
    agent_index = builder.finish()
    in_session = {
        parent for parent in agent_index.dangling.values() if parent in session.line_of_uuid
    }
    if in_session:
        builder.resolve_external(in_session)
    return agent_index


def _message_text(index: TranscriptIndex, line: int, *, fs: RetryingFS) -> str | None:
    """Re-read one line and return its message text (a string, or its text blocks joined),
    stripped."""
    record = parse_line(read_span(index.path, *index.span(line), fs=fs).rstrip(b"\n"))
    message = record.get("message") if isinstance(record, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        texts = [
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ]
        return "\n".join(texts).strip() if texts else None
    return None


def _first_prompt_line(index: TranscriptIndex) -> int | None:
    """The first user message of a file (an agent's prompt), None when it has none."""
    for line, line_flags in enumerate(index.flags):
        if line_flags & MESSAGE and not line_flags & ASSISTANT:
            return line
    return None


def _claim_by_prompt(
    prompt: str | None, before: int | None, path: str, links: Links
) -> TaskCall | None:
    """The first unclaimed Task call asking exactly `prompt`, preferring one before line `before` of
    `path`."""
    if not prompt:
        return None
    candidates = sorted(
        (
            call
            for call in links.tasks.values()
            if call.prompt == prompt and call.tool_id not in links.claimed
        ),
        key=lambda call: (call.path != path, call.line),
    )
    if before is not None:
        earlier = [call for call in candidates if call.path == path and call.line < before]
        candidates = earlier or candidates
    if not candidates:
        return None
    links.claimed.add(candidates[0].tool_id)
    return candidates[0]


def _with_call(
    base: Sidechain, call: TaskCall, linked_by: str, indexes: dict[str, TranscriptIndex]
) -> Sidechain:
    """`base` named and anchored by the Task call that started it."""
    owner = indexes.get(call.path)
    results = owner.results.get(call.tool_id) if owner is not None else None
    return replace(
        base,
        agent=call.subagent_type or UNKNOWN_AGENT,
        tool_use_id=call.tool_id,
        anchor=call.line,
        anchor_path=call.path,
        result_line=results[0].line if results else None,
        linked_by=linked_by,
    )


def _inline_runs(index: TranscriptIndex) -> list[tuple[int, int]]:
    """(first line, line count) of each run of inline sidechain lines, grouped by the line they
    start from."""
    flags, parents, uuids = index.flags, index.parents, index.uuids
    sidechain_table = bytes(
        1 if value & SIDECHAIN and value & MESSAGE else 0 for value in range(256)
    )
    main_table = bytes(
        1 if value & MESSAGE and not value & SIDECHAIN else 0 for value in range(256)
    )
    first = flags.translate(sidechain_table).find(1)
    if first < 0 or flags.translate(main_table).find(1) < 0:
        return []  # no sidechain lines, or only them: a subagent's own transcript
    run_of = array("i", [-1]) * len(flags)
    starts: list[int] = []
    counts: list[int] = []
    for line in range(first, len(flags)):
        if uuids[line] is None:
            continue
        parent, line_flags = parents[line], flags[line]
        if (
            0 <= parent < line
            and run_of[parent] >= 0
            and (line_flags & SIDECHAIN or not line_flags & MESSAGE)
        ):
            run = run_of[parent]
        elif line_flags & SIDECHAIN:
            run = len(starts)
            starts.append(line)
            counts.append(0)
        else:
            continue
        run_of[line] = run
        counts[run] += 1
    return list(zip(starts, counts, strict=True))


def _inline_sidechain(
    index: TranscriptIndex,
    start: int,
    count: int,
    links: Links,
    indexes: dict[str, TranscriptIndex],
    *,
    fs: RetryingFS,
) -> Sidechain:
    base = Sidechain(UNKNOWN_AGENT, INLINE, index.path, start, count)
    call = _claim_by_prompt(_message_text(index, start, fs=fs), start, index.path, links)
    if call is not None:
        return _with_call(base, call, "prompt", indexes)
    parent = index.parents[start]
    return replace(base, anchor=parent, anchor_path=index.path) if parent >= 0 else base


def _layout(path: Path) -> str:
    return SUBAGENTS if path.parent.name == "subagents" else BESIDE


def _line_count(index: TranscriptIndex) -> int:
    return len(index.uuids) - index.uuids.count(None)


def _by_agent_id(
    agent: _AgentFile, links: Links, indexes: dict[str, TranscriptIndex]
) -> Sidechain | None:
    if agent.agent_id.startswith(COMPACTION_PREFIX):
        return None  # decided later: a compaction agent has no Task call
    found = links.agent_tool.get(agent.agent_id)
    call = links.tasks.get(found[0]) if found else None
    if found is None or call is None:
        return None
    links.claimed.add(call.tool_id)
    base = Sidechain(
        UNKNOWN_AGENT,
        _layout(agent.path),
        str(agent.path),
        0,
        _line_count(agent.index),
        agent_id=agent.agent_id,
    )
    return _with_call(base, call, found[1], indexes)


def _by_prompt_or_meta(
    agent: _AgentFile,
    session: TranscriptIndex,
    links: Links,
    indexes: dict[str, TranscriptIndex],
    *,
    fs: RetryingFS,
) -> Sidechain:
    base = Sidechain(
        UNKNOWN_AGENT,
        _layout(agent.path),
        str(agent.path),
        0,
        _line_count(agent.index),
        agent_id=agent.agent_id,
    )
    anchor = _session_anchor(agent.index, session)
    if anchor is not None:
        base = replace(base, anchor=anchor, anchor_path=session.path)
    if agent.agent_id.startswith(COMPACTION_PREFIX):
        return replace(base, agent=COMPACTION_AGENT, linked_by="compaction")
    prompt_line = _first_prompt_line(agent.index)
    prompt = _message_text(agent.index, prompt_line, fs=fs) if prompt_line is not None else None
    call = _claim_by_prompt(prompt, None, session.path, links)
    if call is not None:
        return _with_call(base, call, "prompt", indexes)
    agent_type = _meta_agent_type(agent.path)
    if agent_type is not None:
        return replace(base, agent=agent_type, linked_by="meta")
    return base


def _session_anchor(agent_index: TranscriptIndex, session: TranscriptIndex) -> int | None:
    """The session line an agent's active chain starts from (compaction agents hang from session
    lines)."""
    if not agent_index.external_parent:
        return None
    line = newest_leaf(agent_index)
    seen: set[int] = set()
    while line is not None and line >= 0 and line not in seen:
        seen.add(line)
        if line in agent_index.external_parent:
            return session.line_of_uuid.get(agent_index.external_parent[line])
        line = agent_index.parents[line]
    lines = [session.line_of_uuid.get(parent) for parent in agent_index.external_parent.values()]
    return max((found for found in lines if found is not None), default=None)


def _meta_agent_type(path: Path) -> str | None:
    """The `agentType` of `agent-<id>.meta.json` beside an agent file (2.1.x), None when absent or
    unreadable."""
    meta = path.with_suffix(".meta.json")
    try:
        record = orjson.loads(meta.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        log.debug("%s: not used to name the agent: %s", meta, exc)
        return None
    agent_type = record.get("agentType") if isinstance(record, dict) else None
    return agent_type if isinstance(agent_type, str) and agent_type else None


def _ordered(sidechains: list[Sidechain], session_path: str) -> list[Sidechain]:
    """Sidechains in the order of the session line they hang from; nested agents after their parent
    agent's place, unlinked ones last."""
    place = {
        sidechain.path: sidechain.anchor
        for sidechain in sidechains
        if sidechain.anchor_path == session_path and sidechain.layout != INLINE
    }
    unplaced = float("inf")

    def key(sidechain: Sidechain) -> tuple[float, int, int, str, int]:
        anchor = sidechain.anchor if sidechain.anchor is not None else -1
        if sidechain.anchor_path == session_path:
            return float(anchor), 0, anchor, sidechain.path, sidechain.first_line
        if sidechain.anchor_path is not None:
            outer = place.get(sidechain.anchor_path)
            return (
                (float(outer) if outer is not None else unplaced),
                1,
                anchor,
                sidechain.path,
                sidechain.first_line,
            )
        return unplaced, 2, 0, sidechain.path, sidechain.first_line

    return sorted(sidechains, key=key)
