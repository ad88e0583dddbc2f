"""The health report as Prometheus text-format metrics (`metrics.prom`, beside the reports, for
node_exporter's textfile collector): written atomically with every report, so a scrape never reads
half a file.

Every figure comes from the report it is written with; `riffd_report_timestamp_seconds` says when,
so an alert on its age catches a daemon that stopped writing. The same series are written whether
the daemon runs or has stopped (`riffd_up 0`, the last figures kept, uptime 0), so none vanishes; no
label value is empty; the latency is three gauges (NaN before the first change is handled).
"""

from __future__ import annotations

import math

from riffd.reports.model import HealthReport

# name -> (type, help); labels are added where the figure has them.
_METRICS: dict[str, tuple[str, str]] = {
    "riffd_up": ("gauge", "1 when the riffd daemon that wrote this file was running, else 0."),
    "riffd_healthy": (
        "gauge",
        "1 when the report found nothing that needs attention, else 0; no sample while the daemon "
        "starts and has found nothing yet (riffd_starting 1).",
    ),
    "riffd_starting": (
        "gauge",
        "1 while the daemon looks at the files it found at start (no verdict yet), else 0.",
    ),
    "riffd_report_timestamp_seconds": (
        "gauge",
        "When the report behind these figures was made (Unix time).",
    ),
    "riffd_figures_timestamp_seconds": (
        "gauge",
        "When the daemon last stored the figures of files, findings and repairs (Unix time): now "
        "while it runs; a stopped daemon's last moment, however new the report (NaN: none ran).",
    ),
    "riffd_files_watched": ("gauge", "Transcripts riffd keeps a watermark for."),
    "riffd_files_with_findings": (
        "gauge",
        "Transcripts with open findings (not informational, not acknowledged).",
    ),
    "riffd_findings": ("gauge", "Findings by class and state (open, acknowledged, informational)."),
    "riffd_findings_repaired_total": ("counter", "Findings repaired, by class."),
    "riffd_repairs_total": (
        "counter",
        "Repair attempts by outcome (repaired, skipped, failed) and reason.",
    ),
    "riffd_io_retries_total": (
        "counter",
        "Reads retried after an I/O error (cloud-synced folders).",
    ),
    "riffd_io_give_ups_total": ("counter", "Reads given up after every retry."),
    "riffd_archive_stored_bytes": ("gauge", "Bytes the archive takes on disk."),
    "riffd_archive_raw_bytes": ("gauge", "Bytes of transcript lines the archive holds."),
    "riffd_archive_sessions": ("gauge", "Sessions in the archive."),
    "riffd_archive_figures_timestamp_seconds": (
        "gauge",
        "When the daemon gathered the archive's figures (Unix time; with each scheduled report).",
    ),
    "riffd_backups": ("gauge", "Verified backups kept."),
    "riffd_backup_bytes": ("gauge", "Bytes the backups take."),
    "riffd_queue_depth": ("gauge", "Files waiting to be looked at."),
    "riffd_event_latency_p50_seconds": (
        "gauge",
        "From a change on disk to riffd done with it: the median of the recent changes.",
    ),
    "riffd_event_latency_p95_seconds": (
        "gauge",
        "From a change on disk to riffd done with it: the 95th percentile of the recent changes.",
    ),
    "riffd_event_latency_max_seconds": (
        "gauge",
        "From a change on disk to riffd done with it: the longest of the recent changes.",
    ),
    "riffd_uptime_seconds": ("gauge", "How long the daemon has run (0 when it does not run)."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(
    name: str, value: float | int | None, labels: dict[str, str] | None = None
) -> str | None:
    if value is None:
        return None
    label_text = ",".join(
        f'{key}="{_escape(str(item) or "none")}"' for key, item in (labels or {}).items()
    )
    # every digit: a timestamp needs them; NaN for a figure not known yet
    number = (
        str(value) if isinstance(value, int) else "NaN" if math.isnan(value) else repr(float(value))
    )
    return f"{name}{{{label_text}}} {number}" if label_text else f"{name} {number}"


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def render_metrics(report: HealthReport) -> str:
    """Return the report's figures in Prometheus text format (version 0.0.4)."""
    findings, archive, backups, io = report.findings, report.archive, report.backups, report.io
    repairs, latency = report.repairs, report.latency
    by_state = {
        "open": findings.open,
        "acknowledged": findings.acknowledged,
        "informational": findings.informational,
    }
    samples: dict[str, list[str | None]] = {
        "riffd_up": [_sample("riffd_up", int(report.daemon.running))],
        "riffd_healthy": [
            None if report.healthy is None else _sample("riffd_healthy", int(report.healthy))
        ],
        "riffd_starting": [
            _sample("riffd_starting", int(report.daemon.running and report.daemon.starting))
        ],
        "riffd_report_timestamp_seconds": [
            _sample("riffd_report_timestamp_seconds", report.generated_at.timestamp())
        ],
        "riffd_figures_timestamp_seconds": [
            _sample(
                "riffd_figures_timestamp_seconds",
                None if report.daemon.last_seen is None else report.daemon.last_seen.timestamp(),
            )
        ],
        "riffd_files_watched": [_sample("riffd_files_watched", report.files.watched)],
        "riffd_files_with_findings": [
            _sample("riffd_files_with_findings", report.files.with_findings)
        ],
        "riffd_findings": [
            _sample("riffd_findings", count, {"class": name, "state": state})
            for state, counts in by_state.items()
            for name, count in counts.items()
        ],
        "riffd_findings_repaired_total": [
            _sample("riffd_findings_repaired_total", count, {"class": name})
            for name, count in findings.repaired.items()
        ],
        "riffd_repairs_total": [
            _sample("riffd_repairs_total", repairs.done, {"outcome": "repaired", "reason": "none"})
        ]
        + [
            _sample("riffd_repairs_total", count, {"outcome": outcome, "reason": reason})
            for outcome, by_reason in (("skipped", repairs.skipped), ("failed", repairs.failed))
            for reason, count in by_reason.items()
        ],
        "riffd_io_retries_total": [_sample("riffd_io_retries_total", io.retries)],
        "riffd_io_give_ups_total": [_sample("riffd_io_give_ups_total", io.give_ups)],
        "riffd_archive_stored_bytes": [_sample("riffd_archive_stored_bytes", archive.stored_bytes)],
        "riffd_archive_raw_bytes": [_sample("riffd_archive_raw_bytes", archive.raw_bytes)],
        "riffd_archive_sessions": [_sample("riffd_archive_sessions", archive.sessions)],
        "riffd_archive_figures_timestamp_seconds": [
            _sample(
                "riffd_archive_figures_timestamp_seconds",
                None if archive.as_of is None else archive.as_of.timestamp(),
            )
        ],
        "riffd_backups": [_sample("riffd_backups", backups.count)],
        "riffd_backup_bytes": [_sample("riffd_backup_bytes", backups.total_bytes)],
        "riffd_queue_depth": [_sample("riffd_queue_depth", report.queue.depth)],
        **{
            f"riffd_event_latency_{name}_seconds": [
                _sample(f"riffd_event_latency_{name}_seconds", _or_nan(value))
            ]
            for name, value in (
                ("p50", latency.p50),
                ("p95", latency.p95),
                ("max", latency.maximum),
            )
        },
        "riffd_uptime_seconds": [
            _sample("riffd_uptime_seconds", report.daemon.uptime_seconds or 0.0)
        ],
    }
    lines = []
    for name, (kind, text) in _METRICS.items():
        present = [sample for sample in samples.get(name, []) if sample is not None]
        if not present:
            continue
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *present]
    return "\n".join(lines) + "\n"
