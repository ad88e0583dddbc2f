"""How a hook gives Claude Code its answer: the JSON on standard output, which Claude Code reads when
the hook exits 0. Standard library only (the hooks run inside every tool call and every start)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def answered(stdout: Any, text: str, consequence: str) -> None:
    """Write `text`, a hook's answer, to `stdout` and flush it. When standard output cannot take it
    (closed, a full disk, a reader gone), say so in one line on stderr, ending with `consequence`
    (what Claude Code does without the answer), and point its descriptor at /dev/null, so that
    nothing fails again as Python exits: the hook still exits 0, as every failure of a hook does."""
    try:
        if stdout is None:  # (started with it closed)
            raise OSError("closed")
        stdout.write(text)
        stdout.flush()
    except OSError as exc:
        print(f"riffd hook: standard output: {exc.strerror or exc}; {consequence}", file=sys.stderr)
        try:
            descriptor = stdout.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, descriptor)
            os.close(null)
        except (AttributeError, OSError, ValueError):
            pass
