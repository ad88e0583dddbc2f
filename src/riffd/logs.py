"""Logging to stderr: one line per event, plain (timestamped, unless journald stamps it) or JSON
(for log shippers)."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

# Attributes every LogRecord has; anything else was passed with `extra=` and goes into the JSON
# line.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any `extra=` fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON."""
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({key: value for key, value in record.__dict__.items() if key not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(entry, default=str).decode()
        except TypeError:  # a path that is not UTF-8: the standard library escapes its surrogates
            return json.dumps(entry, default=str)


def plain_formatter(environ: Mapping[str, str] | None = None) -> logging.Formatter:
    """Return the plain one-line format: with a local timestamp, unless journald stamps the lines
    itself (it sets JOURNAL_STREAM for a service's stderr)."""
    env = os.environ if environ is None else environ
    if env.get("JOURNAL_STREAM"):
        return logging.Formatter("riffd: %(levelname)s: %(message)s")
    return logging.Formatter(
        "%(asctime)s riffd: %(levelname)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S%z"
    )


ROTATE_BYTES = 10 * 1000 * 1000
ROTATE_KEEP = 3


class PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """A size-rotated log whose every file (the first and each one after a rollover) is created
    0600: log lines name transcripts and projects."""

    def _open(self):  # type: ignore[no-untyped-def]
        fd = os.open(
            self.baseFilename,
            os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0),
            0o600,
        )
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


def configure(level: str, format: str = "plain", file: str = "") -> None:
    """Send riffd's log at `level` (debug/info/warning/error) in `format` (plain/json) to stderr, or
    to `file`, rotated by size (ROTATE_BYTES, ROTATE_KEEP old files), private (0600)."""
    handler: logging.Handler
    if file:
        path = Path(file).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # errors: a path that is not UTF-8 is logged with \\udcff escapes, not a logging error
        handler = PrivateRotatingFileHandler(
            path,
            maxBytes=ROTATE_BYTES,
            backupCount=ROTATE_KEEP,
            encoding="utf-8",
            errors="backslashreplace",
        )
    else:
        handler = logging.StreamHandler(sys.stderr)
    if format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(plain_formatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Third-party chatter (a line per inotify event, per scheduler wake-up) stays out of riffd's
    # log.
    for noisy in ("apscheduler", "watchdog"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("apscheduler.scheduler").addFilter(_skipped_run)


def _skipped_run(record: logging.LogRecord) -> bool:
    """Leave out APScheduler's warning that a job's run was skipped because its last run still goes:
    riffd's jobs run one at a time on purpose (a rescan or the archive's compaction can outlast the
    job's interval)."""
    return "maximum number of running instances reached" not in record.getMessage()
