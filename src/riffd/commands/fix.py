"""`riffd fix`: repair damage in idle sessions (tool results, chains, torn lines), after a verified backup."""

from __future__ import annotations

import argparse
import sqlite3
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from riffd.archive.ingest import ingest_file
from riffd.archive.packs import PackDamaged
from riffd.archive.schema import ARCHIVE_NAME, ArchiveError
from riffd.archive.store import Archive, ArchiveGap
from riffd.claude_code.folders import default_roots
from riffd.claude_code.liveness import session_liveness
from riffd.commands.advice import PLAIN_REPAIR_NOW, RepairNow, repair_now
from riffd.commands.archive_open import move_waits
from riffd.commands.arguments import Parser, nonnegative_number, transcript_targets
from riffd.commands.config_loading import config_for_edits
from riffd.commands.fix_output import (
    CLEAN,
    ERROR,
    FAILED,
    REPAIRED,
    SKIPPED,
    WOULD_REPAIR,
    FixedFile,
    fix_document,
    print_remaining,
    print_text,
)
from riffd.commands.output import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    REPORT_SCHEMA,
    Progress,
    print_json,
    riffd_advice,
)
from riffd.config.load import file_in_the_way
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
from riffd.repair.plan import RepairOptions, RepairPlan
from riffd.repair.planner import cuts_bytes, keep_torn_tail, plan_file_repair
from riffd.repair.recovery import recover, recover_folder
from riffd.repair.writer import apply_plan
from riffd.transcript.acks import Acknowledged, acknowledged_in
from riffd.transcript.findings import INFORMATIONAL, Finding
from riffd.transcript.reader import read_span
from riffd.transcript.scan import index_file
from riffd.transcript.shape import transcript_doubt


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd fix` to the riffd subcommands."""
    fix = commands.add_parser(
        "fix",
        help="repair damage in idle sessions (tool results, chains, torn lines), after a verified backup",
        description="Repair duplicate, orphan and missing tool results and repeated tool_use ids, records glued "
        "to a torn one, and a lost parent where it cuts the history Claude Code loads. A file is "
        "rewritten only if its session is idle (not registered as running by Claude Code, not modified for the "
        "quiet period), only after a verified backup, and only by atomic replace; every line the repair does "
        "not name stays byte for byte. A torn last line (a write cut off) is cut off once it is in the backup "
        "and in riffd's archive. Duplicate uuids and parent loops are reported, never edited, as are malformed "
        "lines mid-file unless the config's repair.classes asks for them (`riffd ack` acknowledges what "
        "riffd leaves); docs/findings.md lists each class and what is done.",
    )
    fix.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="transcript files or folders, session ids (or a prefix only one has), `latest`, or project paths",
    )
    fix.add_argument(
        "--dry-run", action="store_true", help="print the planned edits; write nothing"
    )
    fix.add_argument(
        "--quiet-period",
        type=nonnegative_number,
        default=None,
        metavar="SECONDS",
        help="how long a file must be unmodified to count as idle (default: the config's "
        "repair.quiet_period, 120)",
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
    config = config_for_edits(args, "`riffd fix`")
    if config is None:
        return EXIT_ERROR
    files, errors = transcript_targets(
        args.paths,
        args.project,
        archive_path=config.state_dir / ARCHIVE_NAME,
        riffd=riffd_advice(args),
        roots=config.roots,
    )
    backup_dir = args.backup_dir or config.backups.dir
    blocked = file_in_the_way(backup_dir)
    if blocked is not None:  # (a dry run says so too: it makes the real run's checks)
        print(
            f"riffd: error: {backup_dir}"
            + (" (--backup-dir)" if args.backup_dir else " (the config's backups.dir)")
            + f": {blocked} is a file, not a folder; no backup could be taken, so nothing is "
            "repaired",
            file=sys.stderr,
        )
        return EXIT_ERROR
    acks = acknowledged_in(config.state_dir)
    options = ApplyOptions(
        backup_dir=backup_dir,
        # the configured Claude folder and roots: where a running client registers the session
        # (the shell's own folder and every transcript's are asked as well: claude_dirs_for)
        claude_dir=config.claude_dir,
        roots=config.roots
        + tuple(default_roots())
        + tuple(path for path in args.paths if path.is_dir()),
        quiet_period=(
            config.repair.quiet_period if args.quiet_period is None else args.quiet_period
        ),
    )
    repair_options = RepairOptions(
        add_missing_results=not args.no_synthesize, classes=frozenset(config.repair.classes)
    )
    recovered: list[str] = []
    # what a killed riffd left in the backup folder goes now (a running one's stays)
    if not args.dry_run:
        BackupStore(backup_dir).remove_leftovers(time.time())
        # and swaps it left half done beside transcripts
        for folder in sorted({path.parent for path in files}):
            recovered += recover_folder(REAL_FILES, folder)
        for line in recovered:
            print(line)
    results: list[FixedFile] = []
    remaining = 0
    left: list[Finding] = []
    not_transcripts: dict[str, str] = {}  # path: why riffd does not take it for a transcript
    counts: Counter[str] = Counter()
    progress = Progress(len(files))
    keeper = TailKeeper(config.state_dir / ARCHIVE_NAME)
    now = repair_now(args, config)  # the command a skipped file's advice names
    try:
        for path in files:
            outcome = _fix_one(path, options, repair_options, args.dry_run, keeper, acks, now)
            progress.step(path.stat().st_size if path.exists() else 0)
            counts[outcome.outcome] += 1
            remaining += outcome.remaining
            left += outcome.left
            if outcome.not_a_transcript:
                not_transcripts[str(path)] = outcome.not_a_transcript
            if outcome.is_error:
                errors.append(str(outcome.detail))
            if outcome.outcome != CLEAN:
                results.append(outcome)
                if not args.json:
                    print_text(outcome)
        progress.close()
        for index, result in enumerate(results):  # a writer held the old file: it may have let go
            if result.pending_swap is not None:
                settled = recover(REAL_FILES, result.pending_swap)
                if settled is not None and settled.state != PENDING:
                    archived = keeper.taken_again(result.path)  # (the version it now has)
                    results[index] = replace(
                        result,
                        pending_swap=None,
                        warnings=(*result.warnings, settled.detail, *filter(None, [archived])),
                    )
    finally:
        keeper.close()
    if args.json:
        print_json(fix_document(REPORT_SCHEMA, args.dry_run, recovered, results, counts, errors))
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    word = "would repair (the same checks as a real run)" if args.dry_run else "repaired"
    print(
        f"riffd: {len(files)} file(s): {counts['repaired'] + counts['would_repair']} {word}, "
        f"{counts['skipped']} skipped, {counts['failed'] + counts['error']} failed, "
        f"{counts['clean']} with nothing to repair; {remaining} finding(s) "
        + ("there now, before those repairs" if args.dry_run else "remain")
        + (":" if left else ""),
        file=sys.stderr,
    )
    print_remaining(
        left,
        frozenset(map(str, config.repair.classes)),
        riffd_advice(args),
        not_transcripts,
    )
    if errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if remaining else EXIT_OK


_ARCHIVE_ERRORS = (ArchiveError, ArchiveGap, DatabaseDamaged, PackDamaged, sqlite3.Error, OSError)


class TailKeeper:
    """Puts a torn last line into riffd's archive before `fix` cuts it off (the daemon's archive,
    opened once, only when a plan needs it); a plan whose fragment cannot be archived keeps it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._archive: Archive | None = None
        self._archived: set[Path] = set()  # the files `checked` put in the archive

    def checked(self, path: Path, plan: RepairPlan) -> RepairPlan:
        """Return `plan` once the file is archived when it cuts bytes (a torn tail, a torn record, a
        stray line...), or without the cut of its torn tail when it cannot be (the others are in
        the backup)."""
        if not cuts_bytes(plan):
            return plan
        try:
            if self._archive is None:
                why = move_waits(self.path.parent, self.path)
                if why is not None:
                    raise ArchiveError(why)
                self._archive = Archive(self.path)
            ingest_file(self._archive, path)
        except _ARCHIVE_ERRORS as exc:
            return keep_torn_tail(
                plan, f"it could not be put in the archive {self.path} first ({exc})"
            )
        self._archived.add(path)
        return plan

    def taken_again(self, path: Path) -> str | None:
        """After `fix` rewrote `path`, which `checked` archived: archive the new version too, so
        the archive holds the file as it now is (else `riffd sessions` says "archived, not whole"
        until the daemon or an ingest takes it). Return a warning when it cannot."""
        if path not in self._archived or self._archive is None:
            return None
        try:
            ingest_file(self._archive, path)
        except _ARCHIVE_ERRORS as exc:
            return (
                f"{path}: repaired, but its new version is not in the archive {self.path} yet "
                f"({exc}); riffd's daemon or `riffd archive ingest` puts it there"
            )
        return None

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
    now: RepairNow = PLAIN_REPAIR_NOW,
) -> FixedFile:
    """Scan, plan and (unless dry_run) apply one file; return what was done, with the findings left
    that are neither informational nor acknowledged in `acks`; a file only the quiet period holds
    back names `now`'s command."""

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
        return FixedFile(path, SKIPPED, 0, str(SkipReason.GONE), gone(path).detail)
    except (OSError, ReadFailed) as exc:
        return FixedFile(path, ERROR, 0, detail=f"{path}: {exc.strerror or exc}")
    damage = _damage(scanned.findings)
    try:  # what is left is not riffd's to edit when the file is not a transcript, whatever the class
        doubt = (
            transcript_doubt(
                scanned.index, lambda line: read_span(path, *scanned.index.span(line)), path
            )
            if damage
            else ""
        )
    except OSError:
        doubt = ""  # (the advice is then the classes' own)
    if not [finding for finding in scanned.findings if finding.cls in repair_options.classes]:
        return FixedFile(
            path,
            CLEAN,
            len(damage),
            unrepaired=tuple(scanned.findings),
            left=tuple(damage),
            not_a_transcript=doubt,
        )
    try:
        plan = plan_file_repair(scanned, repair_options)
    except FileNotFoundError:
        return FixedFile(path, SKIPPED, 0, str(SkipReason.GONE), gone(path).detail)
    except FileChanged as exc:
        return FixedFile(
            path,
            SKIPPED,
            len(damage),
            str(exc.reason),
            str(exc),
            left=tuple(damage),
            not_a_transcript=doubt,
        )
    except (OSError, ValueError) as exc:
        return FixedFile(
            path,
            ERROR,
            len(damage),
            detail=f"{path}: could not plan a repair: {exc}",
            left=tuple(damage),
            not_a_transcript=doubt,
        )
    if not plan.is_empty and not dry_run:
        plan = keeper.checked(path, plan)
    if plan.is_empty:
        why = "; ".join(plan.notes) or "no safe repair"
        return FixedFile(
            path,
            SKIPPED,
            len(damage),
            "nothing_safe_to_do",
            why,
            plan,
            left=tuple(damage),
            not_a_transcript=doubt,
        )
    left = tuple(damage)
    if dry_run:  # the same rules as a real run: a session that may be live is skipped
        live = live_detail(path, options, scanned.index.session_id, now)
        if live is not None:
            return FixedFile(
                path, SKIPPED, len(damage), str(SkipReason.LIVE), live, plan, left=left
            )
        return FixedFile(path, WOULD_REPAIR, len(damage), plan=plan, left=left)
    # The lines' own sessionId too: a 2.0.x subagent file (agent-<id>.jsonl) is named after its
    # agent.
    outcome = apply_plan(plan, replace(options, session_id=scanned.index.session_id))
    if isinstance(outcome, Repaired):
        # Judged on the file riffd wrote, not on what the plan meant to fix.
        warnings = outcome.warnings
        try:
            after = _damage(index_file(path).findings)
        except OSError as exc:
            after = [finding for finding in damage if finding not in plan.fixes]
            warnings = (*warnings, f"{path}: could not scan it again: {exc}")
        if outcome.pending_swap is None:
            warnings = (*warnings, *filter(None, [keeper.taken_again(path)]))
        return FixedFile(
            path,
            REPAIRED,
            len(after),
            plan=plan,
            backup_id=outcome.backup_id,
            backup_path=outcome.backup_path,
            carried_over_bytes=outcome.carried_over_bytes,
            warnings=warnings,
            pending_swap=outcome.pending_swap,
            left=tuple(after),
        )
    if isinstance(outcome, Skipped):
        result = CLEAN if outcome.reason is SkipReason.NOTHING_TO_DO else SKIPPED
        detail = outcome.detail
        if outcome.reason is SkipReason.LIVE:
            detail += quiet_period_advice(path, options, scanned.index.session_id, now)
        return FixedFile(path, result, len(damage), str(outcome.reason), detail, plan, left=left)
    assert isinstance(outcome, Failed)
    return FixedFile(
        path, FAILED, len(damage), str(outcome.reason), outcome.detail, plan, left=left
    )


def live_detail(
    path: Path, options: ApplyOptions, session_id: str | None, now: RepairNow
) -> str | None:
    """Why the session of `path` may be live, as `fix` would find at its write (with `now`'s
    command when only the quiet period holds it), or None when it is idle."""
    live, why = session_liveness(
        path, options.claude_dirs(path), options.quiet_period, session_id=session_id
    )
    if not live:
        return None
    return f"{path}: the session may be in use: {why}" + quiet_period_advice(
        path, options, session_id, now
    )


def quiet_period_advice(
    path: Path, options: ApplyOptions, session_id: str | None, now: RepairNow
) -> str:
    """When only the quiet period keeps `fix` from repairing `path` (no Claude Code process has its
    session open): the command that repairs it now (`now`); else nothing."""
    if options.quiet_period <= 0:
        return ""
    live, _ = session_liveness(path, options.claude_dirs(path), 0, session_id=session_id)
    if live:
        return ""
    return now.advice(path)
