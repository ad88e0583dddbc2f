"""The daemon's log as a person reads it: timestamps unless journald adds its own."""

from __future__ import annotations

import logging
import re

from helpers.run import riffd_env
from riffd.logs import plain_formatter


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("riffd.daemon.runner", logging.INFO, __file__, 1, message, (), None)


def test_plain_lines_carry_a_timestamp_when_not_under_journald() -> None:
    line = plain_formatter({}).format(record("started"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d{4} riffd: INFO: started", line), line


def test_under_journald_the_timestamp_is_left_to_journald() -> None:
    assert (
        plain_formatter({"JOURNAL_STREAM": "8:12345"}).format(record("started"))
        == "riffd: INFO: started"
    )


def test_log_file_is_private_and_rotated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess
    import sys

    log = tmp_path / "logs" / "riffd.log"
    script = (
        "import logging, riffd.logs as l\n"
        "l.ROTATE_BYTES = 2000\n"
        f"l.configure('info', 'plain', {str(log)!r})\n"
        "for i in range(200): logging.getLogger('riffd.test').info('line %d', i)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, env=riffd_env())
    assert log.exists() and (log.stat().st_mode & 0o777) == 0o600
    rotated = sorted(p.name for p in log.parent.iterdir())
    # 3 old files kept, no more
    assert rotated == [
        "riffd.log",
        "riffd.log.1",
        "riffd.log.2",
        "riffd.log.3",
    ]
    assert all(
        p.stat().st_size <= 2100 and p.stat().st_mode & 0o777 == 0o600 for p in log.parent.iterdir()
    )
    assert "line 199" in log.read_text()
    assert os.stat(log.parent).st_mode & 0o077 == 0
