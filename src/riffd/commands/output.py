"""What commands give back: the exit codes, JSON output and the progress line of a long run."""

from __future__ import annotations

import errno
import io
import os
import select
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import argparse

EXIT_OK = 0  # nothing wrong (scan), or everything that could be repaired was (fix)


EXIT_FINDINGS = 1  # findings remain


EXIT_ERROR = 2  # bad arguments, unreadable files, failed repairs


# The program reading riffd's output stopped reading (`riffd archive search x | head -1`): the code
# a shell gives a process that SIGPIPE ended (128 + 13), as it does for grep or cat there.
EXIT_READER_GONE = 141
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports a command it ended)


REPORT_SCHEMA = 1


def stdout_reader_gone() -> bool:
    """Whether standard output is a pipe or socket whose reading end is closed (poll reports an
    error or a hang-up on it: Linux and macOS alike). Asked only after a BrokenPipeError, so that
    one from riffd's own pipes is never taken for it."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, ValueError, OSError):
        return False
    return any(event & (select.POLLERR | select.POLLHUP) for _fd, event in events)


def leave_quietly_for_closed_stdout() -> int:
    """Point standard output at /dev/null, so nothing left in its buffer fails again as Python
    exits, and return EXIT_READER_GONE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return EXIT_READER_GONE


PROGRESS_MIN_FILES = 20


@dataclass
class Progress:
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
            self.stream.write(
                f"\rriffd: {self.done}/{self.total} files, {self.bytes_done / 1e6:.0f} MB, "
                f"{rate:.0f} MB/s "
            )
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


INTERRUPTED = "riffd: interrupted"  # the one line every command says on Ctrl-C


def say_interrupted() -> int:
    """What every command does on Ctrl-C: one line, exit 130; a Ctrl-C after it is ignored (the
    process ends: another would only cut the line or show a traceback)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(INTERRUPTED, file=sys.stderr)
    return EXIT_INTERRUPTED


class CtrlCNoted:
    """Within a `with` block, a Ctrl-C is noted (`noted`), not raised: for the command line's
    imports, where a KeyboardInterrupt is not safe to raise. CPython 3.11 turns one raised in a
    class body's `__set_name__` (a dataclass's field) into a RuntimeError with a traceback, and
    orjson 3.13's module set-up crashed the process (SIGSEGV) on one. Only in the main thread, and
    only where Ctrl-C raises KeyboardInterrupt (an ignored one stays ignored)."""

    def __init__(self) -> None:
        self.noted = False
        self._held = False

    def __enter__(self) -> CtrlCNoted:
        import signal
        import threading

        self._held = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        )
        if self._held:
            signal.signal(signal.SIGINT, self._note)
        return self

    def _note(self, _signum: int, _frame: object) -> None:
        self.noted = True

    def __exit__(self, *_exc: object) -> None:
        import signal

        if self._held:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def ctrl_c_or_ignored(handler: Any) -> Any:
    """`handler` for Ctrl-C, or SIG_IGN where the process started with Ctrl-C ignored (a script's
    background job): an ignored Ctrl-C stays ignored in every command."""
    import signal

    return signal.SIG_IGN if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else handler


def skipped_line(path: object, reason: object, detail: str) -> str:
    """`skipped PATH: REASON: DETAIL`, the line `fix`, `backups restore` and `archive restore` print
    for a file they left alone; DETAIL without the path it starts with (said once, not twice)."""
    return f"skipped {path}: {reason}: {detail.removeprefix(f'{path}: ')}"


def print_json(document: object) -> None:
    """Print `document` on stdout as indented JSON."""
    import orjson

    from riffd.display import display_json

    sys.stdout.write(display_json(document, orjson.OPT_INDENT_2).decode() + "\n")


def advised_config_file(args: argparse.Namespace) -> str | None:
    """The config file a command riffd advises names with `--config`: the one this command was
    given, by `--config` or by $RIFFD_CONFIG (the shell the advice runs in may not have it), when
    it is there (a file named and missing: riffd went on with the defaults, and a command naming
    it would stop at it)."""
    from riffd.display import config_named

    flag = getattr(args, "config", None)
    return config_named(flag if flag is not None else os.environ.get("RIFFD_CONFIG"))


def riffd_words(args: argparse.Namespace) -> list[str]:
    """How a command riffd advises starts: riffd.display.riffd_words with the configuration this
    command runs on (`advised_config_file`)."""
    from riffd.display import riffd_words as words_for

    return words_for(advised_config_file(args))


def riffd_advice(args: argparse.Namespace) -> str:
    """`riffd_words` as the shell text a command riffd advises starts with."""
    from riffd.display import riffd_invocation

    return riffd_invocation(advised_config_file(args))


class ClosedOutput(io.TextIOBase):
    """Standard output for a riffd started with it closed (`riffd ... >&-`, where Python leaves
    sys.stdout None): a command that prints nothing there runs as usual (`archive ingest`, the
    daemon); the first line one prints raises an OSError that says so, which the command line
    turns into one line and exit 2, not a traceback nor a result lost in silence."""

    def _closed(self) -> OSError:
        return OSError(
            errno.EBADF,
            "closed, so what this command prints would be lost; send it somewhere (a file, a pipe, "
            "or >/dev/null to drop it)",
            "standard output",
        )

    def write(self, text: str) -> int:
        if not text:
            return 0
        raise self._closed()

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    @property
    def buffer(self) -> Any:
        raise self._closed()

    def isatty(self) -> bool:
        return False
