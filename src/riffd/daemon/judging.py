"""Judging one transcript once its new lines are read: `judge` decides, in one place, what the
worker concludes beyond the detectors' findings: the redundant tool calls the tracker found, the
latest turn's unanswered calls (pending while the session is live, missing once it is idle), a torn
last line (one that is not a JSON object, as `riffd scan` says, and only once nothing was written for the
quiet period: the file is looked at again then), how many findings a repair may fix,
whether a repair is due, and when to look at the file again.
"""

from __future__ import annotations

import bisect
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

# seconds past the quiet period at which a file ending in an unfinished line is looked at again
TAIL_MARGIN = 1.0


@dataclass(frozen=True)
class Seen:
    """What the worker saw of one file, for `judge`: the findings of the lines read (or, for an
    unchanged file, the ones stored, with the `stored_repairable` count the store holds); the index
    they came from, with its redundant_tool_call findings (`redundant`, from `RedundantCalls`; None
    without a tracker); the bytes of an unfinished last line (`tail`), whether it is no record
    (`tail_torn`: not a JSON object) and the file's modification time."""

    name: str
    findings: list[Finding]
    index: TranscriptIndex | None = None
    redundant: list[Finding] | None = None
    tail: int = 0
    mtime: float = 0.0
    stored_repairable: int | None = None
    tail_torn: bool = False


@dataclass(frozen=True)
class Verdict:
    """The worker's judgement of one file: its findings, how many a repair may fix, whether a repair
    is due, and when to look again (seconds; None: at its next change)."""

    findings: list[Finding]
    repairable: int
    repair_due: bool
    look_again: float | None = None
    judged_at: float | None = None  # the time it was judged at (None: a verdict on stored findings)


def judge(seen: Seen, live: Callable[[], bool], settings: WorkerSettings, now: float) -> Verdict:
    """Given what was seen of a file, whether its session is live (asked only when it matters) and
    the settings, return the verdict on it at `now`. Its cost follows the detectors' findings (few on
    a healthy file), not the redundant calls held, which a long session gathers by the thousand and
    which are never pending, missing nor repairable: an append costs the same at 10 MB and 1 GB."""
    found = list(seen.findings)
    if has_latest_turn_calls(found):
        found = pending_while_live(found, live())
    torn = []
    quiet_for = now - seen.mtime
    if seen.tail_torn and seen.index is not None and quiet_for > settings.quiet_period:
        torn.append(torn_tail(seen.name, len(seen.index) + 1, seen.index.end))
    redundant = seen.redundant if seen.redundant is not None and seen.index is not None else []
    findings = found + redundant + torn
    if seen.stored_repairable is not None and not redundant and findings == seen.findings:
        repairable = seen.stored_repairable  # unchanged: a repair found impossible stays so
    else:
        # (a redundant call is never repaired: riffd.transcript.findings.REPAIRABLE)
        repairable = sum(1 for finding in found + torn if finding.cls in settings.classes)
    pending = any(finding.cls is FindingClass.PENDING_TOOL_CALL for finding in found)
    waits = [settings.look_again_after] if pending else []
    if seen.tail and quiet_for <= settings.quiet_period:
        # an unfinished last line, judged and archived once nothing was written for the quiet
        # period: look again then, whether or not the file changes meanwhile
        waits.append(settings.quiet_period - quiet_for + TAIL_MARGIN)
    return Verdict(
        findings,
        repairable,
        repair_due=settings.repair and repairable > 0,
        look_again=min(waits) if waits else None,
        judged_at=now,
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
    findings = [
        placed(finding, index)
        for tool_id, finding in kept.items()
        if tool_id in index.tool_uses  # (else the file was rewritten without that call)
    ]
    return sorted(findings, key=_last_line)


class RedundantCalls:
    """The redundant_tool_call findings the worker judged last, per file that has any: an append's
    new repeats join them at the cost of those repeats, where `redundant_findings` rebuilds them
    from every stored finding (a file read from its start, rewritten, or first seen by this
    daemon). An append moves no line and removes no call, so what was judged stays true."""

    def __init__(self) -> None:
        self._held: dict[str, list[Finding]] = {}  # in `redundant_findings` order

    def judged(
        self,
        name: str,
        index: TranscriptIndex,
        repeats: dict[str, RedundantCall],
        stored: Callable[[], list[dict[str, Any]]],
        *,
        appended: bool,
    ) -> list[Finding]:
        """Given a file's index, the repeats just found in it and its stored findings (asked only
        when needed), return its redundant_tool_call findings; `appended`: the lines read were
        added to the index of the file judged last (its held findings hold)."""
        held = self._held.get(name)
        if not appended or held is None:
            found = redundant_findings(name, index, stored(), repeats)
        else:
            found = list(held)
            for tool_id, record in repeats.items():
                if tool_id in index.tool_uses:
                    _place(found, placed(redundant_finding(record, name), index))
        self.remember(name, found)
        return found

    def remember(self, name: str, found: list[Finding]) -> None:
        """Hold `found` as the file's redundant calls (none: forget the file)."""
        if found:
            self._held[name] = found
        else:
            self._held.pop(name, None)

    def forget(self, name: str) -> None:
        """The file is gone or read again from its start."""
        self._held.pop(name, None)


def _place(found: list[Finding], finding: Finding) -> None:
    """Put `finding` into `found` (sorted by last line) as `redundant_findings` would: in the place
    of the finding of its tool id (a repeat reported again once its result came), else after those
    ending on the same line or before."""
    for number in range(len(found) - 1, -1, -1):  # (a repeat's result follows it closely)
        if found[number].tool_id == finding.tool_id:
            moved = _last_line(found[number]) != _last_line(finding)
            found[number] = finding
            if moved:  # (its lines are the same ones: never seen, but kept in order all the same)
                found.sort(key=_last_line)
            return
    bisect.insort_right(found, finding, key=_last_line)


def _last_line(finding: Finding) -> tuple[int, ...]:
    return finding.lines[-1:]


def placed(finding: Finding, index: TranscriptIndex) -> Finding:
    """Return `finding` at its lines' current numbers in `index` (by uuid), when all are there."""
    lines = tuple(
        index.line_of_uuid[uuid] + 1 for uuid in finding.uuids if uuid in index.line_of_uuid
    )
    return replace(finding, lines=lines) if len(lines) == len(finding.lines) else finding


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
