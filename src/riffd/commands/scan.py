"""`riffd scan`: report damage in transcripts without changing anything."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from riffd import __version__
from riffd.commands.common import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    REPORT_SCHEMA,
    Parser,
    Progress,
    print_json,
    transcript_targets,
)
from riffd.commands.configured import config_for_folders
from riffd.config import RepairConfig
from riffd.paths import claude_config_dir, default_roots
from riffd.transcript.acks import acknowledged_in
from riffd.transcript.findings import INFORMATIONAL, Finding
from riffd.transcript.liveness import claude_dirs_for, session_liveness
from riffd.transcript.scan import FileReport, scan_file


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd scan` to the riffd subcommands."""
    scan = commands.add_parser("scan", help="report damage in transcripts; changes nothing",
                               description="Report damage in transcripts without changing anything. PATHs are "
                               "files or folders (default: Claude Code's projects folders).")
    scan.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="transcript files or folders")
    scan.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    scan.add_argument("--project", action="append", default=[], metavar="PATH",
                      help="also scan the transcripts of this project's Claude Code folder (repeatable)")
    scan.set_defaults(run=run_scan)


def _is_live(path: Path, session_id: str | None) -> bool:
    """Whether a Claude Code process runs the session, or wrote to it within the default quiet period."""
    folders = claude_dirs_for(path, claude_config_dir(), default_roots())
    return session_liveness(path, folders, RepairConfig.quiet_period, session_id=session_id)[0]


def _reports(files: list[Path], backup_dir: Path) -> Iterator[FileReport]:
    progress = Progress(len(files))
    try:
        for path in files:
            report = scan_file(path, backup_dir=str(backup_dir), is_live=_is_live)
            progress.step(int(report.metrics.get("bytes", 0)))
            yield report
    finally:
        progress.close()


def run_scan(args: argparse.Namespace) -> int:
    """`riffd scan`: print findings per file; exit 0 clean, 1 findings, 2 errors."""
    started = time.monotonic()
    files, errors = transcript_targets(args.paths, args.project)
    config = config_for_folders(args)
    reports = list(_reports(files, config.backups.dir))
    errors += [report.error for report in reports if report.error]
    findings = [finding for report in reports for finding in report.findings]
    acks = acknowledged_in(config.state_dir)
    acked = {id(finding) for finding in findings if acks and acks.of(finding.path, finding.to_json())}
    if args.json:
        print_json({
            "schema": REPORT_SCHEMA,
            "riffd": __version__,
            "files": [_report_json(report, acked) for report in reports if report.findings or report.error],
            "summary": _summary(reports, findings, errors, time.monotonic() - started) | {"acknowledged": len(acked)},
            "errors": errors,
        })
    else:
        for report in reports:
            if report.findings:
                _print_file_findings(report, acked)
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    _print_summary(reports, findings, errors, time.monotonic() - started, len(acked))
    if errors:
        return EXIT_ERROR
    damage = [finding for finding in findings if finding.cls not in INFORMATIONAL and id(finding) not in acked]
    return EXIT_FINDINGS if damage else EXIT_OK


def _report_json(report: FileReport, acked: set[int]) -> dict[str, object]:
    out = report.to_json()
    out["findings"] = [finding.to_json() | ({"acknowledged": True} if id(finding) in acked else {})
                       for finding in report.findings]
    return out


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


def _print_file_findings(report: FileReport, acked: set[int]) -> None:
    print(f"{report.path}: {len(report.findings)} finding(s)")
    for finding in report.findings:
        where = "line " + ", ".join(str(line) for line in finding.lines[:6])
        if len(finding.lines) > 6:
            where += f" (+{len(finding.lines) - 6} more)"
        print(f"  {where}: {finding.cls}{' (acknowledged)' if id(finding) in acked else ''}: {finding.message}")
        if finding.api_error:
            print(f"    API error on resume: {finding.api_error}")
    for advice in report.suggestions:
        print(f"  suggestion: {advice}")


def _print_summary(reports: list[FileReport], findings: list[Finding], errors: list[str], seconds: float,
                   acknowledged: int) -> None:
    by_class = ", ".join(f"{name} {count}" for name, count in sorted(Counter(str(f.cls) for f in findings).items()))
    size = sum(int(report.metrics.get("bytes", 0)) for report in reports)
    with_findings = sum(1 for report in reports if report.findings)
    print(
        f"riffd: scanned {len(reports)} file(s), {size / 1e6:.1f} MB in {seconds:.1f} s: "
        f"{len(findings)} finding(s) in {with_findings} file(s)"
        + (f" ({by_class})" if by_class else "")
        + (f", {acknowledged} of them acknowledged" if acknowledged else "")
        + (f", {len(errors)} error(s)" if errors else ""),
        file=sys.stderr,
    )
