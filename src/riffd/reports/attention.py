"""The findings of a report sorted out (`sort_findings`), each open or acknowledged one with its
state and the advice that deals with it at the report's moment (`attention_item`): when riffd
repairs it by itself, the command that does it now, and no advice that does nothing then (no `riffd
fix PATH` that would skip a file still in its quiet period, no `riffd ack` for a finding the
repair waiting for its file may remove).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from riffd.claude_code.liveness import look_again_after
from riffd.config.model import RepairConfig
from riffd.display import shell_command, shell_word
from riffd.reports.model import AttentionItem, AttentionState
from riffd.state.store import StateStore
from riffd.transcript.acks import Ack, AckFileError, Acknowledged, load_acks
from riffd.transcript.findings import DEFAULT_REPAIRS, INFORMATIONAL, OPT_IN_REPAIRS

# What riffd repairs when the report knows no configuration (the daemon publishes its own)
DEFAULT_REPAIR_NAMES = frozenset(map(str, DEFAULT_REPAIRS))
OPT_IN_NAMES = frozenset(map(str, OPT_IN_REPAIRS))
DEFAULT_NAMES = frozenset(map(str, DEFAULT_REPAIRS))


@dataclass(frozen=True)
class RepairTiming:
    """What says when the daemon repairs a waiting file by itself: whether it runs, its quiet
    period (None: not known), each file's last modification (seconds) and the report's moment."""

    running: bool = False
    quiet_period: float | None = None
    modified: Mapping[str, float] = field(default_factory=dict)
    now: float = 0.0

    def due_at(self, path: str) -> float | None:
        """When the file's quiet period ends, if that is still to come (else None)."""
        modified = self.modified.get(path)
        if not self.running or self.quiet_period is None or modified is None:
            return None
        due = modified + self.quiet_period
        return due if due > self.now else None


@dataclass(frozen=True)
class SortedFindings:
    """Every stored finding sorted out: open damage by class (and the files holding it),
    acknowledged and informational findings by class, and the `attention` list (open first, then
    acknowledged); `ack_error` says why no acknowledgement applies, when the file is broken."""

    open: Counter[str]
    files: int
    acknowledged: Counter[str]
    informational: Counter[str]
    attention: list[AttentionItem]
    ack_error: str


def sort_findings(
    store: StateStore,
    mode: str | None,
    rechecking: set[str],
    timing: RepairTiming,
    repairable: frozenset[str] = DEFAULT_REPAIR_NAMES,
    riffd: str = "riffd",
) -> SortedFindings:
    """Sort the stored findings, leaving out those of the files in `rechecking` (repaired since
    riffd read them: what is left of their findings is known once they are read again);
    `repairable` names the classes riffd is configured to repair; the commands advised start with
    `riffd` (riffd.display.riffd_invocation: the configuration the report was made with)."""
    try:
        acks, ack_error = Acknowledged(load_acks(store.path.parent)), ""
    # a broken file must not hide damage: nothing counts as acknowledged
    except AckFileError as exc:
        acks, ack_error = Acknowledged(()), f"acknowledgements not applied: {exc}"
    damage: Counter[str] = Counter()
    acknowledged: Counter[str] = Counter()
    informational: Counter[str] = Counter()
    files: set[str] = set()
    listed, later = [], []
    for path, item, waiting in store.all_findings():
        if path in rechecking:
            continue
        cls = str(item.get("class"))
        if cls in INFORMATIONAL:
            informational[cls] += 1
            continue
        ack = acks.of(path, item) if acks else None
        if ack is not None:
            acknowledged[cls] += 1
            later.append(attention_item(path, item, waiting, mode, ack, timing, repairable, riffd))
        else:
            damage[cls] += 1
            files.add(path)
            listed.append(
                attention_item(path, item, waiting, mode, None, timing, repairable, riffd)
            )
    return SortedFindings(
        damage, len(files), acknowledged, informational, listed + later, ack_error
    )


def attention_item(
    path: str,
    finding: dict[str, Any],
    waiting: bool,
    mode: str | None = None,
    ack: Ack | None = None,
    timing: RepairTiming | None = None,
    repairable: frozenset[str] = DEFAULT_REPAIR_NAMES,
    riffd: str = "riffd",
) -> AttentionItem:
    """One finding as the report lists it: the file, the class, the lines, its state
    (waiting_for_repair, not_repaired: riffd tried and it was not safe, never_repaired: a class
    riffd does not edit, acknowledged) and the advice that deals with it now (`timing`: when the
    daemon repairs a waiting file by itself; `riffd`: the words the commands advised start with)."""
    cls = str(finding.get("class"))
    lines = finding.get("lines") or []
    quoted = shell_word(path)
    where = shell_word(f"{path}:{lines[0]}") if lines else quoted
    state: AttentionState
    if ack is not None:
        state = "acknowledged"
        action = (
            f"acknowledged {ack.at}"
            + (f" ({ack.note})" if ack.note else "")
            + f"; `{riffd} ack --undo {where}` counts it again"
        )
    elif cls in repairable and mode == "report-only":
        state = "waiting_for_repair"
        action = f"report-only mode: riffd does not repair; `{riffd} fix {quoted}` does, once the session is idle"
    elif cls in repairable and waiting:
        state = "waiting_for_repair"
        action = _waiting_advice(path, timing or RepairTiming(), riffd)
    elif cls in repairable:
        state = "not_repaired"
        action = (
            f"riffd could not repair it safely (see `repairs`); `{riffd} fix --dry-run {quoted}` says "
            f"why; `{riffd} ack {where}` accepts it as it is"
        )
    elif cls in OPT_IN_NAMES:
        state = "never_repaired"
        action = (
            f"current clients cope with this ({cls}); riffd repairs it only when `repair.classes` in "
            f"the config names it (for older clients and other readers); `{riffd} show {quoted}` "
            f"shows where; `{riffd} ack {where}` acknowledges it"
        )
    elif cls in DEFAULT_NAMES:  # repaired by default, and the config's repair.classes leaves it out
        state = "never_repaired"
        action = (
            f"riffd repairs this ({cls}) by default, but `repair.classes` in the config leaves it "
            f"out: add it there to have riffd repair it; `{riffd} show {quoted}` shows where; "
            f"`{riffd} ack {where}` acknowledges it"
        )
    elif waiting:  # the repair this file waits for may remove it (a duplicate line goes with it)
        state = "never_repaired"
        action = (
            f"riffd never edits this ({cls}) by itself, but the repair this file waits for may take it "
            f"out with the lines it repairs: look again after that repair; `{riffd} show {quoted}` "
            "shows where"
        )
    else:
        state = "never_repaired"
        action = (
            f"riffd never edits this ({cls}): `{riffd} show {quoted}` shows where; if the session "
            f"resumes well, `{riffd} ack {where}` acknowledges it"
        )
    return AttentionItem(
        path=path,
        finding_class=cls,
        lines=tuple(lines),
        message=finding.get("message", ""),
        repairable=cls in repairable,
        state=state,
        action=action,
    )


def _waiting_advice(path: str, timing: RepairTiming, riffd: str = "riffd") -> str:
    """What to say of a repair that waits: when the daemon makes it, and what makes it now."""
    due = timing.due_at(path)
    now_command = f"{riffd} {shell_command('fix', '--quiet-period', '0', path)}"
    if due is not None:
        return (
            f"riffd repairs it by itself at {time.strftime('%H:%M:%S', time.localtime(due))}, once "
            f"the session has been quiet for {timing.quiet_period:g} s (later if Claude Code still "
            f"has it open); if you are sure the session is closed, `{now_command}` repairs it now"
        )
    if timing.running:
        every = look_again_after(timing.quiet_period or RepairConfig().quiet_period)
        return (
            "riffd repairs it soon after no Claude Code process has the session open (it looks "
            f"again every {every:g} s); `{riffd} fix --dry-run {shell_word(path)}` says what holds it"
        )
    return (
        f"no riffd daemon runs to repair it: `{riffd} fix {shell_word(path)}` does, once the session "
        "is idle"
    )
