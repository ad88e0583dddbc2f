"""`riffd show SESSION|FILE [--format text|json|md]`: the structure of a session, read once.

For each session it prints the active chain (length, segments, compactions), the branches, the roots
and orphans, parent cycles, the sidechains by agent name, the findings of `riffd scan`, and the
redundant tool calls found by the tool-call tracker (riffd.tracker). Line numbers are 1-based, as in
`riffd scan`.

The JSON document (`--format json`, schema 1) is `{"schema", "riffd", "sessions": [...], "errors":
[...]}`; each session is the dict `describe` returns:

- `path`, `session_id`, `lines`, `bytes`
- `chain`: `length` (lines on the active chain), `root_line`, `leaf_line`, `loaded_lines` (the chain
  plus the lines Claude Code splices in), `segments`, `compactions` (compact boundaries in the
  file), `compact_boundaries` (the lines of those the chain crosses)
- `branches`: `count` (lines with several children), `forks` (rewinds, edits, retries: `line`,
  `uuid`, `children`, `active_child`), `tool_splits` (the count of the others: a tool call's result
  or progress beside the next line)
- `roots`: `line`, `uuid`, `kind` (root, orphan, external, sidechain), `missing_parent`; `orphans`:
  count
- `cycles`: each `lines` and `uuids`; `cycle_at`: where the active chain's walk stopped, or null
- `sidechains`: `agent`, `layout` (inline, beside, subagents), `path`, `first_line`, `lines`,
  `agent_id`, `tool_use_id`, `anchor_line`, `anchor_path`, `result_line`, `linked_by`; `agents`: per
  agent name, `sidechains` and `lines`
- `findings`: as in `riffd scan --json`
- `redundant_calls`: the tool calls that repeat an earlier identical call, as
  `riffd.tracker.tracker.redundant_calls_in` reports them, and `redundant_calls_note`: always null
  (kept in the document for readers of schema 1)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from riffd import __version__
from riffd.archive.schema import ARCHIVE_NAME
from riffd.commands.arguments import archived_hint
from riffd.commands.config_loading import config_for_folders
from riffd.commands.output import EXIT_ERROR, EXIT_OK, print_json, riffd_advice
from riffd.tracker.tracker import redundant_calls_in
from riffd.transcript.conversation import Conversation, conversation_of
from riffd.transcript.scan import ScannedFile, index_file
from riffd.transcript.sidechains import Sidechain, find_sidechains
from riffd.transcript.targets import agent_files_of, resolve_target

FORMATS = ("text", "json", "md")
SHOW_SCHEMA = 1
LISTED = 20  # text and md list this many forks, roots and cycles; json lists all


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """Add `riffd show` to the subcommands of `riffd`."""
    show = commands.add_parser(
        "show",
        help="show a session's structure: chain, branches, compactions, sidechains by agent, findings",
        description="Show the structure of a session: its active chain across compactions, branches, roots and "
        "orphans, cycles, sidechains named by their agent, findings and redundant tool calls. Changes nothing. "
        "SESSION|FILE is a transcript file, a session id or a unique prefix of one (found under the Claude Code "
        "roots), `latest` (the newest session of the project in the current folder) or a project path (every "
        "session of its Claude Code folder).",
    )
    show.add_argument(
        "target",
        metavar="SESSION|FILE",
        help="a transcript file, a session id (or a unique prefix), latest, or a project path",
    )
    show.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text (default), json (one document on stdout) or md (Markdown)",
    )
    show.set_defaults(run=run_show)


def run_show(args: argparse.Namespace) -> int:
    """`riffd show`: print each session's structure; exit 0, or 2 when a target cannot be found or
    read."""
    config, riffd = config_for_folders(args), riffd_advice(args)
    try:  # (a session id, a prefix or `latest`: under the configuration's roots)
        files = resolve_target(args.target, config.roots, subagents=False, riffd=riffd)
    except FileNotFoundError as exc:
        hint = archived_hint(args.target, config.state_dir / ARCHIVE_NAME, riffd)
        print(f"riffd: error: {exc}{hint}", file=sys.stderr)
        return EXIT_ERROR
    sessions: list[dict[str, Any]] = []
    errors: list[str] = []
    for path in files:
        try:
            sessions.append(describe(path))
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
    if args.format == "json":
        document = {
            "schema": SHOW_SCHEMA,
            "riffd": __version__,
            "sessions": sessions,
            "errors": errors,
        }
        print_json(document)
    else:
        render = render_markdown if args.format == "md" else render_text
        sys.stdout.write("\n".join(render(session) for session in sessions))
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    return EXIT_ERROR if errors else EXIT_OK


def describe(path: Path) -> dict[str, Any]:
    """Read one transcript (and its agent files) and return its structure as the JSON-ready dict
    documented above; raise OSError when a file cannot be read."""
    scanned = index_file(path)
    index = scanned.index
    conversation = conversation_of(index)
    agent_files = [] if path.name.startswith("agent-") else agent_files_of(path, index.session_id)
    sidechains = find_sidechains(index, agent_files)
    redundant, note = redundant_calls(path)
    return {
        "path": str(path),
        "session_id": index.session_id,
        "lines": len(index),
        "bytes": index.end - index.start,
        "chain": _chain_json(conversation, scanned),
        "branches": {
            "count": len(conversation.branches),
            "forks": [
                {
                    "line": branch.line + 1,
                    "uuid": index.uuids[branch.line],
                    "children": _numbers(branch.children),
                    "active_child": branch.active_child + 1,
                }
                for branch in conversation.forks
            ],
            "tool_splits": len(conversation.branches) - len(conversation.forks),
        },
        "roots": [
            {
                "line": root.line + 1,
                "uuid": index.uuids[root.line],
                "kind": root.kind,
                "missing_parent": root.missing_parent,
            }
            for root in conversation.roots
        ],
        "orphans": len(conversation.orphans),
        "cycles": [
            {"lines": _numbers(cycle), "uuids": [index.uuids[line] for line in cycle]}
            for cycle in conversation.cycles
        ],
        "cycle_at": None if conversation.cycle_at is None else conversation.cycle_at + 1,
        "sidechains": [_sidechain_json(sidechain) for sidechain in sidechains],
        "agents": _agents_json(sidechains),
        "findings": [finding.to_json() for finding in scanned.findings],
        "redundant_calls": redundant,
        "redundant_calls_note": note,
    }


def redundant_calls(path: Path) -> tuple[list[Any], str | None]:
    """Return (the redundant tool calls of a transcript as JSON-ready values, None): the calls that
    repeat an earlier identical call of the session, as riffd.tracker finds them. The second item, a
    note saying why the calls were not checked, is always None now that the tracker is part of riffd
    (the JSON keeps the field)."""
    return [_jsonable(call) for call in redundant_calls_in(path)], None


def _jsonable(value: Any) -> Any:
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict | list | str | int | float | bool) or value is None:
        return value
    return str(value)


def _numbers(lines: Iterable[int]) -> list[int]:
    return [line + 1 for line in lines]


def _chain_json(conversation: Conversation, scanned: ScannedFile) -> dict[str, Any]:
    chain = conversation.chain
    return {
        "length": len(chain),
        "root_line": chain[0] + 1 if chain else None,
        "leaf_line": chain[-1] + 1 if chain else None,
        "loaded_lines": scanned.loaded.count,
        "segments": conversation.segments,
        "compactions": conversation.compactions,
        "compact_boundaries": _numbers(conversation.boundaries),
    }


def _sidechain_json(sidechain: Sidechain) -> dict[str, Any]:
    return {
        "agent": sidechain.agent,
        "layout": sidechain.layout,
        "path": sidechain.path,
        "first_line": sidechain.first_line + 1,
        "lines": sidechain.line_count,
        "agent_id": sidechain.agent_id,
        "tool_use_id": sidechain.tool_use_id,
        "anchor_line": None if sidechain.anchor is None else sidechain.anchor + 1,
        "anchor_path": sidechain.anchor_path,
        "result_line": None if sidechain.result_line is None else sidechain.result_line + 1,
        "linked_by": sidechain.linked_by,
    }


def _agents_json(sidechains: list[Sidechain]) -> dict[str, dict[str, int]]:
    agents: dict[str, dict[str, int]] = {}
    for sidechain in sidechains:
        entry = agents.setdefault(sidechain.agent, {"sidechains": 0, "lines": 0})
        entry["sidechains"] += 1
        entry["lines"] += sidechain.line_count
    return dict(sorted(agents.items()))


# --- rendering
# ---------------------------------------------------------------------------------------------


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _summary_lines(session: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(heading line, detail lines) pairs shared by the text and Markdown renderings."""
    chain, branches = session["chain"], session["branches"]
    parts: list[tuple[str, list[str]]] = []
    if chain["length"]:
        parts.append(
            (
                f"chain: {_plural(chain['length'], 'line')} from line {chain['root_line']} to line {chain['leaf_line']} "
                f"({chain['loaded_lines']} loaded), {_plural(chain['segments'], 'segment')}, "
                f"{_plural(chain['compactions'], 'compaction')} in the file",
                [
                    f"compact boundary at line {line}"
                    for line in chain["compact_boundaries"][:LISTED]
                ],
            )
        )
    else:
        parts.append(("chain: no message lines", []))
    forks = branches["forks"]
    parts.append(
        (
            f"branches: {branches['count']} ({_plural(len(forks), 'fork')}, "
            f"{_plural(branches['tool_splits'], 'tool-call split')})",
            [
                f"fork at line {fork['line']}: children at lines {', '.join(map(str, fork['children']))}; "
                f"active: line {fork['active_child']}"
                for fork in forks[:LISTED]
            ],
        )
    )
    roots = session["roots"]
    parts.append(
        (
            f"roots: {len(roots)} ({_plural(session['orphans'], 'orphan')})",
            [
                f"{root['kind']} at line {root['line']}"
                + (
                    f": parent {root['missing_parent']} names no line"
                    if root["kind"] == "orphan"
                    else ""
                )
                for root in roots[:LISTED]
            ],
        )
    )
    cycles = session["cycles"]
    parts.append(
        (
            f"cycles: {len(cycles) or 'none'}",
            [
                f"through uuid {', '.join(map(str, cycle['uuids']))} (lines {', '.join(map(str, cycle['lines']))})"
                for cycle in cycles[:LISTED]
            ],
        )
    )
    agents = ", ".join(
        f"{name} {entry['sidechains']} ({_plural(entry['lines'], 'line')})"
        for name, entry in session["agents"].items()
    )
    parts.append(
        (
            f"sidechains: {len(session['sidechains'])}" + (f": {agents}" if agents else ""),
            [_sidechain_text(sidechain, session["path"]) for sidechain in session["sidechains"]],
        )
    )
    findings = session["findings"]
    parts.append(
        (
            f"findings: {len(findings)}",
            [
                f"line {', '.join(map(str, finding['lines'][:6]))}: {finding['class']}: {finding['message']}"
                for finding in findings[:LISTED]
            ],
        )
    )
    redundant = session["redundant_calls"]
    parts.append(
        (
            f"redundant tool calls: {session['redundant_calls_note'] or len(redundant)}",
            [_redundant_words(call) for call in redundant[:LISTED]],
        )
    )
    return parts


def _redundant_words(call: dict[str, Any]) -> str:
    """One redundant tool call (the JSON form of a tracker.RedundantCall) in words."""
    later = call.get("later_line") or "-"
    earlier = call.get("earlier_line") or "-"
    seconds = float(call.get("later_time") or 0) - float(call.get("earlier_time") or 0)
    return (
        f"line {later}: {call.get('tool')} {call.get('later_id')} repeats {call.get('earlier_id')} "
        f"(line {earlier}, {seconds:.0f} s earlier): {int(call.get('wasted_bytes') or 0):,} bytes "
        "of result again"
    )


def _sidechain_text(sidechain: dict[str, Any], session_path: str) -> str:
    where = "unlinked"
    if sidechain["anchor_line"] is not None:
        where = f"line {sidechain['anchor_line']}"
        if sidechain["anchor_path"] != session_path:
            where += f" of {sidechain['anchor_path']}"
    source = (
        f"lines from {sidechain['first_line']}"
        if sidechain["layout"] == "inline"
        else sidechain["path"]
    )
    agent_id = f", agent {sidechain['agent_id']}" if sidechain["agent_id"] else ""
    return (
        f"{where}: {sidechain['agent']} ({sidechain['layout']}, {_plural(sidechain['lines'], 'line')}{agent_id}, "
        f"named by {sidechain['linked_by']}) {source}"
    )


def render_text(session: dict[str, Any]) -> str:
    """Return a readable summary of one session (a `describe` dict)."""
    out = [
        f"{session['path']}  (session {session['session_id']}, {_plural(session['lines'], 'line')})"
    ]
    for heading, details in _summary_lines(session):
        out.append(f"  {heading}")
        out.extend(f"    {detail}" for detail in details)
    return "\n".join(out) + "\n"


def render_markdown(session: dict[str, Any]) -> str:
    """Return the same summary as Markdown: a heading per session, a bullet per part, sub-bullets
    for details."""
    out = [
        f"## `{session['path']}`",
        "",
        f"Session `{session['session_id']}`, {_plural(session['lines'], 'line')}.",
        "",
    ]
    for heading, details in _summary_lines(session):
        name, _, rest = heading.partition(":")
        out.append(f"- **{name}**:{rest}")
        out.extend(f"  - {detail}" for detail in details)
    return "\n".join(out) + "\n"
