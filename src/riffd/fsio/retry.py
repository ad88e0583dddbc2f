"""Retrying what a cloud-synced folder fails for a moment: EIO only, per a `RetryPolicy`, counted for
the health report, with the hint that names the likely cause.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tenacity import RetryCallState

log = logging.getLogger("riffd.fsio")


T = TypeVar("T")


CLOUD_SYNC_HINT = (
    "this looks like a cloud-synced folder (OneDrive, Dropbox, iCloud) serving a file that is not on "
    "this device; mark the folder 'always keep on this device' so reads do not fail"
)


@dataclass(frozen=True)
class RetryPolicy:
    """How reads retry EIO: `attempts` tries in all, waiting `first_wait` seconds, then doubling."""

    attempts: int = 3
    first_wait: float = 0.5
    max_wait: float = 8.0


DEFAULT_RETRY = RetryPolicy()


class IOStats:
    """Process-wide counts of EIO retries and give-ups, for the health report."""

    def __init__(self) -> None:
        self.retries = 0
        self.give_ups = 0


IO_STATS = IOStats()


class ReadFailed(OSError):
    """A read that kept failing with EIO after every retry; the message says what to do."""


def is_cloud_sync_error(exc: BaseException) -> bool:
    """Return True for the I/O errors worth retrying (EIO only; never ENOENT, EACCES, ...)."""
    return isinstance(exc, OSError) and not isinstance(exc, ReadFailed) and exc.errno == errno.EIO


def retrying_call(
    func: Callable[[], T],
    *,
    what: str,
    policy: RetryPolicy = DEFAULT_RETRY,
    on_retry: Callable[[], None] | None = None,
) -> T:
    """Call `func`, retrying EIO per `policy`; raise ReadFailed naming `what` when every try failed.

    The first failure is logged as a warning with the cloud-sync hint, later ones at debug level,
    so a flaky sync client does not flood the log.
    """

    def before_sleep(state: RetryCallState) -> None:
        IO_STATS.retries += 1
        if on_retry is not None:
            on_retry()
        exc = state.outcome.exception() if state.outcome else None
        if state.attempt_number == 1:
            log.warning("I/O error on %s (%s); retrying. Hint: %s", what, exc, CLOUD_SYNC_HINT)
        else:
            log.debug("I/O error again on %s (attempt %d): %s", what, state.attempt_number, exc)

    try:
        # the fast path: building tenacity's machinery per read costs more than the read
        return func()
    except OSError as exc:
        if not is_cloud_sync_error(exc):
            raise
        first_failure: list[OSError] = [exc]

    def attempt() -> T:
        # Attempt 1 is the call above; tenacity counts it, so `policy.attempts` stays the total.
        if first_failure:
            raise first_failure.pop()
        return func()

    # Imported only now: every command would otherwise pay tenacity's import at start-up for a rare
    # failure.
    from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

    retrying = Retrying(
        retry=retry_if_exception(is_cloud_sync_error),
        stop=stop_after_attempt(policy.attempts),
        wait=wait_exponential(multiplier=policy.first_wait, exp_base=2, max=policy.max_wait),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        return retrying(attempt)
    except OSError as exc:
        if not is_cloud_sync_error(exc):
            raise
        IO_STATS.give_ups += 1
        raise ReadFailed(
            errno.EIO,
            f"{what}: I/O error (errno 5) on every one of {policy.attempts} attempts. {CLOUD_SYNC_HINT}; "
            "then run the command again",
        ) from exc
