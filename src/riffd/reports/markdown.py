"""The health report as Markdown (`latest.md`, and what `riffd report` prints)."""

from __future__ import annotations

from typing import Any

from riffd.reports.build import _tracker_summary


def render_markdown(report: dict[str, Any]) -> str:
    """Return a short human-readable summary of a report."""
    daemon, files, repairs = report["daemon"], report["files"], report["repairs"]
    status = "healthy" if report["healthy"] else "needs attention"
    tracker = report.get("tracker") or _tracker_summary(
        {}
    )  # reports written before the tracker lack it
    lines = [
        f"# riffd health report ({report['generated_at']})",
        "",
        f"**{status}**" + ("" if report["healthy"] else ": " + "; ".join(report["problems"])),
        "",
        f"- daemon: {_daemon_words(daemon)}",
        _config_line(daemon),
        f"- watcher: {report['watcher']['observer'] or '-'} over {', '.join(report['watcher']['roots']) or '-'}; "
        f"{report['watcher']['events']} events, {report['watcher']['rescans']} rescans",
        f"- files: {files['watched']} watched, {files['with_findings']} with findings, {files['repaired']} repaired",
        f"- open findings: {_counts(report['findings']['open'])}"
        + (
            f"; acknowledged: {_counts(report['findings']['acknowledged'])}"
            if report["findings"].get("acknowledged")
            else ""
        ),
        _pending_line(report["findings"].get("pending", [])),
        *_attention_lines(report.get("attention", [])),
        f"- redundant tool calls: {tracker['redundant']} ({_counts(tracker['by_tool'])}), "
        f"{tracker['bytes_wasted']:,} bytes of results repeated; top sessions: "
        + (
            ", ".join(f"{item['session']} {item['redundant']}" for item in tracker["top_sessions"])
            or "-"
        ),
        _archive_line(report.get("archive") or {}),
        f"- repaired findings: {_counts(report['findings']['repaired'])}",
        f"- repairs: {repairs['done']} done; skipped {_counts(repairs['skipped'])}; "
        f"failed {_counts(repairs['failed'])}",
        f"- backups: {report['backups']['count']} ({report['backups']['bytes']:,} bytes), oldest "
        f"{report['backups']['oldest'] or '-'}",
        f"- I/O: {report['io']['retries']} retries, {report['io']['give_ups']} give-ups",
        f"- latency (event to done): p50 {_seconds(report['latency_seconds']['p50'])}, p95 "
        f"{_seconds(report['latency_seconds']['p95'])}, max {_seconds(report['latency_seconds']['max'])}",
    ]
    for name, database in (report.get("databases") or {}).items():
        if database["moved_aside"]:
            lines.append(
                f"- {name} database: damaged earlier, moved aside to {', '.join(database['moved_aside'])}"
                + (
                    " (rebuilt by a rescan; delete the old file when you like)"
                    if name == "state"
                    else " (`riffd archive recover` copies its readable lines into the new archive)"
                )
            )
    for error in report["errors"][-5:]:
        lines.append(
            f"- error: {error['message']}"
            + (f" ({error['suggestion']})" if error.get("suggestion") else "")
        )
    return "\n".join(lines) + "\n"


def _config_line(daemon: dict[str, Any]) -> str:
    config = daemon.get("config_path") or "defaults (no file)"
    reload = daemon.get("last_reload") or {}
    if reload.get("ok") is False:
        errors = "; ".join(reload.get("errors") or []) or "see the log"
        return f"- config: the daemon runs on {config} as it was before the last reload, which failed: {errors}"
    return f"- config: {config}"


def _daemon_words(daemon: dict[str, Any]) -> str:
    if not daemon["running"]:
        last = daemon.get("last_seen")
        return (
            f"stopped, last seen at {last} (pid {daemon['pid']})"
            if last
            else "none has run here yet"
        )
    words = f"{'starting' if daemon.get('starting') else 'running'}, pid {daemon['pid']}"
    if daemon.get("uptime_seconds"):
        words += f", up {daemon['uptime_seconds']:.0f} s"
    if daemon.get("repair_mode"):
        words += f", {daemon['repair_mode']} mode"
    return words


def _pending_line(pending: list[dict[str, Any]]) -> str:
    if not pending:
        return "- pending tool calls: none"
    shown = ", ".join(
        f"{item['tool_id']} ({item['path']}, line {item['line']})" for item in pending[:5]
    )
    more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
    return f"- pending tool calls (live sessions; their tools may still be running): {shown}{more}"


def _attention_lines(items: list[dict[str, Any]], shown: int = 20) -> list[str]:
    lines = [
        f"- {'acknowledged' if item.get('state') == 'acknowledged' else 'needs attention'}: {item['path']} "
        f"line {', '.join(map(str, item['lines'][:3])) or '-'}: {item['class']}: {item['action']}"
        for item in items[:shown]
    ]
    if len(items) > shown:
        lines.append(f"- and {len(items) - shown} more under `attention` in latest.json")
    return lines


def _archive_line(archive: dict[str, Any]) -> str:
    if archive.get("stored_bytes") is None:
        return "- archive: -"
    ratio = f"{archive['ratio']:.1%} of" if archive.get("ratio") is not None else "of"
    return (
        f"- archive: {archive['stored_bytes']:,} bytes stored, {ratio} {archive['raw_bytes']:,} seen, "
        f"{archive['sessions']} session(s); behind: {archive['files_behind']} file(s), "
        f"{archive['bytes_behind']:,} bytes"
    )


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"
