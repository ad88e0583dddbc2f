"""`notify.command`: the daemon tells a person (or another program) that a session was damaged,
repaired, or could not be repaired: the command runs with the event as JSON on stdin and a one-line
summary as its last argument.

Events: `damaged` (a session got damage it did not have, after the start-up pass: what was there at
start is in the start-up summary), `repaired`, `repair_failed`. The command runs in the background,
at most a few at a time, each for at most COMMAND_SECONDS; a failing command is logged, never
retried, and never slows the daemon.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import threading
import time
from datetime import datetime
from typing import Any

from riffd.daemon.jobs import INFORMATIONAL_NAMES
from riffd.daemon.worker import Outcome

log = logging.getLogger(__name__)

COMMAND_SECONDS = 30.0
AT_ONCE = 4  # commands running at once; beyond that an event is dropped, and the log says so


class Alerts:
    """Runs `notify.command` for each event; knows which damage each file already had."""

    def __init__(self, command: str) -> None:
        self.command = shlex.split(command) if command.strip() else []
        self._seen: dict[str, frozenset[str]] = {}
        self._slots = threading.BoundedSemaphore(AT_ONCE)

    def file_state(
        self, path: str, damage: dict[str, int], session_id: str | None, *, quiet: bool
    ) -> None:
        """Note a file's damage classes now; send `damaged` when it has classes it did not have
        (unless `quiet`)."""
        classes = frozenset(name for name, count in damage.items() if count)
        new = classes - self._seen.get(path, frozenset())
        self._seen[path] = classes
        if new and not quiet:
            found = ", ".join(f"{name} {damage[name]}" for name in sorted(new))
            self.send(
                {"event": "damaged", "path": path, "session_id": session_id, "classes": damage},
                f"riffd: session damaged: {found} in {path}",
            )

    def outcome(self, outcome: Outcome, *, quiet: bool) -> None:
        """Send what processing one file calls for: `damaged` (not while `quiet`: the start-up
        pass), `repaired`, `repair_failed`."""
        if outcome.kind == "gone":
            self._seen.pop(outcome.path, None)
        # the kinds that judged the file (with its classes)
        elif outcome.kind in (
            "appended",
            "read",
            "rebuilt",
        ):
            damage = {
                name: count
                for name, count in outcome.classes.items()
                if name not in INFORMATIONAL_NAMES
            }
            self.file_state(outcome.path, damage, outcome.session_id, quiet=quiet)
        base = {"path": outcome.path, "session_id": outcome.session_id}
        if outcome.repair == "repaired":
            fixed = ", ".join(f"{name} {count}" for name, count in sorted(outcome.fixed.items()))
            self.send(
                {
                    **base,
                    "event": "repaired",
                    "fixed": outcome.fixed,
                    "backup_id": outcome.backup_id,
                },
                f"riffd: repaired {fixed or 'a session'} in {outcome.path} (backup {outcome.backup_id})",
            )
        elif (outcome.repair or "").startswith("failed"):
            self.send(
                {
                    **base,
                    "event": "repair_failed",
                    "reason": (outcome.repair or "").split(":", 1)[-1],
                    "detail": outcome.why,
                },
                f"riffd: repair failed for {outcome.path}: {outcome.why}",
            )

    def send(self, event: dict[str, Any], summary: str) -> None:
        """Run the command for `event` in the background (nothing when no command is configured)."""
        if not self.command:
            return
        if not self._slots.acquire(blocking=False):
            log.warning(
                "notify.command: %d commands still running; this event is not sent: %s",
                AT_ONCE,
                summary,
            )
            return
        event = {
            **event,
            "time": datetime.now().astimezone().isoformat(timespec="seconds"),
            "summary": summary,
        }
        threading.Thread(
            target=self._run, args=(event, summary), name="riffd-notify", daemon=True
        ).start()

    def _run(self, event: dict[str, Any], summary: str) -> None:
        started = time.monotonic()
        try:
            done = subprocess.run(
                [*self.command, summary],
                input=json.dumps(event).encode(),
                capture_output=True,
                timeout=COMMAND_SECONDS,
                check=False,
            )
            if done.returncode != 0:
                log.warning(
                    "notify.command exited %d for %s event: %s",
                    done.returncode,
                    event["event"],
                    done.stderr.decode(errors="replace").strip()[-300:],
                )
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning(
                "notify.command could not run for %s event (%s) after %.1f s",
                event["event"],
                exc,
                time.monotonic() - started,
            )
        finally:
            self._slots.release()
