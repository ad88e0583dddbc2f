"""`riffd fix`: repair tool-result pairing in idle sessions, after a verified backup."""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from riffd import __version__
from riffd.archive.ingest import ingest_file
from riffd.archive.packs import PackDamaged
from riffd.archive.schema import ARCHIVE_NAME, ArchiveError
from riffd.archive.store import Archive, ArchiveGap
from riffd.claude_code.folders import claude_config_dir, default_roots
from riffd.commands.common import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    REPORT_SCHEMA,
    Parser,
    Progress,
    nonnegative_number,
    print_json,
    transcript_targets,
)
from riffd.commands.configured import config_for_folders
from riffd.database import DatabaseDamaged
from riffd.fsio import REAL_FILES, ReadFailed, pin_mmap_threshold
from riffd.repair.backup import BackupStore
from riffd.repair.handover import PENDING
from riffd.repair.outcomes import (
    ApplyOptions,
    Failed,
    FileChanged,
    Repaired,
    Skipped,
    SkipReason,
    gone,
)
from riffd.repair.plan import InsertLine, RemoveLine, RepairPlan, ReplaceLine
from riffd.repair.planner import RepairOptions, cuts_torn_tail, keep_torn_tail, plan_file_repair
from riffd.repair.recovery import recover, recover_folder
from riffd.repair.writer import apply_plan
from riffd.transcript.acks import Acknowledged, acknowledged_in
from riffd.transcript.findings import INFORMATIONAL, REPAIRABLE, Finding
from riffd.transcript.scan import index_file


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd fix` to the riffd subcommands."""
    fix = commands.add_parser(
        "fix",
        help="repair tool-result pairing in idle sessions, after a verified backup",
        description="Repair duplicate, orphan and missing tool results and repeated tool_use ids. A file is "
        "rewritten only if its session is idle (not registered as running by Claude Code, not modified for the "
        "quiet period), only after a verified backup, and only by atomic replace; every line the repair does "
        "not name stays byte for byte. A torn last line (a write cut off) is cut off once it is in the backup "
        "and in riffd's archive. Malformed lines mid-file and broken parent links are reported, never edited "
        "(`riffd ack` acknowledges them).",
    )
    fix.add_argument(
        "paths", nargs="*", type=Path, metavar="PATH", help="transcript files or folders"
    )
    fix.add_argument(
        "--dry-run", action="store_true", help="print the planned edits; write nothing"
    )
    fix.add_argument(
        "--quiet-period",
        type=nonnegative_number,
        default=120.0,
        metavar="SECONDS",
        help="how long a file must be unmodified to count as idle (default: 120)",
    )
    fix.add_argument(
        "--no-synthesize",
        action="store_true",
        help="do not add placeholder results for tool calls that never got one",
    )
    fix.add_argument(
        "--backup-dir",
        type=Path,
        default=None,
        help="where backups go (default: the config's backups.dir, <state dir>/backups)",
    )
    fix.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    fix.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="PATH",
        help="also repair the transcripts of this project's Claude Code folder (repeatable)",
    )
    fix.set_defaults(run=run_fix)


def run_fix(args: argparse.Namespace) -> int:
    """`riffd fix`: repair idle files; exit 0 when nothing repairable remains, 1 when findings
    remain, 2 on errors."""
    pin_mmap_threshold()  # a steady peak memory (riffd.fsio says why)
    files, errors = transcript_targets(args.paths, args.project)
    config = config_for_folders(args)
    backup_dir = args.backup_dir or config.backups.dir
    acks = acknowledged_in(config.state_dir)
    options = ApplyOptions(
        backup_dir=backup_dir,
        claude_dir=claude_config_dir(),
        roots=tuple(default_roots()) + tuple(path for path in args.paths if path.is_dir()),
        quiet_period=args.quiet_period,
    )
    repair_options = RepairOptions(add_missing_results=not args.no_synthesize)
    recovered: list[str] = []
    if (
        not args.dry_run
    ):  # what a killed riffd left in the backup folder goes now (a running one's stays)
        BackupStore(backup_dir).remove_leftovers(time.time())
        for folder in sorted(
            {path.parent for path in files}
        ):  # and swaps it left half done beside transcripts
            recovered += recover_folder(REAL_FILES, folder)
        for line in recovered:
            print(line)
    results: list[dict[str, object]] = []
    remaining = 0
    counts: Counter[str] = Counter()
    progress = Progress(len(files))
    keeper = TailKeeper(config.state_dir / ARCHIVE_NAME)
    try:
        for path in files:
            outcome = _fix_one(path, options, repair_options, args.dry_run, keeper, acks)
            progress.step(path.stat().st_size if path.exists() else 0)
            counts[str(outcome["outcome"])] += 1
            remaining += int(outcome.pop("_remaining"))  # type: ignore[call-overload]
            if outcome["outcome"] == "error" or outcome["outcome"] == "failed":
                errors.append(str(outcome["detail"]))
            if outcome["outcome"] != "clean":
                results.append(outcome)
                if not args.json:
                    _print_fix_outcome(outcome)
    finally:
        keeper.close()
    progress.close()
    for result in results:  # a writer held the old file: it may have let go by now
        journal = result.get("pending_swap")
        if isinstance(journal, str):
            settled = recover(REAL_FILES, Path(journal))
            if settled is not None and settled.state != PENDING:
                result["pending_swap"] = None
                result["warnings"] = [*result.get("warnings", []), settled.detail]  # type: ignore[misc]
    if args.json:
        print_json(
            {
                "schema": REPORT_SCHEMA,
                "riffd": __version__,
                "dry_run": args.dry_run,
                "recovered": recovered,
                "files": results,
                "summary": dict(sorted(counts.items())),
                "errors": errors,
            }
        )
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    word = "would repair" if args.dry_run else "repaired"
    print(
        f"riffd: {len(files)} file(s): {counts['repaired'] + counts['would_repair']} {word}, "
        f"{counts['skipped']} skipped, {counts['failed'] + counts['error']} failed, "
        f"{counts['clean']} with nothing to repair; {remaining} finding(s) remain",
        file=sys.stderr,
    )
    if errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if remaining else EXIT_OK


class TailKeeper:
    """Puts a torn last line into riffd's archive before `fix` cuts it off (the daemon's archive,
    opened once, only when a plan needs it); a plan whose fragment cannot be archived keeps it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._archive: Archive | None = None

    def checked(self, path: Path, plan: RepairPlan) -> RepairPlan:
        """Return `plan` once its torn tail is archived, or without that cut when it cannot be."""
        if not cuts_torn_tail(plan):
            return plan
        try:
            if self._archive is None:
                self._archive = Archive(self.path)
            ingest_file(self._archive, path)
        except (
            ArchiveError,
            ArchiveGap,
            DatabaseDamaged,
            PackDamaged,
            sqlite3.Error,
            OSError,
        ) as exc:
            return keep_torn_tail(
                plan, f"it could not be put in the archive {self.path} first ({exc})"
            )
        return plan

    def close(self) -> None:
        """Close the archive, if it was opened."""
        if self._archive is not None:
            self._archive.close()


def _fix_one(
    path: Path,
    options: ApplyOptions,
    repair_options: RepairOptions,
    dry_run: bool,
    keeper: TailKeeper,
    acks: Acknowledged | None = None,
) -> dict[str, object]:
    """Scan, plan and (unless dry_run) apply one file; return a JSON-ready outcome. `_remaining`
    counts the findings left that are neither informational nor acknowledged in `acks`."""

    def _damage(findings: list[Finding]) -> list[Finding]:
        return [
            finding
            for finding in findings
            if finding.cls not in INFORMATIONAL
            and not (acks and acks.of(str(path), finding.to_json()))
        ]

    try:
        scanned = index_file(path, with_identity=True)
    except FileNotFoundError:
        return {
            "path": str(path),
            "outcome": "skipped",
            "reason": str(SkipReason.GONE),
            "detail": gone(path).detail,
            "_remaining": 0,
        }
    except (OSError, ReadFailed) as exc:
        return {"path": str(path), "outcome": "error", "detail": f"{path}: {exc}", "_remaining": 0}
    damage = _damage(scanned.findings)
    repairable = [finding for finding in scanned.findings if finding.cls in REPAIRABLE]
    if not repairable:
        return {
            "path": str(path),
            "outcome": "clean",
            "_remaining": len(damage),
            "unrepaired": [finding.to_json() for finding in scanned.findings],
        }
    try:
        plan = plan_file_repair(scanned, repair_options)
    except FileNotFoundError:
        return {
            "path": str(path),
            "outcome": "skipped",
            "reason": str(SkipReason.GONE),
            "detail": gone(path).detail,
            "_remaining": 0,
        }
    except FileChanged as exc:
        return {
            "path": str(path),
            "outcome": "skipped",
            "reason": str(exc.reason),
            "detail": str(exc),
            "_remaining": len(damage),
        }
    except (OSError, ValueError) as exc:
        return {
            "path": str(path),
            "outcome": "error",
            "detail": f"{path}: could not plan a repair: {exc}",
            "_remaining": len(damage),
        }
    base: dict[str, object] = {
        "path": str(path),
        "plan": _plan_json(plan),
        "notes": list(plan.notes),
    }
    if plan.is_empty:
        return base | {
            "outcome": "skipped",
            "reason": "nothing_safe_to_do",
            "detail": "; ".join(plan.notes) or "no safe repair",
            "_remaining": len(damage),
        }
    if dry_run:
        return base | {"outcome": "would_repair", "_remaining": len(damage)}
    plan = keeper.checked(path, plan)
    if plan.is_empty:
        return base | {
            "plan": _plan_json(plan),
            "notes": list(plan.notes),
            "outcome": "skipped",
            "reason": "nothing_safe_to_do",
            "detail": "; ".join(plan.notes),
            "_remaining": len(damage),
        }
    # The lines' own sessionId too: a 2.0.x subagent file (agent-<id>.jsonl) is named after its
    # agent.
    outcome = apply_plan(plan, replace(options, session_id=scanned.index.session_id))
    if isinstance(outcome, Repaired):
        # Judged on the file riffd wrote, not on what the plan meant to fix.
        try:
            left = _damage(index_file(path).findings)
        except OSError as exc:
            left = [finding for finding in damage if finding not in plan.fixes]
            outcome = replace(
                outcome, warnings=(*outcome.warnings, f"{path}: could not scan it again: {exc}")
            )
        return base | {
            "outcome": "repaired",
            "backup_id": outcome.backup_id,
            "backup_path": str(outcome.backup_path),
            "carried_over_bytes": outcome.carried_over_bytes,
            "warnings": list(outcome.warnings),
            "pending_swap": str(outcome.pending_swap) if outcome.pending_swap else None,
            "remaining": [finding.to_json() for finding in left],
            "_remaining": len(left),
        }
    if isinstance(outcome, Skipped):
        result = "clean" if outcome.reason is SkipReason.NOTHING_TO_DO else "skipped"
        return base | {
            "outcome": result,
            "reason": str(outcome.reason),
            "detail": outcome.detail,
            "_remaining": len(damage),
        }
    assert isinstance(outcome, Failed)
    return base | {
        "outcome": "failed",
        "reason": str(outcome.reason),
        "detail": outcome.detail,
        "_remaining": len(damage),
    }


def _plan_json(plan: RepairPlan) -> dict[str, object]:
    edits = []
    for edit in plan.edits:
        if isinstance(edit, RemoveLine):
            edits.append({"remove_line": edit.span.number, "reason": edit.reason})
        elif isinstance(edit, ReplaceLine):
            edits.append({"edit_line": edit.span.number, "reason": edit.reason})
        elif isinstance(edit, InsertLine):
            edits.append({"insert_after_line": edit.after.number, "reason": edit.reason})
    return {"edits": edits, "fixes": [finding.to_json() for finding in plan.fixes]}


def _print_fix_outcome(outcome: dict[str, object]) -> None:
    path, kind = outcome["path"], outcome["outcome"]
    plan = outcome.get("plan") or {}
    edits = plan.get("edits", []) if isinstance(plan, dict) else []
    if kind in ("repaired", "would_repair"):
        verb = "repaired" if kind == "repaired" else "would repair"
        print(f"{verb} {path}: {len(edits)} edit(s)")
        for edit in edits:
            what = next(iter(edit))
            print(f"  {what.replace('_', ' ')} {edit[what]}: {edit['reason']}")
        if kind == "repaired":
            print(f"  backup: {outcome['backup_id']} ({outcome['backup_path']})")
            for warning in outcome.get("warnings") or []:  # type: ignore[attr-defined]
                print(f"  warning: {warning}")
    elif kind == "skipped":
        print(f"skipped {path}: {outcome['reason']}: {outcome['detail']}")
    elif kind in ("failed", "error"):
        print(f"failed {path}: {outcome['detail']}")
    notes = outcome.get("notes")
    for note in notes if isinstance(notes, list) else []:
        print(f"  note: {note}")
