"""The daemon's log as a person reads it: timestamps unless journald adds its own."""

from __future__ import annotations

import logging
import re

from riffd.logs import plain_formatter


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("riffd.daemon.runner", logging.INFO, __file__, 1, message, (), None)


def test_plain_lines_carry_a_timestamp_when_not_under_journald() -> None:
    line = plain_formatter({}).format(record("started"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d{4} riffd: INFO: started", line), line


def test_under_journald_the_timestamp_is_left_to_journald() -> None:
    assert plain_formatter({"JOURNAL_STREAM": "8:12345"}).format(record("started")) == "riffd: INFO: started"
