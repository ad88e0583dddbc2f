"""`riffd scan`: report damage in transcripts without changing anything."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from riffd import __version__
from riffd.archive.schema import ARCHIVE_NAME
from riffd.claude_code.folders import default_roots
from riffd.claude_code.liveness import claude_dirs_for, session_liveness
from riffd.commands.arguments import Parser, transcript_targets
from riffd.commands.config_loading import config_for_folders
from riffd.commands.output import (
    EXIT_ERROR,
    EXIT_FINDINGS,
    EXIT_OK,
    REPORT_SCHEMA,
    Progress,
    ctrl_c_or_ignored,
    print_json,
    riffd_advice,
)
from riffd.config import Config
from riffd.forking import usable_cpus
from riffd.fsio import REAL_FILES, FileSystem, pin_mmap_threshold
from riffd.transcript.acks import acknowledged_in
from riffd.transcript.findings import INFORMATIONAL, Finding
from riffd.transcript.scan import FileReport, scan_file
from riffd.transcript.shape import NOT_A_TRANSCRIPT

if TYPE_CHECKING:
    from concurrent.futures import Future


def register(commands: argparse._SubParsersAction[Parser]) -> None:
    """Add `riffd scan` to the riffd subcommands."""
    scan = commands.add_parser(
        "scan",
        help="report damage in transcripts; changes nothing",
        description="Report damage in transcripts without changing anything. PATHs are "
        "files, folders, session ids or `latest` (default: Claude Code's projects folders).",
    )
    scan.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="transcript files or folders, session ids (or a prefix only one has), `latest`, or project paths",
    )
    scan.add_argument("--json", action="store_true", help="print one JSON report on stdout")
    scan.add_argument(
        "--project",
        action="append",
        default=[],
        metavar="PATH",
        help="also scan the transcripts of this project's Claude Code folder (repeatable)",
    )
    scan.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="scan up to N files at once, in worker processes (default: one per CPU, at most "
        f"{MAX_JOBS}); a file scanned alone of {PARALLEL_MIN_MB} MB or more is read by a second "
        f"process while this one indexes it. 1: everything in this process. Runs under "
        f"{PARALLEL_MIN_MB} MB of files use one process whatever N is",
    )
    scan.set_defaults(run=run_scan)


MAX_JOBS = 4  # the default's cap: each worker holds one file's index (about 200 MB at 1 GB)
PARALLEL_MIN_MB = 32  # below this, starting workers costs more than it saves


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (1 or more)")
    return value


def default_jobs() -> int:
    """One worker per CPU this process may run on, at most MAX_JOBS."""
    return max(1, min(MAX_JOBS, usable_cpus()))


@dataclass(frozen=True)
class LiveCheck:
    """Whether a Claude Code process runs a session, or wrote to it within the quiet period, as
    `fix` would judge it: the configured Claude folder and roots (with the shell's) are asked.
    Sent to the scan's worker processes, so plain values."""

    claude_dir: Path
    roots: tuple[Path, ...]
    quiet_period: float

    @classmethod
    def of(cls, config: Config) -> LiveCheck:
        """The check `config` asks for: its Claude folder, its roots and the default ones, and its
        quiet period."""
        return cls(
            config.claude_dir, config.roots + tuple(default_roots()), config.repair.quiet_period
        )

    def __call__(self, path: Path, session_id: str | None) -> bool:
        """Whether the session of the transcript `path` (also known as `session_id`) may be live."""
        folders = claude_dirs_for(path, self.claude_dir, self.roots)
        return session_liveness(path, folders, self.quiet_period, session_id=session_id)[0]


def _scan_one(
    path: Path,
    backup_dir: str,
    riffd: str,
    live: LiveCheck,
    decoder_process: bool = False,
    fs: FileSystem = REAL_FILES,
) -> FileReport:
    return scan_file(
        path,
        fs=fs,
        backup_dir=backup_dir,
        is_live=live,
        decoder_process=decoder_process,
        riffd=riffd,
    )


def _scan_in_worker(path: Path, backup_dir: str, riffd: str, live: LiveCheck) -> FileReport:
    """`_scan_one` in a worker process: its reads stop once the parent asks (`_StoppableFiles`)."""
    return _scan_one(path, backup_dir, riffd, live, fs=_STOPPABLE)


def _reports(
    files: list[Path], backup_dir: Path, jobs: int, riffd: str, live: LiveCheck
) -> list[FileReport]:
    """Every file's report, in the order of `files`: scanned in up to `jobs` worker processes when
    the run is big enough to gain from them, else here."""
    progress = Progress(len(files))
    reports: list[FileReport | None] = [None] * len(files)
    try:
        sizes = [_size(path) for path in files] if jobs > 1 and len(files) > 1 else []
        if sum(sizes) >= PARALLEL_MIN_MB * 1_000_000:
            _scan_in_workers(
                files, sizes, str(backup_dir), riffd, live, min(jobs, len(files)), reports, progress
            )
        # every file here when serial; the rest if a worker died
        for number, path in enumerate(files):
            if reports[number] is None:
                report = reports[number] = _scan_one(
                    path, str(backup_dir), riffd, live, decoder_process=jobs > 1
                )
                progress.step(int(report.metrics.get("bytes", 0)))
    finally:
        progress.close()
    return [report for report in reports if report is not None]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # scan_file reports the error


def _scan_in_workers(
    files: list[Path],
    sizes: list[int],
    backup_dir: str,
    riffd: str,
    live: LiveCheck,
    jobs: int,
    reports: list[FileReport | None],
    progress: Progress,
) -> None:
    """Fill `reports` by scanning `files` in `jobs` worker processes, the biggest first (so one big
    file does not finish alone at the end). A worker that dies (killed, out of memory) leaves its
    files unscanned, with a warning: the caller scans them here. Workers ignore Ctrl-C; an interrupt
    stops them and raises KeyboardInterrupt here."""
    order = sorted(range(len(files)), key=lambda number: -sizes[number])
    # Ctrl-C only sets a flag while the pool runs, looked at between waits: a KeyboardInterrupt
    # raised wherever the main thread happens to be can leave a future's lock held (inside
    # concurrent.futures.wait), and the pool's shutdown then waits for it for ever.
    interrupted: list[int] = []

    def on_ctrl_c(signum: int, _frame: object) -> None:
        interrupted.append(signum)

    in_main = threading.current_thread() is threading.main_thread()
    ctrl_c = ctrl_c_or_ignored(on_ctrl_c)
    previous = (
        (
            signal.signal(signal.SIGINT, ctrl_c),
            # a forked worker has its handler from its first instant (see _worker_init)
            signal.signal(STOP_SIGNAL, _ask_to_stop),
        )
        if in_main
        else None
    )
    executor = context = None
    broken: type[BaseException] = _NotRaised
    try:
        # imported with the flag set up: a KeyboardInterrupt raised inside an import can be lost
        # (importlib's module-lock callback only says "Exception ignored") or break it half-way
        import multiprocessing  # here: a serial scan starts without them
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        from concurrent.futures.process import BrokenProcessPool

        broken = BrokenProcessPool

        # fork is the cheapest start, and safe while this process runs no other thread; else (or
        # on macOS) spawn.
        context = multiprocessing.get_context(
            "fork" if sys.platform == "linux" and threading.active_count() == 1 else "spawn"
        )
        spawned = context.get_start_method() == "spawn"
        if in_main:
            # Ctrl-C is held back while the workers start: a forked worker starts with it held back
            # (its _worker_init then ignores it); a spawned one, a new interpreter, starts ignoring
            # it (ignored is what an exec keeps), else a Ctrl-C before its _worker_init shows a
            # traceback of its imports. Held back here meanwhile, it sets the flag after.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            if spawned:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            executor = ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init)
            pending: dict[Future[FileReport], int] = {
                executor.submit(_scan_in_worker, files[number], backup_dir, riffd, live): number
                for number in order
            }
        finally:
            if in_main:  # a Ctrl-C held back meanwhile sets the flag now
                if spawned:
                    signal.signal(signal.SIGINT, ctrl_c)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        while pending and not interrupted:
            done, _ = wait(pending, timeout=INTERRUPT_POLL, return_when=FIRST_COMPLETED)
            for future in done:
                number = pending.pop(future)
                report = reports[number] = future.result()
                progress.step(int(report.metrics.get("bytes", 0)))
    # a BrokenProcessPool (also while files are handed over: a worker killed at once)
    except broken as exc:
        if not interrupted:
            left = sum(report is None for report in reports)
            print(
                f"riffd: warning: a scan worker process died ({exc}); scanning the {left} file(s) left in this process",
                file=sys.stderr,
            )
    finally:
        try:
            if interrupted and context is not None:
                _stop_workers(context)
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        finally:
            if previous is not None:
                # once interrupted, the process ends: Ctrl-C again would cut its last words
                signal.signal(signal.SIGINT, signal.SIG_IGN if interrupted else previous[0])
                signal.signal(STOP_SIGNAL, previous[1])
    if interrupted:
        raise KeyboardInterrupt


class _NotRaised(Exception):
    """What `_scan_in_workers` catches until its BrokenProcessPool is imported: nothing raises it."""


# seconds between looks at whether Ctrl-C was pressed while worker processes scan
INTERRUPT_POLL = 0.05
# what the parent sends its workers to stop them (see _StoppableFiles)
STOP_SIGNAL = signal.SIGUSR1


class ScanStopped(Exception):
    """A worker's scan, stopped at a read because the scan was interrupted."""


class _StoppableFiles(FileSystem):
    """The real files, for a worker: once the parent sent STOP_SIGNAL, the next read raises
    ScanStopped, so the scan running ends within a chunk's read and the pool sends that back as any
    result. Killing a worker instead can cut it off in the middle of sending a result, and the
    pool then waits for the rest of it for ever."""

    stop = False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if _StoppableFiles.stop:
            raise ScanStopped("the scan was interrupted")
        return super().pread(fd, size, offset)


_STOPPABLE = _StoppableFiles()


def _ask_to_stop(_signum: int, _frame: object) -> None:
    _StoppableFiles.stop = True


def _stop_workers(context: Any) -> None:
    """Ask every worker process to stop its scan (the pool's: this process starts no other
    multiprocessing child while it runs)."""
    for worker in context.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, STOP_SIGNAL)


def _worker_init() -> None:
    """A worker's first steps: Ctrl-C is the parent's (no traceback from every worker), the parent
    asks it to stop by STOP_SIGNAL, and it ends when the parent has gone (killed, say: no worker
    left waiting for work for ever)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(STOP_SIGNAL, _ask_to_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # (ignored: held back no more)
    threading.Thread(target=_end_with, args=(os.getppid(),), daemon=True).start()


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    os._exit(EXIT_ERROR)


PARENT_POLL = 0.5  # seconds between a worker's looks at whether its parent is still there


def run_scan(args: argparse.Namespace) -> int:
    """`riffd scan`: print findings per file; exit 0 clean, 1 findings, 2 errors."""
    started = time.monotonic()
    pin_mmap_threshold()  # a steady peak memory (riffd.fsio says why)
    config = config_for_folders(args)
    riffd = riffd_advice(args)  # (how the commands it advises start)
    files, errors = transcript_targets(
        args.paths,
        args.project,
        archive_path=config.state_dir / ARCHIVE_NAME,
        riffd=riffd,
        roots=config.roots,
    )
    reports = _reports(
        files, config.backups.dir, args.jobs or default_jobs(), riffd, LiveCheck.of(config)
    )
    errors += [report.error for report in reports if report.error]
    findings = [finding for report in reports for finding in report.findings]
    acks = acknowledged_in(config.state_dir)
    acked = {
        id(finding) for finding in findings if acks and acks.of(finding.path, finding.to_json())
    }
    if args.json:
        print_json(
            {
                "schema": REPORT_SCHEMA,
                "riffd": __version__,
                "files": [
                    _report_json(report, acked)
                    for report in reports
                    if report.findings or report.error
                ],
                "summary": _summary(reports, findings, errors, time.monotonic() - started)
                | {"acknowledged": len(acked)},
                "errors": errors,
            }
        )
    else:
        for report in reports:
            if report.findings:
                _print_file_findings(report, acked)
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    _print_summary(reports, findings, errors, time.monotonic() - started, len(acked))
    if errors:
        return EXIT_ERROR
    damage = [
        finding
        for finding in findings
        if finding.cls not in INFORMATIONAL and id(finding) not in acked
    ]
    return EXIT_FINDINGS if damage else EXIT_OK


def _report_json(report: FileReport, acked: set[int]) -> dict[str, object]:
    out = report.to_json()
    out["findings"] = [
        finding.to_json() | ({"acknowledged": True} if id(finding) in acked else {})
        for finding in report.findings
    ]
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
    label = f" ({NOT_A_TRANSCRIPT}: {report.not_a_transcript})" if report.not_a_transcript else ""
    print(f"{report.path}: {len(report.findings)} finding(s){label}")
    for finding in report.findings:
        where = "line " + ", ".join(str(line) for line in finding.lines[:6])
        if len(finding.lines) > 6:
            where += f" (+{len(finding.lines) - 6} more)"
        print(
            f"  {where}: {finding.cls}{' (acknowledged)' if id(finding) in acked else ''}: {finding.message}"
        )
        if finding.api_error:
            print(f"    API error on resume: {finding.api_error}")
    for advice in report.suggestions:
        print(f"  suggestion: {advice}")


def _print_summary(
    reports: list[FileReport],
    findings: list[Finding],
    errors: list[str],
    seconds: float,
    acknowledged: int,
) -> None:
    by_class = ", ".join(
        f"{name} {count}" for name, count in sorted(Counter(str(f.cls) for f in findings).items())
    )
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
