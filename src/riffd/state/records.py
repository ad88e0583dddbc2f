"""What the state store keeps of a transcript: its watermark (how far it was read, and how to tell
the same file grown from another one) and its state (findings, repairs due).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from riffd.state.database import loads

FINGERPRINT_BYTES = 4096


HISTORY_DAYS = 90


@dataclass(frozen=True)
class Watermark:
    """How far a transcript has been read, and how to tell it is still the same file."""

    path: str
    dev: int
    ino: int
    offset: int
    lines: int
    head_len: int
    head_sha: str
    tail_len: int
    tail_sha: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class FileState:
    """A watched file's watermark and the findings of its last processing."""

    watermark: Watermark
    session_id: str | None
    findings_json: (
        str  # as stored: parsed into `findings` when first asked for (a damaged file has thousands)
    )
    repairable: int
    processed_at: float

    @cached_property
    def findings(self) -> list[dict[str, Any]]:
        """The findings, each in its `Finding.to_json` form."""
        return loads(self.findings_json)  # type: ignore[no-any-return]

    def may_hold(self, cls: str) -> bool:
        """False when no finding can be of class `cls` (its name is nowhere in the stored text): a
        check that costs no parsing."""
        return f'"{cls}"' in self.findings_json
