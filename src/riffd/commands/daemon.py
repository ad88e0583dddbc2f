"""The daemon's commands: `riffd run`, `riffd report`, `riffd status`."""

from __future__ import annotations

import argparse
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riffd.commands.config_loading import load_despite_errors, start_advice
from riffd.commands.output import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, print_json, riffd_advice
from riffd.config import Config
from riffd.database import BUSY, DatabaseDamaged, full_disk_note, is_busy_error, is_full_error
from riffd.state.database import STATE_NAME

if TYPE_CHECKING:
    from riffd.reports.model import HealthReport

# `riffd status`: no daemon holds the state folder (as `systemctl is-active` says 3)
EXIT_NOT_RUNNING = 3


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
    run.add_argument(
        "--state-dir", type=Path, default=None, help="riffd's state folder (overrides the config)"
    )
    run.add_argument(
        "--log-file",
        type=Path,
        default=None,
        help="log to this file (its folder made if missing), rotated by size, instead of stderr "
        "(overrides log.file)",
    )
    run.set_defaults(run=run_daemon)

    report = commands.add_parser(
        "report",
        help="write a health report now and print it",
        description="Build a health report from the state store and the running daemon's live figures (or a "
        "stopped daemon's last ones, shown as stopped), write it to the report folder as report-<time>.json, "
        "latest.json and latest.md, and print it. Exit 0 healthy (or starting, no verdict yet), 1 not, 2 no state or unreadable state.",
    )
    report.add_argument(
        "--json", action="store_true", help="print the JSON report instead of the summary"
    )
    report.set_defaults(run=run_report)

    status = commands.add_parser(
        "status",
        help="is the daemon running, and is all well?",
        description="Say whether the daemon runs, and how things are now: the state store read with the running "
        "daemon's live figures (a few seconds old at most). Exit 0: running and healthy, or starting; 1: running, "
        "with problems (each named, with the command that deals with it); 2: riffd's state cannot be read; 3: not "
        "running (what it last saw is shown as that).",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print {state, running, pid, report} as JSON (report: the report as of now)",
    )
    status.set_defaults(run=run_status)


def run_daemon(args: argparse.Namespace) -> int:
    """`riffd run`: run the daemon until it is told to stop."""
    from riffd.config import ConfigError
    from riffd.daemon.lock import EXIT_RESTART, AlreadyRunning, restart_in_place
    from riffd.daemon.runner import Daemon
    from riffd.fsio import pin_mmap_threshold

    pin_mmap_threshold()  # the daemon keeps indexes for hours: no heap left full of holes (riffd.fsio says why)
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
        code = daemon.run()
        # its state folder was deleted under it: the same command again, same pid
        if code == EXIT_RESTART:
            restart_in_place()
            return EXIT_FINDINGS  # not started again: a service manager restarts it (exit 2 would stop that)
        return code
    except AlreadyRunning as exc:
        print(f"riffd: {exc}", file=sys.stderr)
        return EXIT_ERROR
    # the state database busy, or not to be opened: never moved
    except (
        sqlite3.OperationalError,
        OSError,
    ) as exc:
        # aside; or the state folder full or not writable
        where = daemon.config.state_dir / STATE_NAME
        if is_busy_error(exc):
            print(f"riffd: error: {where}: {exc} ({BUSY}); start riffd again", file=sys.stderr)
        elif is_full_error(exc, daemon.config.state_dir):
            print(
                f"riffd: error: {exc}; {full_disk_note(daemon.config.state_dir)}: free some space there and start "
                "riffd again",
                file=sys.stderr,
            )
        elif not isinstance(exc, sqlite3.Error):
            print(f"riffd: error: {exc}", file=sys.stderr)
        else:
            print(
                f"riffd: error: {where}: {exc}; check that the state folder is yours, writable and not full",
                file=sys.stderr,
            )
        return EXIT_ERROR


@dataclass(frozen=True)
class CurrentReport:
    """The health report as true now (None when riffd has no state here yet), the running daemon's
    pid, and what latest.html draws beside it as the state store keeps it: the hourly `history`
    (90 days) and the recent `repairs` (empty unless asked for: `status` does not read them)."""

    report: HealthReport | None
    pid: int | None
    history: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    repairs: list[dict[str, Any]] = field(default_factory=list)


def current_report(config: Config, *, page: bool = False) -> CurrentReport:
    """Return the health report as true now (built from the state store and the running daemon's
    live figures, or a stopped daemon's last ones, shown as stopped) and the running daemon's pid;
    with `page`, what latest.html draws too. Raise DatabaseDamaged or sqlite3.Error when the state
    cannot be read."""
    from riffd.config.load import advised_config
    from riffd.daemon.lock import lock_time, running_pid
    from riffd.display import riffd_invocation
    from riffd.reports.build import build_report
    from riffd.state.store import StateStore

    pid = running_pid(config.state_dir)
    path = config.state_dir / STATE_NAME
    if not path.exists():
        return CurrentReport(None, pid)
    store = StateStore(path, read_only=True)
    try:
        snapshot = store.meta("daemon")
        if not isinstance(snapshot, dict):
            snapshot = None
        elif snapshot.get("pid") != pid:  # a stopped daemon's last figures
            snapshot = {**snapshot, "running": False}
        # it said it stops: finishing its queue, if it said so since taking the
        elif not snapshot.get("running"):
            # lock; else these are the last figures of an earlier daemon that had the same pid
            stopping = float(snapshot.get("seen_at") or 0) >= (lock_time(config.state_dir) or 0)
            snapshot = {**snapshot, "stopping": True} if stopping else None
        if pid is not None and (snapshot is None or snapshot.get("pid") != pid):
            # started a moment ago, no figures yet (or it cannot store any: build_report tells which
            # by the age)
            snapshot = {
                "running": True,
                "starting": True,
                "pid": pid,
                "started": lock_time(config.state_dir),
                "unpublished": True,
            }
        report = build_report(
            store,
            config.backups.dir,
            snapshot,
            installed_hook_problems(config),
            riffd_invocation(advised_config(config)),
        )
        if not page:
            return CurrentReport(report, pid)
        return CurrentReport(report, pid, store.history(), store.recent_repairs())
    finally:
        store.close()


def installed_hook_problems(config: Config) -> tuple[str, ...]:
    """The riffd hooks that do not run, in the user's Claude Code settings and in the current
    folder's project settings (`riffd.hooks.checking`)."""
    from riffd.config.load import advised_config
    from riffd.hooks.checking import hook_problems

    project = Path.cwd() / ".claude"
    user = config.claude_dir / "settings.json"
    return hook_problems(
        [user, project / "settings.local.json", project / "settings.json"],
        user_settings=user,
        config=advised_config(config),
    )


def _state_error(config: Config, exc: Exception) -> int:
    if isinstance(exc, DatabaseDamaged):
        from riffd.config.load import advised_config
        from riffd.display import riffd_invocation

        print(
            f"riffd: error: {exc.told(riffd_invocation(advised_config(config)))}", file=sys.stderr
        )
    elif is_full_error(exc, config.state_dir):
        print(
            f"riffd: error: {config.state_dir / STATE_NAME}: {exc}; {full_disk_note(config.state_dir)}, so even "
            "reading the state fails (SQLite needs room for its shared-memory file): free some space there",
            file=sys.stderr,
        )
    else:
        print(
            f"riffd: error: {config.state_dir / STATE_NAME}: {exc}; if it persists, stop riffd and start it again "
            "(`riffd run` checks its databases at start)",
            file=sys.stderr,
        )
    return EXIT_ERROR


def run_report(args: argparse.Namespace) -> int:
    """`riffd report`: write a report now; exit 0 healthy, 1 not, 2 when there is no state to report
    on."""
    from riffd.reports.json import report_document
    from riffd.reports.markdown import render_markdown
    from riffd.reports.publish import write_report

    config = load_despite_errors(args)
    if config is None:
        return EXIT_ERROR
    try:
        current = current_report(config, page=True)
    except (DatabaseDamaged, sqlite3.Error) as exc:
        return _state_error(config, exc)
    report = current.report
    if report is None:
        print(
            f"riffd: nothing to report yet: no riffd state in {config.state_dir} (the daemon makes it: "
            f"{start_advice(args, riffd_advice(args))})",
            file=sys.stderr,
        )
        return EXIT_ERROR
    path = write_report(
        report,
        config.reports.dir,
        config.reports.keep,
        current.history,
        current.repairs,
        config.reports.metrics_readable,
    )
    if args.json:
        print_json(report_document(report))
    else:
        sys.stdout.write(render_markdown(report))
    print(
        f"riffd: report written to {path.parent}: latest.json, latest.md, latest.html and "
        f"metrics.prom, and {path.name} (kept: the newest {config.reports.keep})",
        file=sys.stderr,
    )
    return EXIT_FINDINGS if report.healthy is False else EXIT_OK  # None: starting, no verdict yet


def run_status(args: argparse.Namespace) -> int:
    """`riffd status`: exit 0 running and healthy (or starting), 1 running with problems, 3 not
    running, 2 when the state cannot be read."""
    from riffd.reports.json import report_document
    from riffd.reports.markdown import render_markdown
    from riffd.reports.model import iso_seconds

    config = load_despite_errors(args)
    if config is None:
        return EXIT_ERROR
    try:
        current = current_report(config)
    except (DatabaseDamaged, sqlite3.Error) as exc:
        return _state_error(config, exc)
    report, pid = current.report, current.pid
    daemon = None if report is None else report.daemon
    starting = pid is not None and daemon is not None and daemon.starting
    stopping = pid is not None and daemon is not None and daemon.stopping
    blocked = None if daemon is None else daemon.blocked
    state = (
        "stopped"
        if pid is None
        else "stopping"
        if stopping
        else "starting"
        if starting
        else "running"
    )
    if args.json:
        document = None if report is None else report_document(report)
        print_json({"state": state, "running": pid is not None, "pid": pid, "report": document})
    else:
        if pid is None and report is None:
            riffd = riffd_advice(args)
            print(
                f"riffd daemon: not running; no riffd state in {config.state_dir} yet "
                f"({start_advice(args, riffd)})"
            )
            for problem in installed_hook_problems(config):
                print(f"- {problem}")
        elif pid is None:
            last_seen = None if daemon is None else iso_seconds(daemon.last_seen)
            last = (
                f", last seen at {last_seen} (pid {daemon.pid})"
                if daemon is not None and last_seen
                else ""
            )
            print(f"riffd daemon: stopped{last}; state {config.state_dir}")
        elif stopping:
            print(
                f"riffd daemon: stopping (pid {pid}): finishing what is queued (10 s at most), then it exits"
            )
        elif report is None:
            print(
                f"riffd daemon: running (pid {pid}), but there is no state in {config.state_dir}: it started a "
                "moment ago, or the folder was deleted under it (it then starts again in place within seconds)"
            )
        elif starting:
            print(
                f"riffd daemon: starting (pid {pid}): looking at the files found at start"
                + (f"; but {blocked}" if blocked else "; health is judged once that pass is done")
            )
        else:
            age = None if daemon is None else daemon.figures_age_seconds
            print(
                f"riffd daemon: running (pid {pid})"
                + (f", figures from {age:.0f} s ago" if age is not None else "")
            )
        if report is not None:
            sys.stdout.write(render_markdown(report))
    if pid is None or stopping:
        return EXIT_NOT_RUNNING
    # not a problem, unless something keeps the daemon itself from working (a full disk)
    if starting:
        return EXIT_FINDINGS if blocked else EXIT_OK
    return EXIT_OK if report is not None and report.healthy is not False else EXIT_FINDINGS
