"""What `riffd fix` did with each file (`FixedFile`), and its two renderings: the lines a person reads
(`print_text`) and the JSON document of schema 1 (`file_json`, `fix_document`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from riffd import __version__
from riffd.commands.output import skipped_line
from riffd.repair.plan import InsertLine, RemoveLine, RepairPlan, ReplaceLine
from riffd.transcript.findings import Finding

CLEAN, WOULD_REPAIR, REPAIRED, SKIPPED, FAILED, ERROR = (
    "clean",
    "would_repair",
    "repaired",
    "skipped",
    "failed",
    "error",
)


@dataclass(frozen=True)
class FixedFile:
    """One file as `riffd fix` left it: the outcome (CLEAN, WOULD_REPAIR, REPAIRED, SKIPPED, FAILED
    or ERROR), why, the plan it made, and how many findings still count (neither informational nor
    acknowledged)."""

    path: Path
    outcome: str
    remaining: int
    reason: str | None = None
    detail: str | None = None
    plan: RepairPlan | None = None
    backup_id: str | None = None
    backup_path: Path | None = None
    carried_over_bytes: int = 0
    warnings: tuple[str, ...] = ()
    pending_swap: Path | None = None
    left: tuple[Finding, ...] = ()  # what still counts (after a repair: in the file riffd wrote)
    unrepaired: tuple[Finding, ...] = field(default=())  # a clean file's findings
    not_a_transcript: str = ""  # why a file with findings left is not taken for a transcript

    @property
    def is_error(self) -> bool:
        """True for an outcome that makes `fix` exit 2."""
        return self.outcome in (FAILED, ERROR)


def plan_json(plan: RepairPlan) -> dict[str, object]:
    """The edits and the findings they fix, as `fix --json` shows a plan."""
    edits: list[dict[str, object]] = []
    for edit in plan.edits:
        if isinstance(edit, RemoveLine):
            edits.append({"remove_line": edit.span.number, "reason": edit.reason})
        elif isinstance(edit, ReplaceLine):
            edits.append({"edit_line": edit.span.number, "reason": edit.reason})
        elif isinstance(edit, InsertLine):
            edits.append({"insert_after_line": edit.after.number, "reason": edit.reason})
    return {"edits": edits, "fixes": [finding.to_json() for finding in plan.fixes]}


def file_json(result: FixedFile) -> dict[str, Any]:
    """One file's entry in the JSON document (the keys and their order of schema 1)."""
    document: dict[str, Any] = {"path": str(result.path)}
    if result.plan is not None:
        document |= {"plan": plan_json(result.plan), "notes": list(result.plan.notes)}
    document["outcome"] = result.outcome
    if result.outcome == CLEAN and result.plan is None:
        return document | {"unrepaired": [finding.to_json() for finding in result.unrepaired]}
    if result.outcome == REPAIRED:
        return document | {
            "backup_id": result.backup_id,
            "backup_path": str(result.backup_path),
            "carried_over_bytes": result.carried_over_bytes,
            "warnings": list(result.warnings),
            "pending_swap": str(result.pending_swap) if result.pending_swap else None,
            "remaining": [finding.to_json() for finding in result.left],
        }
    if result.reason is not None:
        document["reason"] = result.reason
    if result.detail is not None:
        document["detail"] = result.detail
    return document


def fix_document(
    schema: int,
    dry_run: bool,
    recovered: Sequence[str],
    results: Sequence[FixedFile],
    counts: Counter[str],
    errors: Sequence[str],
) -> dict[str, Any]:
    """The whole `fix --json` document."""
    return {
        "schema": schema,
        "riffd": __version__,
        "dry_run": dry_run,
        "recovered": list(recovered),
        "files": [file_json(result) for result in results],
        "summary": dict(sorted(counts.items())),
        "errors": list(errors),
    }


def print_text(result: FixedFile) -> None:
    """Print what was done with one file, its edits and notes, for a person."""
    edits = plan_json(result.plan)["edits"] if result.plan is not None else []
    assert isinstance(edits, list)
    if result.outcome in (REPAIRED, WOULD_REPAIR):
        verb = "repaired" if result.outcome == REPAIRED else "would repair"
        print(f"{verb} {result.path}: {len(edits)} edit(s)")
        for edit in edits:
            what = next(iter(edit))
            print(f"  {what.replace('_', ' ')} {edit[what]}: {edit['reason']}")
        if result.outcome == REPAIRED:
            print(f"  backup: {result.backup_id} ({result.backup_path})")
            for warning in result.warnings:
                print(f"  warning: {warning}")
    elif result.outcome == SKIPPED:
        print(skipped_line(result.path, result.reason, result.detail or ""))
    elif result.is_error:
        print(f"failed {result.path}: {result.detail}")
    for note in result.plan.notes if result.plan is not None else ():
        if note not in (result.detail or ""):  # (nothing safe to do: its notes are the reason)
            print(f"  note: {note}")


REMAINING_SHOWN = 20  # findings `fix` names at its end; `riffd scan` lists them all


def print_remaining(
    left: Sequence[Finding],
    repairable: frozenset[str],
    riffd: str = "riffd",
    not_transcripts: Mapping[str, str] | None = None,
) -> None:
    """Name the findings that remain after `fix` (on stderr, after its summary): file, line, class
    and what it is, the first REMAINING_SHOWN of them; for a class riffd never edits (not in
    `repairable`, the classes this configuration repairs), what to do about it, as `riffd status`
    says it (`riffd`: the words the commands advised start with); for one in a file of
    `not_transcripts` (path: why it is not taken for a transcript), that riffd does not edit it."""
    import sys

    from riffd.display import shell_word
    from riffd.reports.attention import attention_item
    from riffd.transcript.shape import NOT_A_TRANSCRIPT

    for finding in left[:REMAINING_SHOWN]:
        print(f"  {finding.path}:{finding.line}: {finding.cls}: {finding.message}", file=sys.stderr)
        doubt = (not_transcripts or {}).get(finding.path)
        if doubt:  # no class in the config makes riffd edit it
            print(
                f"    riffd does not edit this file: it is {NOT_A_TRANSCRIPT} ({doubt}); "
                f"`{riffd} ack {shell_word(f'{finding.path}:{finding.line}')}` acknowledges it",
                file=sys.stderr,
            )
            continue
        item = attention_item(
            finding.path, finding.to_json(), False, repairable=repairable, riffd=riffd
        )
        if item.state == "never_repaired":
            print(f"    {item.action}", file=sys.stderr)
    if len(left) > REMAINING_SHOWN:
        print(
            f"  and {len(left) - REMAINING_SHOWN} more (`{riffd} scan PATH` lists every one)",
            file=sys.stderr,
        )
