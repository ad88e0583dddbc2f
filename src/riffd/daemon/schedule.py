"""The daemon's scheduler: each job runs every so many seconds in the scheduler's threads, one run
of a job at a time, runs missed while the machine slept made up once. A job that fails is logged and
kept among the live errors until it runs well again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import NamedTuple

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.schedulers.background import BackgroundScheduler

from riffd.daemon.counters import Counters
from riffd.daemon.disk_full import DiskWatch

log = logging.getLogger("riffd.daemon.runner")  # the daemon's own lines


class Job(NamedTuple):
    """A job: its name, what it runs, and every how many seconds."""

    name: str
    run: Callable[[], object]
    seconds: float


class Schedule:
    """Runs the daemon's jobs; a failure goes to `stats` (and a full disk to `room`)."""

    def __init__(self, counters: Counters, disk: DiskWatch) -> None:
        self.counters = counters
        self.disk = disk
        self._scheduler = BackgroundScheduler(
            timezone="UTC",
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": 3600},
        )
        self._scheduler.add_listener(self._failed, EVENT_JOB_ERROR)
        self._scheduler.add_listener(self._done, EVENT_JOB_EXECUTED)
        self._planned: set[str] = set()

    @property
    def running(self) -> bool:
        """Whether the scheduler runs."""
        return bool(self._scheduler.running)

    def start(self, jobs: list[Job]) -> None:
        """Plan `jobs` and start running them."""
        self.plan(jobs)
        self._scheduler.start()

    def plan(self, jobs: list[Job]) -> None:
        """Run `jobs` from now on: those planned before and not listed now stop; a job whose
        interval is unchanged keeps its next run (a reload, an editor saving the config, must not
        put it off again)."""
        scheduler = self._scheduler
        for name in self._planned - {job.name for job in jobs}:
            if scheduler.get_job(name) is not None:
                scheduler.remove_job(name)
        for job in jobs:
            planned = scheduler.get_job(job.name)
            if planned is not None and getattr(planned.trigger, "interval", None) == timedelta(
                seconds=job.seconds
            ):
                continue
            scheduler.add_job(
                job.run, "interval", seconds=job.seconds, id=job.name, replace_existing=True
            )
        self._planned = {job.name for job in jobs}

    def run_now(self, name: str, run: Callable[[], object]) -> None:
        """Run `run` once, now, in a scheduler thread (after the run of the same name going on)."""
        if self.running:
            self._scheduler.add_job(run, id=name, replace_existing=True)

    def stop(self) -> None:
        """Stop, after the runs going on."""
        if self.running:
            self._scheduler.shutdown(wait=True)

    def _failed(self, event: JobExecutionEvent) -> None:
        log.error("scheduled job %s failed: %s", event.job_id, event.exception)
        self.disk.ran_out(event.exception)
        self.counters.error(
            f"scheduled job {event.job_id} failed: {event.exception}",
            self.disk.advice(event.exception, "it runs again at its next time"),
            about=f"job {event.job_id}",
        )

    def _done(self, event: JobExecutionEvent) -> None:
        self.counters.resolved(f"job {event.job_id}")  # it failed before, and has run well since
