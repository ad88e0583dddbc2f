"""What commands give back: the exit codes, JSON output and the progress line of a long run."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

EXIT_OK = 0  # nothing wrong (scan), or everything that could be repaired was (fix)


EXIT_FINDINGS = 1  # findings remain


EXIT_ERROR = 2  # bad arguments, unreadable files, failed repairs


REPORT_SCHEMA = 1


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


def print_json(document: object) -> None:
    """Print `document` on stdout as indented JSON."""
    import orjson

    from riffd.display import display_json

    sys.stdout.write(display_json(document, orjson.OPT_INDENT_2).decode() + "\n")
