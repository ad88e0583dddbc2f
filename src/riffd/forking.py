"""Forked helper processes: the scan's decoder (riffd.transcript.parallel_read) and the ingest's reader
(riffd.archive.ingest). Where forking is safe, a pipe the child can read ahead through, the child's
first steps, and reaping it. A helper only ever saves time: its parent does the work itself when the
helper fails. And how many CPUs this process may use (`usable_cpus`), for helpers and threads."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # <linux/fcntl.h>; Python 3.10+ names it
PIPE_BYTES = 1 << 20  # Linux's limit for anyone


def usable_cpus() -> int:
    """How many CPUs this process may run on (its affinity where the system has one, as Linux does;
    else the machine's count, as on macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether a helper process may be forked here: Linux, and no other thread in this process."""
    return sys.platform.startswith("linux") and threading.active_count() == 1


def fork_context() -> Any:
    """The multiprocessing context helpers are made with (imported here, when one is)."""
    import multiprocessing

    return multiprocessing.get_context("fork")


def big_pipe(context: Any) -> tuple[Connection, Connection]:
    """A one-way pipe (receiving end, sending end) of PIPE_BYTES where the system allows, so the
    child reads ahead."""
    receiver, sender = context.Pipe(duplex=False)
    with contextlib.suppress(OSError):
        fcntl.fcntl(sender.fileno(), F_SETPIPE_SZ, PIPE_BYTES)
    return receiver, sender


def as_child(*parent_ends: Connection) -> None:
    """A helper's first steps: close its copies of the parent's pipe ends (when the parent dies,
    even by SIGKILL, the child's next send or receive then fails and it exits, where it would
    otherwise wait forever), and leave Ctrl-C to the parent."""
    for end in parent_ends:
        end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def reap(child: BaseProcess, wait: float | None) -> None:
    """Wait up to `wait` seconds (None: until it ends) for a child that was started, then kill it if
    need be."""
    if child.pid is None:
        return
    child.join(wait)
    if child.is_alive():
        child.kill()
        child.join()
