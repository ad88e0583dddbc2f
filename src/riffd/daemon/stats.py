"""What a running daemon counts (the live part of its health report), and the advice that goes with an error."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any


def advice(why: str) -> str:
    """Plain-words advice for an error the worker met."""
    if "errno 5" in why or "Input/output error" in why:
        return "a cloud-synced folder? mark it 'always keep on this device'"
    if "Permission denied" in why:
        return "riffd needs read and write access to the transcript and its folder"
    return "run `riffd scan` on the file for details"


@dataclass
class Stats:
    """What the daemon counts while it runs (the live part of the health report)."""

    started: float = field(default_factory=time.time)
    processed: int = 0
    rescans: int = 0
    progress: float = field(default_factory=time.monotonic)  # last time the worker finished an item
    latencies: deque[float] = field(default_factory=lambda: deque(maxlen=2000))
    errors: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=50))
    last_reload: dict[str, Any] | None = None
    busy: bool = False  # the worker is processing a file

    def error(self, message: str, suggestion: str = "") -> None:
        """Keep an error (the last 50) with what to do about it, for the report's `errors`."""
        self.errors.append({"time": time.time(), "message": message, "suggestion": suggestion})
