"""The health report as Markdown (`latest.md`, and what `riffd report` and `riffd status` print)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from riffd.reports.model import (
    ArchiveFigures,
    AttentionItem,
    DaemonState,
    HealthReport,
    PendingCall,
    iso_seconds,
    verdict_words,
)


def render_markdown(report: HealthReport) -> str:
    """Return a short human-readable summary of a report."""
    daemon, files, repairs = report.daemon, report.files, report.repairs
    findings, tracker, backups, latency = (
        report.findings,
        report.tracker,
        report.backups,
        report.latency,
    )
    lines = [
        f"# riffd health report ({iso_seconds(report.generated_at)})",
        "",
        f"**{verdict_words(report)}**"
        + (": " + "; ".join(report.problems) if report.problems else ""),
        "",
        *([note, ""] if (note := stopped_figures_note(report)) else []),
        f"- daemon: {_daemon_words(daemon)}",
        _config_line(daemon),
        f"- watcher: {report.watcher.observer or '-'} over {', '.join(report.watcher.roots) or '-'}; "
        f"{report.watcher.events} events, {report.watcher.rescans} rescans"
        + (
            f"; not there as a folder: {', '.join(report.watcher.missing_roots)} (nothing watched "
            "there; a root missing when the daemon started is watched once it appears)"
            if report.watcher.missing_roots
            else ""
        ),
        f"- files: {files.watched} watched, {files.with_findings} with findings, {files.repaired} repaired"
        + (f", {files.rechecking} being read again after their repair" if files.rechecking else ""),
        f"- open findings: {_counts(findings.open)}"
        + (f"; acknowledged: {_counts(findings.acknowledged)}" if findings.acknowledged else ""),
        _pending_line(findings.pending),
        *_attention_lines(report.attention),
        f"- redundant tool calls: {tracker.redundant} ({_counts(tracker.by_tool)}), "
        f"{tracker.bytes_wasted:,} bytes of results repeated; top sessions: "
        + (", ".join(f"{item.session} {item.redundant}" for item in tracker.top_sessions) or "-"),
        _archive_line(report.archive),
        f"- repaired findings: {_counts(findings.repaired)}",
        f"- repairs: {repairs.done} done; skipped {_counts(repairs.skipped)}; "
        f"failed {_counts(repairs.failed)}",
        f"- backups: {backups.count} ({backups.total_bytes:,} bytes), oldest "
        f"{iso_seconds(backups.oldest) or '-'}",
        f"- I/O: {report.io.retries} retries, {report.io.give_ups} give-ups",
        f"- latency (event to done): p50 {_seconds(latency.p50)}, p95 "
        f"{_seconds(latency.p95)}, max {_seconds(latency.maximum)}",
    ]
    if report.databases.state.moved_aside:
        lines.append(
            "- state database: damaged earlier, moved aside to "
            f"{', '.join(report.databases.state.moved_aside)}"
            " (rebuilt by a rescan; delete the old file when you like)"
        )
    if report.databases.archive.moved_aside:
        lines.append(
            "- archive database: damaged earlier, moved aside to "
            f"{', '.join(report.databases.archive.moved_aside)}"
            f" (`{report.riffd} archive recover` copies its readable lines into the new archive)"
        )
    for error in report.errors[-5:]:
        lines.append(
            f"- error: {error.message}" + (f" ({error.suggestion})" if error.suggestion else "")
        )
    return "\n".join(lines) + "\n"


def _config_line(daemon: DaemonState) -> str:
    config = daemon.config_path or "defaults (no file)"
    reload = daemon.last_reload
    if reload is not None and reload.ok is False:
        errors = "; ".join(reload.errors) or "see the log"
        return f"- config: the daemon runs on {config} as it was before the last reload, which failed: {errors}"
    return f"- config: {config}"


def _daemon_words(daemon: DaemonState) -> str:
    if not daemon.running:
        last = iso_seconds(daemon.last_seen)
        return (
            f"stopped, last seen at {last} (pid {daemon.pid})" if last else "none has run here yet"
        )
    words = f"{'starting' if daemon.starting else 'running'}, pid {daemon.pid}"
    if daemon.uptime_seconds:
        words += f", up {daemon.uptime_seconds:.0f} s"
    if daemon.repair_mode:
        words += f", {daemon.repair_mode} mode"
    return words


def _pending_line(pending: Sequence[PendingCall]) -> str:
    if not pending:
        return "- pending tool calls: none"
    shown = ", ".join(f"{item.tool_id} ({item.path}, line {item.line})" for item in pending[:5])
    more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
    return f"- pending tool calls (live sessions; their tools may still be running): {shown}{more}"


def _attention_lines(items: Sequence[AttentionItem], shown: int = 20) -> list[str]:
    lines = [
        f"- {'acknowledged' if item.state == 'acknowledged' else 'needs attention'}: {item.path} "
        f"line {', '.join(map(str, item.lines[:3])) or '-'}: {item.finding_class}: {item.action}"
        for item in items[:shown]
    ]
    if len(items) > shown:
        lines.append(f"- and {len(items) - shown} more under `attention` in latest.json")
    return lines


def _archive_line(archive: ArchiveFigures) -> str:
    if archive.stored_bytes is None:
        return "- archive: -"
    ratio = f"{archive.ratio:.1%} of" if archive.ratio is not None else "of"
    behind = archive.bytes_behind or 0
    return (
        f"- archive: {archive.stored_bytes:,} bytes on disk, {ratio} {seen_words(archive)}, "
        f"{archive.sessions} session(s); behind: {archive.files_behind} file(s), "
        f"{behind:,} bytes{archive_age(archive)}"
    )


def stopped_figures_note(report: HealthReport) -> str:
    """What the renderers say above the figures when no daemon runs: they are what it last saw,
    and when (empty while one runs, or when none ever ran here)."""
    daemon = report.daemon
    if daemon.running or daemon.last_seen is None:
        return ""
    age = (report.generated_at - daemon.last_seen).total_seconds()
    return (
        f"The files, findings, repairs and archive below are as the daemon last saw them, at "
        f"{iso_seconds(daemon.last_seen)} ({age:.0f} s before this report); `{report.riffd} scan` looks at "
        "the files as they are now."
    )


def archive_age(archive: ArchiveFigures) -> str:
    """How old the archive's figures are, as the renderers say it (empty when they are fresh)."""
    if archive.as_of is None or archive.age_seconds is None or archive.age_seconds < 1:
        return ""
    return f" (as of {iso_seconds(archive.as_of)}, {archive.age_seconds:.0f} s before this report)"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def seen_words(archive: ArchiveFigures) -> str:
    """'N bytes seen (M of transcript lines, K of files kept whole)': what the archive's size is
    measured against (the lines alone, from a daemon that did not count the files)."""
    raw = archive.raw_bytes or 0
    if archive.whole_bytes is None:
        return f"{raw:,} bytes of transcript lines seen"
    return (
        f"{raw + archive.whole_bytes:,} bytes seen ({raw:,} of transcript lines, "
        f"{archive.whole_bytes:,} of files kept whole)"
    )
