"""What one stress mode did and found (bench/stress.py and bench/stress_swap.py count in it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Tally:
    """What one mode did and found."""

    mode: str
    rounds: int = 0
    lost: int = 0  # lines (or, for rename, new versions) lost
    dangling: int = 0  # lines whose parentUuid names no line of the file
    torn: int = 0  # files with a torn or unparseable line
    brought_back: int = 0  # deleted transcripts that exist again
    bad_backups: int = 0
    bad_databases: int = 0
    leftovers: int = 0  # temp files a later run did not clean up
    missing: int = 0  # transcripts no longer on the filesystem
    not_identical: int = 0  # files that differ from a clean repair of the same lines
    unarchived: int = 0  # lines a session held that are in no generation of the archive
    repairs: int = 0
    appended: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def losses(self) -> int:
        return (
            self.lost
            + self.dangling
            + self.torn
            + self.brought_back
            + self.bad_backups
            + self.bad_databases
            + self.leftovers
            + self.missing
            + self.not_identical
            + self.unarchived
        )

    def note(self, text: str) -> None:
        if len(self.notes) < 10:
            self.notes.append(text)
