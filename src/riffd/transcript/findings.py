"""What riffd reports about a transcript: finding classes, the API errors they cause, advice."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any


class FindingClass(StrEnum):
    """Every kind of damage riffd reports; the values are the names users see."""

    DUPLICATE_TOOL_RESULT = "duplicate_tool_result"
    MISSING_TOOL_RESULT = "missing_tool_result"
    ORPHAN_TOOL_RESULT = "orphan_tool_result"
    DUPLICATE_TOOL_USE = "duplicate_tool_use"
    INVALID_TOOL_RESULT = "invalid_tool_result"
    OOM_RISK = "oom_risk"
    MALFORMED_LINE = "malformed_line"
    TORN_TAIL = "torn_tail"
    DUPLICATE_UUID = "duplicate_uuid"
    DANGLING_PARENT = "dangling_parent"
    PARENT_CYCLE = "parent_cycle"
    REDUNDANT_TOOL_CALL = "redundant_tool_call"
    PENDING_TOOL_CALL = "pending_tool_call"
    ORPHAN_SERVER_TOOL_USE = "orphan_server_tool_use"
    ORPHAN_SERVER_TOOL_RESULT = "orphan_server_tool_result"
    GLUED_RECORD = "glued_record"
    LONE_SURROGATE = "lone_surrogate"
    NUL_CHARACTER = "nul_character"
    INVALID_UTF8 = "invalid_utf8"
    THINKING_ONLY_TAIL = "thinking_only_tail"
    REPEATED_LINE = "repeated_line"


# The damage that stops current clients from resuming (they must be repaired on disk), and the
# damage current clients repair in memory when they load the file (written to disk so that older
# clients and other readers work too). Each can be turned off in the config (`repair.classes`).
REQUIRED_REPAIRS = frozenset(
    {
        FindingClass.DUPLICATE_TOOL_RESULT,
        FindingClass.MISSING_TOOL_RESULT,
        FindingClass.ORPHAN_TOOL_RESULT,
        FindingClass.DUPLICATE_TOOL_USE,
        FindingClass.TORN_TAIL,
        FindingClass.ORPHAN_SERVER_TOOL_RESULT,
        FindingClass.GLUED_RECORD,
        FindingClass.DANGLING_PARENT,
    }
)
OPTIONAL_REPAIRS = frozenset(
    {
        FindingClass.ORPHAN_SERVER_TOOL_USE,
        FindingClass.LONE_SURROGATE,
        FindingClass.NUL_CHARACTER,
        FindingClass.INVALID_UTF8,
        FindingClass.THINKING_ONLY_TAIL,
        FindingClass.MALFORMED_LINE,
        FindingClass.REPEATED_LINE,
    }
)
# The classes a repair plan edits; the others are reported and never touched.
REPAIRABLE = REQUIRED_REPAIRS | OPTIONAL_REPAIRS
# Of the optional ones, those that change or drop the bytes of a line the client only skips or reads
# leniently (a stray fragment, a character replaced): repaired only when the configuration names
# them, since riffd keeps malformed lines and a line's bytes unless asked (the one rule). The rest
# (an orphan server-tool block the client drops, a line written twice byte for byte) lose nothing.
OPT_IN_REPAIRS = frozenset(
    {
        FindingClass.LONE_SURROGATE,
        FindingClass.NUL_CHARACTER,
        FindingClass.INVALID_UTF8,
        FindingClass.THINKING_ONLY_TAIL,
        FindingClass.MALFORMED_LINE,
    }
)
# What riffd repairs with no configuration (`repair.classes`' default)
DEFAULT_REPAIRS = REPAIRABLE - OPT_IN_REPAIRS

# Which clients a finding breaks, measured with the real Claude Code (2.1.332; 2.1.75 and 1.0.128 for
# older clients): what the user will see on resume.
BREAKS_CURRENT = "breaks resume in current clients"
BREAKS_OLDER = "current clients cope; older clients and other readers fail"
BREAKS_BY_CLASS: dict[FindingClass, str] = {
    FindingClass.ORPHAN_SERVER_TOOL_RESULT: BREAKS_CURRENT,
    FindingClass.GLUED_RECORD: BREAKS_CURRENT,
    FindingClass.ORPHAN_SERVER_TOOL_USE: BREAKS_OLDER,
    FindingClass.MISSING_TOOL_RESULT: BREAKS_OLDER,
    FindingClass.ORPHAN_TOOL_RESULT: BREAKS_OLDER,
    FindingClass.DUPLICATE_TOOL_USE: BREAKS_OLDER,
    FindingClass.MALFORMED_LINE: BREAKS_OLDER,
    FindingClass.LONE_SURROGATE: BREAKS_OLDER,
    FindingClass.NUL_CHARACTER: BREAKS_OLDER,
    FindingClass.INVALID_UTF8: BREAKS_OLDER,
    FindingClass.THINKING_ONLY_TAIL: BREAKS_OLDER,
    FindingClass.REPEATED_LINE: BREAKS_OLDER,
}
# The `detail` of a dangling_parent that cuts the loaded conversation (its line is the oldest one
# Claude Code loads): current clients lose the history above it, or fail with a 400.
CUTS_HISTORY = "cuts_history"

# Classes that describe how a session went, not damage: reported, never repaired, and never a reason
# for `riffd scan` to exit 1 or for a health report to call riffd unhealthy. A pending tool call is
# a tool_use of the latest turn without its result while the session is live: its tool may still be
# running. It becomes a missing_tool_result only once the session is idle and it is still
# unanswered.
INFORMATIONAL = frozenset({FindingClass.REDUNDANT_TOOL_CALL, FindingClass.PENDING_TOOL_CALL})

# Exact texts the Messages API answers with (HTTP 400); `messages.N.content.M:` precedes them.
API_ERRORS: dict[FindingClass, str] = {
    FindingClass.MISSING_TOOL_RESULT: (
        "`tool_use` ids were found without `tool_result` blocks immediately after: {tool_id}"
    ),
    FindingClass.ORPHAN_TOOL_RESULT: (
        "unexpected `tool_use_id` found in `tool_result` blocks: {tool_id}. Each `tool_result` block must "
        "have a corresponding `tool_use` block in the previous message."
    ),
    FindingClass.DUPLICATE_TOOL_RESULT: (
        "each tool_use must have a single result. Found multiple `tool_result` blocks with id: {tool_id}"
    ),
    FindingClass.DUPLICATE_TOOL_USE: "`tool_use` ids must be unique",
    FindingClass.LONE_SURROGATE: "The request body is not valid JSON: no low surrogate in string",
}


@dataclass(frozen=True)
class Finding:
    """One problem in one file: its class, where it is (1-based lines), and what it would cause."""

    cls: FindingClass
    path: str
    lines: tuple[int, ...]
    message: str
    uuids: tuple[str, ...] = ()
    tool_id: str | None = None
    offset: int | None = None
    detail: str | None = None  # a sub-type, e.g. invalid_type / missing_field for invalid blocks
    api_error: str | None = field(default=None)

    @property
    def breaks(self) -> str | None:
        """Which clients this damage breaks on resume (BREAKS_CURRENT or BREAKS_OLDER), None when
        that was not measured."""
        if self.cls is FindingClass.DANGLING_PARENT:
            return BREAKS_CURRENT if self.detail == CUTS_HISTORY else BREAKS_OLDER
        return BREAKS_BY_CLASS.get(self.cls)

    @property
    def line(self) -> int:
        """The first line the finding names (0 when it names none)."""
        return self.lines[0] if self.lines else 0

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> Finding:
        """Given the `to_json` form of a finding, return it; raise ValueError or KeyError when it is
        not one."""
        return cls(
            FindingClass(item["class"]),
            str(item["path"]),
            tuple(item.get("lines", ())),
            str(item.get("message", "")),
            uuids=tuple(item.get("uuids", ())),
            tool_id=item.get("tool_id"),
            offset=item.get("offset"),
            detail=item.get("detail"),
            api_error=item.get("api_error"),
        )

    def to_json(self) -> dict[str, Any]:
        """Return the finding as a JSON-ready dict (the `--json` and manifest form): its fields in
        order, `cls` as `class`, None left out. Built field by field (dataclasses.asdict
        deep-copies: 30 µs a finding, which the daemon paid for every finding of a file at every
        append)."""
        out: dict[str, Any] = {
            "class": str(self.cls),
            "path": self.path,
            "lines": list(self.lines),
            "message": self.message,
            "uuids": list(self.uuids),
        }
        for name in ("tool_id", "offset", "detail", "api_error", "breaks"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


def api_error_for(cls: FindingClass, tool_id: str | None) -> str | None:
    """Given a finding class and tool id, return the API error text it causes, or None."""
    template = API_ERRORS.get(cls)
    if template is None:
        return None
    return template.format(tool_id=tool_id or "?")


def torn_tail(path: str, line: int, offset: int | None) -> Finding:
    """The finding of a torn last line: line `line` (1-based) of `path`, starting at byte `offset`,
    has no newline and is not a whole line (a scan: it is not valid JSON; the daemon: nothing was
    written for the quiet period). One finding for both, so `scan` and the daemon say the same."""
    return Finding(
        FindingClass.TORN_TAIL,
        path,
        (line,),
        "the last line is incomplete (no newline): a write was cut off, or is still going on; in a "
        "Claude Code transcript, once the session is idle, `riffd fix` (or the daemon, when it "
        "repairs) cuts it off after keeping it in the backup and the archive",
        offset=offset,
    )


# the `detail` of a missing_tool_result whose tool_use is in the latest turn
LATEST_TURN = "latest_turn"


def pending_while_live(findings: list[Finding], live: bool) -> list[Finding]:
    """Given a file's findings and whether its session is live, return them with every unanswered
    tool call of the latest turn as a pending_tool_call (informational) while live, and as a
    missing_tool_result once idle."""
    out = []
    for finding in findings:
        if (
            finding.cls is FindingClass.MISSING_TOOL_RESULT
            and finding.detail == LATEST_TURN
            and live
        ):
            finding = replace(
                finding,
                cls=FindingClass.PENDING_TOOL_CALL,
                api_error=None,
                message=f"tool_use {finding.tool_id} is waiting for its result: the session is live, "
                "so its tool may still be running (not damage; judged again once the session is idle)",
            )
        elif finding.cls is FindingClass.PENDING_TOOL_CALL and not live:
            finding = replace(
                finding,
                cls=FindingClass.MISSING_TOOL_RESULT,
                api_error=api_error_for(FindingClass.MISSING_TOOL_RESULT, finding.tool_id),
                message=f"tool_use {finding.tool_id} has no tool_result on the loaded conversation "
                "(latest turn: the tool may still be running)",
            )
        out.append(finding)
    return out


def has_latest_turn_calls(findings: list[Finding]) -> bool:
    """Return True when some finding is an unanswered tool call of the latest turn (pending or
    missing)."""
    return any(
        finding.cls is FindingClass.PENDING_TOOL_CALL
        or (finding.cls is FindingClass.MISSING_TOOL_RESULT and finding.detail == LATEST_TURN)
        for finding in findings
    )
