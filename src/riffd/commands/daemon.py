"""The daemon's commands: `riffd run`, `riffd report`, `riffd status`."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from pathlib import Path
from typing import Any

import orjson

from riffd.commands.common import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK
from riffd.commands.config import load_despite_errors
from riffd.daemon.state import STATE_NAME
from riffd.database import DatabaseDamaged

EXIT_NOT_RUNNING = 3  # `riffd status`: no daemon holds the state folder (as `systemctl is-active` says 3)


def register(commands: Any) -> None:
    """Add run, report and status to the riffd command parser."""
    run = commands.add_parser(
        "run",
        help="the daemon: watch, check incrementally, repair when idle, report",
        description="Run the daemon in the foreground until SIGTERM or Ctrl-C: it watches the transcript roots, "
        "keeps findings current from each file's watermark, repairs idle sessions (unless repair.mode is "
        "report-only) and writes health reports. SIGHUP, or saving the config file, reloads the configuration. "
        "Usually started by `riffd service install`.",
    )
    run.add_argument("--state-dir", type=Path, default=None, help="riffd's state folder (overrides the config)")
    run.add_argument("--log-file", type=Path, default=None,
                     help="log to this file, rotated by size, instead of stderr (overrides log.file)")
    run.set_defaults(run=run_daemon)

    report = commands.add_parser(
        "report", help="write a health report now and print it",
        description="Build a health report from the state store (and the running daemon's figures), write it to "
        "the report folder as report-<time>.json, latest.json and latest.md, and print it.",
    )
    report.add_argument("--json", action="store_true", help="print the JSON report instead of the summary")
    report.set_defaults(run=run_report)

    status = commands.add_parser(
        "status", help="is the daemon running, and is all well?",
        description="Say whether the daemon runs and summarise its latest report. Exit 0: running and healthy; "
        "1: running, with problems; 3: not running.",
    )
    status.add_argument("--json", action="store_true", help="print the latest report as JSON")
    status.set_defaults(run=run_status)


def run_daemon(args: argparse.Namespace) -> int:
    """`riffd run`: run the daemon until it is told to stop."""
    from riffd.config import ConfigError
    from riffd.daemon.lock import AlreadyRunning
    from riffd.daemon.runner import Daemon

    overrides: dict[str, object] = {}
    if args.state_dir is not None:
        overrides["state_dir"] = str(args.state_dir)
    if getattr(args, "log_level", None):
        overrides["log.level"] = args.log_level
    if args.log_file is not None:
        overrides["log.file"] = str(args.log_file.expanduser().absolute())
    try:
        daemon = Daemon(getattr(args, "config", None), overrides)
    except ConfigError as exc:
        for error in exc.errors:
            print(f"riffd: config error: {error}", file=sys.stderr)
        return EXIT_ERROR
    try:
        return daemon.run()
    except AlreadyRunning as exc:
        print(f"riffd: {exc}", file=sys.stderr)
        return EXIT_ERROR


def run_report(args: argparse.Namespace) -> int:
    """`riffd report`: write a report now; exit 0 healthy, 1 not."""
    from riffd.daemon.lock import running_pid
    from riffd.daemon.report import build_report, render_markdown, write_report
    from riffd.daemon.state import StateStore

    config = load_despite_errors(args)
    if config is None:
        return EXIT_ERROR
    try:
        store = StateStore(config.state_dir / STATE_NAME)
        try:
            snapshot = store.meta("daemon") if running_pid(config.state_dir) else None
            report = build_report(store, config.backups.dir, snapshot)
            path = write_report(report, config.reports.dir, config.reports.keep)
        finally:
            store.close()
    except DatabaseDamaged as exc:
        print(f"riffd: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except sqlite3.Error as exc:
        print(f"riffd: error: {config.state_dir / STATE_NAME}: {exc}; if it persists, stop riffd and start it again "
              "(`riffd run` checks its databases at start)", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_markdown(report))
    print(f"riffd: report written to {path}", file=sys.stderr)
    return EXIT_OK if report["healthy"] else EXIT_FINDINGS


def run_status(args: argparse.Namespace) -> int:
    """`riffd status`: exit 0 running and healthy (or starting), 1 running with problems, 3 not running."""
    from riffd.daemon.lock import running_pid
    from riffd.daemon.report import read_latest, render_markdown

    config = load_despite_errors(args)
    if config is None:
        return EXIT_ERROR
    pid = running_pid(config.state_dir)
    latest = read_latest(config.reports.dir)
    if latest is not None and (latest.get("daemon") or {}).get("pid") != pid:
        latest = as_seen_now(latest, pid)
    if args.json:
        sys.stdout.write(orjson.dumps({"running": pid is not None, "pid": pid, "latest_report": latest},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(f"riffd daemon: running (pid {pid})" if pid else f"riffd daemon: not running (state {config.state_dir})")
        if latest is not None:
            sys.stdout.write(render_markdown(latest))
        else:
            print(f"no report yet in {config.reports.dir}")
    if pid is None:
        return EXIT_NOT_RUNNING
    if latest is None or latest.get("stale"):
        print(f"riffd daemon: starting: pid {pid} has not written its first report yet (it does once the files "
              "found at start are looked at)")
        return EXIT_OK  # starting is not a problem
    return EXIT_OK if latest.get("healthy") else EXIT_FINDINGS


def as_seen_now(report: dict[str, Any], pid: int | None) -> dict[str, Any]:
    """Given a report written by a daemon that is no longer the running one (`pid`: the running daemon, or None),
    return it as true now: that daemon marked stopped, and a problem saying so."""
    daemon = dict(report.get("daemon") or {})
    written_by = daemon.get("pid")
    daemon["running"] = False
    seen = report.get("generated_at", "?")
    problem = (f"this report was written at {seen} by riffd pid {written_by}, which has stopped; "
               + (f"the daemon running now (pid {pid}) has not written one yet" if pid else
                  "no daemon runs now (`riffd run`, or `riffd service install`)"))
    return {**report, "daemon": daemon, "healthy": False, "stale": True,
            "problems": [problem, *[item for item in report.get("problems", []) if "not running" not in item]]}
