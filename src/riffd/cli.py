"""The `riffd` command line: scan, fix, backups.

Data goes to stdout, summaries, progress and log lines to stderr. `main(argv)` returns the exit
code; nothing here calls sys.exit.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

import orjson

from riffd import __version__, archive_cli, config_cli, daemon_cli, export, hook, service, show_cli
from riffd.apply import ApplyOptions, Failed, Repaired, Skipped, SkipReason, apply_plan
from riffd.backup import BackupError, BackupStore
from riffd.findings import INFORMATIONAL, REPAIRABLE, Finding
from riffd.fsio import ReadFailed
from riffd.paths import claude_config_dir, default_backup_dir, default_roots, iter_transcripts
from riffd.plan import InsertLine, RemoveLine, RepairPlan, ReplaceLine
from riffd.projects import resolve_target
from riffd.repair import RepairOptions, plan_file_repair
from riffd.scan import FileReport, index_file, scan_file

EXIT_OK = 0  # nothing wrong (scan), or everything that could be repaired was (fix)
EXIT_FINDINGS = 1  # findings remain
EXIT_ERROR = 2  # bad arguments, unreadable files, failed repairs

REPORT_SCHEMA = 1
PROGRESS_MIN_FILES = 20

log = logging.getLogger("riffd")


class UsageError(Exception):
    """A command-line mistake; the message says what to do instead."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every riffd command."""
    parser = _Parser(
        prog="riffd",
        description="Keeps Claude Code session transcripts healthy: finds duplicate, missing and orphan tool "
        "results, broken chains and torn lines, and repairs pairing damage safely (idle sessions only, after "
        "a verified backup, by atomic replace).",
        epilog="Exit codes: 0 nothing wrong / all repaired, 1 findings remain, 2 error. "
        "Environment: CLAUDE_CONFIG_DIR (Claude Code's folder, default ~/.claude), "
        "RIFFD_STATE_DIR (riffd's state and backups).",
    )
    parser.add_argument("--version", action="version", version=f"riffd {__version__}")
    parser.add_argument("--log-level", default=None, choices=["debug", "info", "warning", "error"],
                        help="how much to log on stderr (default: warning; for `run`, the config's log.level)")
    parser.add_argument("--config", type=Path, default=None,
                        help="the TOML configuration file (default: $RIFFD_CONFIG, else "
                        "<user config dir>/riffd/config.toml)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    scan = commands.add_parser("scan", help="report damage in transcripts; changes nothing",
                               description="Report damage in transcripts without changing anything. PATHs are "
                               "files or folders (default: Claude Code's projects folders).")
    scan.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="transcript files or folders")
    scan.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    scan.add_argument("--project", action="append", default=[], metavar="PATH",
                      help="also scan the transcripts of this project's Claude Code folder (repeatable)")
    scan.set_defaults(run=run_scan)

    fix = commands.add_parser(
        "fix",
        help="repair tool-result pairing in idle sessions, after a verified backup",
        description="Repair duplicate, orphan and missing tool results and repeated tool_use ids. A file is "
        "rewritten only if its session is idle (not registered as running by Claude Code, not modified for the "
        "quiet period), only after a verified backup, and only by atomic replace; every line the repair does "
        "not name stays byte for byte. Malformed lines, torn tails and broken parent links are reported, "
        "never edited.",
    )
    fix.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="transcript files or folders")
    fix.add_argument("--dry-run", action="store_true", help="print the planned edits; write nothing")
    fix.add_argument("--quiet-period", type=float, default=120.0, metavar="SECONDS",
                     help="how long a file must be unmodified to count as idle (default: 120)")
    fix.add_argument("--no-synthesize", action="store_true",
                     help="do not add placeholder results for tool calls that never got one")
    fix.add_argument("--backup-dir", type=Path, default=None,
                     help="where backups go (default: <state dir>/backups)")
    fix.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    fix.add_argument("--project", action="append", default=[], metavar="PATH",
                     help="also repair the transcripts of this project's Claude Code folder (repeatable)")
    fix.set_defaults(run=run_fix)

    backups = commands.add_parser("backups", help="list, restore or prune riffd's backups",
                                  description="Work with the verified backups riffd takes before each repair.")
    backups.add_argument("--backup-dir", type=Path, default=None,
                         help="the backup folder (default: <state dir>/backups)")
    actions = backups.add_subparsers(dest="action", metavar="ACTION", parser_class=_Parser)
    listing = actions.add_parser("list", help="list backups, newest last")
    listing.add_argument("--json", action="store_true", help="print JSON on stdout")
    listing.set_defaults(run=run_backups_list)
    restore = actions.add_parser(
        "restore",
        help="put a backup back",
        description="Write a backup back to its original path (only if that session is idle, and after a "
        "verified backup of what is there now) or, with --to, to a new file.",
    )
    restore.add_argument("backup_id", metavar="ID")
    restore.add_argument("--to", type=Path, default=None, help="write to this path instead of the original")
    restore.add_argument("--force", action="store_true", help="with --to: replace an existing file")
    restore.add_argument("--quiet-period", type=float, default=120.0, metavar="SECONDS",
                         help="how long the original must be unmodified to count as idle (default: 120)")
    restore.set_defaults(run=run_backups_restore)
    prune = actions.add_parser("prune", help="remove old backups (the newest of each file is always kept)")
    prune.add_argument("--keep", type=int, default=10, metavar="N", help="backups to keep per file (default: 10)")
    prune.add_argument("--max-age", type=float, default=90, metavar="DAYS",
                       help="remove backups older than this (default: 90)")
    prune.add_argument("--max-total-mb", type=float, default=None, metavar="MB",
                       help="then remove the oldest until the store is under this size")
    prune.set_defaults(run=run_backups_prune)
    # Commands defined in their own modules register below, one line each.
    config_cli.register(commands)
    service.register(commands)
    daemon_cli.register(commands)
    export.register(commands)
    show_cli.register(commands)
    hook.register(commands)
    archive_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run riffd with `argv` (default: sys.argv[1:]) and return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        logging.basicConfig(level=(args.log_level or "warning").upper(), format="riffd: %(levelname)s: %(message)s",
                            stream=sys.stderr)
        if not hasattr(args, "run"):
            parser.print_help(sys.stderr)
            return EXIT_ERROR
        return int(args.run(args))
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("riffd: interrupted", file=sys.stderr)
        return 130


# --- scan ----------------------------------------------------------------------------------------


def transcript_targets(paths: list[Path], projects: Sequence[str] = ()) -> tuple[list[Path], list[str]]:
    """Return the transcript files named by `paths` and the `projects`' Claude Code folders (default roots
    when both are empty) and errors for bad paths."""
    errors: list[str] = []
    files: list[Path] = []
    for project in projects:
        try:
            files.extend(resolve_target(project, default_roots()))
        except FileNotFoundError as exc:
            errors.append(str(exc))
    if not paths and not projects:
        roots = [root for root in default_roots() if root.is_dir()]
        if not roots:
            print(f"riffd: no Claude Code transcripts here: {default_roots()[0]} does not exist "
                  "(set CLAUDE_CONFIG_DIR, or pass a file or folder)", file=sys.stderr)
        paths = roots
    for path in paths:
        try:
            files.extend(iter_transcripts([path]))
        except FileNotFoundError as exc:
            errors.append(f"{exc}: check the path")
    return files, errors


@dataclass
class _Progress:
    """A one-line progress counter on stderr, shown only on a terminal and for long runs."""

    total: int
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    done: int = 0
    bytes_done: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def enabled(self) -> bool:
        return self.total >= PROGRESS_MIN_FILES and self.stream.isatty()

    def step(self, size: int) -> None:
        self.done += 1
        self.bytes_done += size
        if self.enabled:
            rate = self.bytes_done / 1e6 / max(time.monotonic() - self.started, 1e-6)
            self.stream.write(f"\rriffd: {self.done}/{self.total} files, {self.bytes_done / 1e6:.0f} MB, "
                              f"{rate:.0f} MB/s ")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _reports(files: list[Path], backup_dir: Path) -> Iterator[FileReport]:
    progress = _Progress(len(files))
    try:
        for path in files:
            report = scan_file(path, backup_dir=str(backup_dir))
            progress.step(int(report.metrics.get("bytes", 0)))
            yield report
    finally:
        progress.close()


def run_scan(args: argparse.Namespace) -> int:
    """`riffd scan`: print findings per file; exit 0 clean, 1 findings, 2 errors."""
    started = time.monotonic()
    files, errors = transcript_targets(args.paths, args.project)
    reports = list(_reports(files, default_backup_dir()))
    errors += [report.error for report in reports if report.error]
    findings = [finding for report in reports for finding in report.findings]
    if args.json:
        _print_json({
            "schema": REPORT_SCHEMA,
            "riffd": __version__,
            "files": [report.to_json() for report in reports if report.findings or report.error],
            "summary": _summary(reports, findings, errors, time.monotonic() - started),
            "errors": errors,
        })
    else:
        for report in reports:
            if report.findings:
                _print_file_findings(report)
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    _print_summary(reports, findings, errors, time.monotonic() - started)
    if errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if any(finding.cls not in INFORMATIONAL for finding in findings) else EXIT_OK


def _summary(
    reports: list[FileReport], findings: list[Finding], errors: list[str], seconds: float
) -> dict[str, object]:
    by_class = Counter(str(finding.cls) for finding in findings)
    return {
        "files": len(reports),
        "files_with_findings": sum(1 for report in reports if report.findings),
        "bytes": sum(int(report.metrics.get("bytes", 0)) for report in reports),
        "findings": len(findings),
        "findings_by_class": dict(sorted(by_class.items())),
        "errors": len(errors),
        "seconds": round(seconds, 3),
    }


def _print_file_findings(report: FileReport) -> None:
    print(f"{report.path}: {len(report.findings)} finding(s)")
    for finding in report.findings:
        where = "line " + ", ".join(str(line) for line in finding.lines[:6])
        if len(finding.lines) > 6:
            where += f" (+{len(finding.lines) - 6} more)"
        print(f"  {where}: {finding.cls}: {finding.message}")
        if finding.api_error:
            print(f"    API error on resume: {finding.api_error}")
    for advice in report.suggestions:
        print(f"  suggestion: {advice}")


def _print_summary(reports: list[FileReport], findings: list[Finding], errors: list[str], seconds: float) -> None:
    by_class = ", ".join(f"{name} {count}" for name, count in sorted(Counter(str(f.cls) for f in findings).items()))
    size = sum(int(report.metrics.get("bytes", 0)) for report in reports)
    with_findings = sum(1 for report in reports if report.findings)
    print(
        f"riffd: scanned {len(reports)} file(s), {size / 1e6:.1f} MB in {seconds:.1f} s: "
        f"{len(findings)} finding(s) in {with_findings} file(s)"
        + (f" ({by_class})" if by_class else "")
        + (f", {len(errors)} error(s)" if errors else ""),
        file=sys.stderr,
    )


def _print_json(document: object) -> None:
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


# --- fix -----------------------------------------------------------------------------------------


def run_fix(args: argparse.Namespace) -> int:
    """`riffd fix`: repair idle files; exit 0 when nothing repairable remains, 1 when findings remain, 2 on errors."""
    files, errors = transcript_targets(args.paths, args.project)
    backup_dir = args.backup_dir or default_backup_dir()
    options = ApplyOptions(
        backup_dir=backup_dir,
        claude_dir=claude_config_dir(),
        roots=tuple(default_roots()) + tuple(path for path in args.paths if path.is_dir()),
        quiet_period=args.quiet_period,
    )
    repair_options = RepairOptions(add_missing_results=not args.no_synthesize)
    results: list[dict[str, object]] = []
    remaining = 0
    counts: Counter[str] = Counter()
    progress = _Progress(len(files))
    for path in files:
        outcome = _fix_one(path, options, repair_options, args.dry_run)
        progress.step(path.stat().st_size if path.exists() else 0)
        counts[str(outcome["outcome"])] += 1
        remaining += int(outcome.pop("_remaining"))  # type: ignore[call-overload]
        if outcome["outcome"] == "error" or outcome["outcome"] == "failed":
            errors.append(str(outcome["detail"]))
        if outcome["outcome"] != "clean":
            results.append(outcome)
            if not args.json:
                _print_fix_outcome(outcome)
    progress.close()
    if args.json:
        _print_json({"schema": REPORT_SCHEMA, "riffd": __version__, "dry_run": args.dry_run,
                     "files": results, "summary": dict(sorted(counts.items())), "errors": errors})
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    word = "would repair" if args.dry_run else "repaired"
    print(f"riffd: {len(files)} file(s): {counts['repaired'] + counts['would_repair']} {word}, "
          f"{counts['skipped']} skipped, {counts['failed'] + counts['error']} failed, "
          f"{counts['clean']} with nothing to repair; {remaining} finding(s) remain", file=sys.stderr)
    if errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if remaining else EXIT_OK


def _fix_one(path: Path, options: ApplyOptions, repair_options: RepairOptions, dry_run: bool) -> dict[str, object]:
    """Scan, plan and (unless dry_run) apply one file; return a JSON-ready outcome."""
    try:
        scanned = index_file(path, with_identity=True)
    except (OSError, ReadFailed) as exc:
        return {"path": str(path), "outcome": "error", "detail": f"{path}: {exc}", "_remaining": 0}
    repairable = [finding for finding in scanned.findings if finding.cls in REPAIRABLE]
    if not repairable:
        return {"path": str(path), "outcome": "clean", "_remaining": len(scanned.findings),
                "unrepaired": [finding.to_json() for finding in scanned.findings]}
    try:
        plan = plan_file_repair(scanned, repair_options)
    except (OSError, ValueError) as exc:
        return {"path": str(path), "outcome": "error", "detail": f"{path}: could not plan a repair: {exc}",
                "_remaining": len(scanned.findings)}
    left = len(scanned.findings) - len(plan.fixes)
    base: dict[str, object] = {"path": str(path), "plan": _plan_json(plan), "notes": list(plan.notes)}
    if plan.is_empty:
        return base | {"outcome": "skipped", "reason": "nothing_safe_to_do",
                       "detail": "; ".join(plan.notes) or "no safe repair", "_remaining": len(scanned.findings)}
    if dry_run:
        return base | {"outcome": "would_repair", "_remaining": len(scanned.findings)}
    # The lines' own sessionId too: a 2.0.x subagent file (agent-<id>.jsonl) is named after its agent.
    outcome = apply_plan(plan, replace(options, session_id=scanned.index.session_id))
    if isinstance(outcome, Repaired):
        return base | {"outcome": "repaired", "backup_id": outcome.backup_id,
                       "backup_path": str(outcome.backup_path),
                       "carried_over_bytes": outcome.carried_over_bytes, "_remaining": left}
    if isinstance(outcome, Skipped):
        result = "clean" if outcome.reason is SkipReason.NOTHING_TO_DO else "skipped"
        return base | {"outcome": result, "reason": str(outcome.reason), "detail": outcome.detail,
                       "_remaining": len(scanned.findings)}
    assert isinstance(outcome, Failed)
    return base | {"outcome": "failed", "reason": str(outcome.reason), "detail": outcome.detail,
                   "_remaining": len(scanned.findings)}


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
    elif kind == "skipped":
        print(f"skipped {path}: {outcome['reason']}: {outcome['detail']}")
    elif kind in ("failed", "error"):
        print(f"failed {path}: {outcome['detail']}")
    notes = outcome.get("notes")
    for note in notes if isinstance(notes, list) else []:
        print(f"  note: {note}")


# --- backups -------------------------------------------------------------------------------------


def _store(args: argparse.Namespace) -> BackupStore:
    return BackupStore(args.backup_dir or default_backup_dir())


def run_backups_list(args: argparse.Namespace) -> int:
    """`riffd backups list`: print every backup, oldest first."""
    store = _store(args)
    records = store.list() if store.root.is_dir() else []
    if args.json:
        _print_json([
            {"id": r.backup_id, "source": r.source_path, "session": r.session_id, "sha256": r.sha256,
             "size": r.size, "created": r.created_at.isoformat(), "reason": r.reason,
             "findings": list(r.findings), "path": str(r.data_path)}
            for r in records
        ])
        return EXIT_OK
    for record in records:
        print(f"{record.backup_id}  {record.created_at:%Y-%m-%d %H:%M:%S}  {record.size:>12,} B  "
              f"{record.source_path}  ({len(record.findings)} finding(s))")
    print(f"riffd: {len(records)} backup(s) in {store.root}", file=sys.stderr)
    return EXIT_OK


def run_backups_restore(args: argparse.Namespace) -> int:
    """`riffd backups restore ID [--to PATH]`: put a backup back; exit 0 done, 1 skipped, 2 failed."""
    store = _store(args)
    options = ApplyOptions(backup_dir=store.root, claude_dir=claude_config_dir(), roots=tuple(default_roots()),
                           quiet_period=args.quiet_period)
    outcome = store.restore(args.backup_id, args.to, overwrite=args.force, options=options)
    if isinstance(outcome, Skipped):
        print(f"skipped {outcome.path}: {outcome.reason}: {outcome.detail}", file=sys.stderr)
        return EXIT_FINDINGS
    if isinstance(outcome, Failed):
        print(f"riffd: error: {outcome.detail}", file=sys.stderr)
        return EXIT_ERROR
    safety = f" (what was there is backed up as {outcome.safety_backup_id})" if outcome.safety_backup_id else ""
    print(f"restored {args.backup_id} to {outcome.path}{safety}")
    return EXIT_OK


def run_backups_prune(args: argparse.Namespace) -> int:
    """`riffd backups prune`: remove old backups, keeping the newest of each file."""
    store = _store(args)
    if not store.root.is_dir():
        print(f"riffd: no backups in {store.root}", file=sys.stderr)
        return EXIT_OK
    max_total = int(args.max_total_mb * 1e6) if args.max_total_mb is not None else None
    try:
        removed = store.prune(keep_per_file=args.keep, max_age_days=args.max_age, max_total_bytes=max_total)
    except (ValueError, BackupError) as exc:
        raise UsageError(f"riffd backups prune: {exc}") from exc
    for record in removed:
        print(f"removed {record.backup_id}  {record.source_path}")
    print(f"riffd: removed {len(removed)} backup(s) from {store.root}", file=sys.stderr)
    return EXIT_OK

