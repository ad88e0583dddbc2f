"""The systemd notify protocol (sd_notify(3)) without dependencies: readiness, status, watchdog,
reload, stop.

Each message is one datagram of newline-separated `KEY=value` fields, sent to the AF_UNIX socket
named by $NOTIFY_SOCKET. Outside systemd (no $NOTIFY_SOCKET) every call is a no-op returning False,
so the daemon calls these unconditionally. A failed send is logged at debug and returns False: the
service manager going away must never take the daemon down with it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends sd_notify messages to the socket named in the environment, or does nothing when there
    is none."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        """Read NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from `environ` (default:
        os.environ)."""
        env = os.environ if environ is None else environ
        self.address = _socket_address(env.get("NOTIFY_SOCKET", ""))
        self._watchdog_usec = env.get("WATCHDOG_USEC", "")
        self._watchdog_pid = env.get("WATCHDOG_PID", "")

    @property
    def enabled(self) -> bool:
        """True when a notify socket is configured (riffd runs under systemd with Type=notify)."""
        return self.address is not None

    def ready(self, status: str | None = None) -> bool:
        """Tell systemd that startup finished (READY=1), with an optional status line; return True
        if sent."""
        fields = ["READY=1"]
        if status is not None:
            fields.append(f"STATUS={_one_line(status)}")
        return self.send(*fields)

    def status(self, text: str) -> bool:
        """Set the one-line status `systemctl status` shows; return True if sent."""
        return self.send(f"STATUS={_one_line(text)}")

    def watchdog(self) -> bool:
        """Ping the watchdog (WATCHDOG=1); return True if sent."""
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        """Tell systemd that shutdown began (STOPPING=1); return True if sent."""
        return self.send("STOPPING=1")

    def reloading(self) -> bool:
        """Tell systemd that a reload began (RELOADING=1 plus MONOTONIC_USEC, which
        Type=notify-reload in systemd >= 253 requires and older versions ignore); send ready() when
        it is done; return True if sent."""
        # time.monotonic_ns is CLOCK_MONOTONIC on Linux, the clock systemd compares MONOTONIC_USEC
        # against.
        return self.send("RELOADING=1", f"MONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def watchdog_interval(self) -> float | None:
        """Return how often to call watchdog(), in seconds (half of $WATCHDOG_USEC, as
        sd_watchdog_enabled(3) recommends), or None when no watchdog is set for this process or
        there is no notify socket."""
        if not self.enabled:
            return None
        try:
            usec = int(self._watchdog_usec)
        except ValueError:
            return None
        if usec <= 0:
            return None
        if self._watchdog_pid:
            try:
                meant_for = int(self._watchdog_pid)
            except ValueError:
                return None
            if meant_for != os.getpid():  # set for a parent that exec'd us without clearing it
                return None
        return usec / 2 / 1_000_000

    def send(self, *fields: str) -> bool:
        """Send `fields` as one datagram; return True if sent, False when disabled or the send
        failed."""
        if self.address is None or not fields:
            return False
        message = "\n".join(fields).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(message, self.address)
        except OSError as exc:
            log.debug("could not notify systemd at %r: %s", self.address, exc)
            return False
        return True


def _socket_address(value: str) -> str | None:
    """Given $NOTIFY_SOCKET, return the address to send to: a path as is, `@name` as the abstract
    name `\\0name`; None when unset or of a kind riffd does not speak (e.g. vsock:)."""
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value:
        log.debug("ignoring NOTIFY_SOCKET=%r: only paths and @abstract names are supported", value)
    return None


def _one_line(text: str) -> str:
    # A newline would start a new field: a status line could otherwise send READY=1 or STOPPING=1.
    return " ".join(text.splitlines())
