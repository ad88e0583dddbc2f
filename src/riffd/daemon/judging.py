"""Judging one transcript once its new lines are read: `judge` decides, in one place, what the
worker concludes beyond the detectors' findings: the redundant tool calls the tracker found, the
latest turn's unanswered calls (pending while the session is live, missing once it is idle), a torn
last line (only once nothing was written for the quiet period), how many findings a repair may fix,
whether a repair is due, and when to look at the file again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from riffd.claude_code.liveness import claude_dirs_for, session_liveness
from riffd.daemon.outcome import WorkerSettings
from riffd.fsio import RetryingFS
from riffd.tracker.tracker import RedundantCall
from riffd.transcript.findings import (
    Finding,
    FindingClass,
    has_latest_turn_calls,
    pending_while_live,
    torn_tail,
)
from riffd.transcript.index import TranscriptIndex


@dataclass(frozen=True)
class Seen:
    """What the worker saw of one file, for `judge`: the findings of the lines read (or, for an
    unchanged file, the ones stored, with the `stored_repairable` count the store holds); the index
    they came from, with the redundant calls the tracker found in them (`repeats`, None without a
    tracker) and the stored findings those join; the bytes of an unfinished last line (`tail`) and
    the file's modification time."""

    name: str
    findings: list[Finding]
    index: TranscriptIndex | None = None
    repeats: dict[str, RedundantCall] | None = None
    stored: list[dict[str, Any]] | None = None
    tail: int = 0
    mtime: float = 0.0
    stored_repairable: int | None = None


@dataclass(frozen=True)
class Verdict:
    """The worker's judgement of one file: its findings, how many a repair may fix, whether a repair
    is due, and when to look again (seconds; None: at its next change)."""

    findings: list[Finding]
    repairable: int
    repair_due: bool
    look_again: float | None = None


def judge(seen: Seen, live: Callable[[], bool], settings: WorkerSettings, now: float) -> Verdict:
    """Given what was seen of a file, whether its session is live (asked only when it matters) and
    the settings, return the verdict on it at `now`."""
    findings = list(seen.findings)
    if seen.repeats is not None and seen.index is not None:
        findings += redundant_findings(seen.name, seen.index, seen.stored or [], seen.repeats)
    if has_latest_turn_calls(findings):
        findings = pending_while_live(findings, live())
    if seen.tail and seen.index is not None and now - seen.mtime > settings.quiet_period:
        findings.append(torn_tail(seen.name, len(seen.index) + 1, seen.index.end))
    if seen.stored_repairable is not None and findings == seen.findings:
        repairable = seen.stored_repairable  # unchanged: a repair found impossible stays so
    else:
        repairable = sum(1 for finding in findings if finding.cls in settings.classes)
    pending = any(finding.cls is FindingClass.PENDING_TOOL_CALL for finding in findings)
    return Verdict(
        findings,
        repairable,
        repair_due=settings.repair and repairable > 0,
        look_again=settings.look_again_after if pending else None,
    )


def liveness(
    path: Path, session_id: str | None, settings: WorkerSettings, fs: RetryingFS
) -> tuple[bool, str]:
    """Return whether the session of the transcript `path` may be live, and why."""
    return session_liveness(
        path,
        claude_dirs_for(path, settings.claude_dir, settings.roots),
        settings.quiet_period,
        session_id=session_id,
        fs=fs,
    )


def redundant_findings(
    name: str,
    index: TranscriptIndex,
    stored: list[dict[str, Any]],
    repeats: dict[str, RedundantCall],
) -> list[Finding]:
    """Given a file's index, its stored findings and the redundant calls just found in it (by the
    repeat's tool_use id), return its redundant_tool_call findings: the stored ones and the new
    ones, each repeat once, dropping repeats no longer in the file and placing each at its lines'
    current numbers (by uuid)."""
    kept: dict[str, Finding] = {}
    for item in stored:
        if item.get("class") == FindingClass.REDUNDANT_TOOL_CALL and isinstance(
            item.get("tool_id"), str
        ):
            kept[item["tool_id"]] = Finding(
                FindingClass.REDUNDANT_TOOL_CALL,
                name,
                tuple(item.get("lines", ())),
                str(item.get("message", "")),
                uuids=tuple(item.get("uuids", ())),
                tool_id=item["tool_id"],
                detail=item.get("detail"),
            )
    for tool_id, record in repeats.items():
        kept[tool_id] = redundant_finding(record, name)
    findings: list[Finding] = []
    for tool_id, finding in kept.items():
        if tool_id not in index.tool_uses:
            continue  # the file was rewritten without that call
        lines = tuple(
            index.line_of_uuid[uuid] + 1 for uuid in finding.uuids if uuid in index.line_of_uuid
        )
        findings.append(
            replace(finding, lines=lines) if len(lines) == len(finding.lines) else finding
        )
    return sorted(findings, key=lambda finding: finding.lines[-1:])


def redundant_finding(record: RedundantCall, path: str) -> Finding:
    """Given a redundant call found in the transcript `path`, return its informational finding."""
    gap = record.later_time - record.earlier_time
    return Finding(
        FindingClass.REDUNDANT_TOOL_CALL,
        path,
        tuple(line for line in (record.earlier_line, record.later_line) if line is not None),
        f"{record.tool} call {record.later_id} repeats the identical call {record.earlier_id} "
        f"made {gap:.0f} s earlier; about {record.wasted_bytes:,} bytes of result repeated "
        "(informational; nothing to repair)",
        uuids=tuple(uuid for uuid in (record.earlier_uuid, record.later_uuid) if uuid is not None),
        tool_id=record.later_id,
        detail=record.tool,
    )
