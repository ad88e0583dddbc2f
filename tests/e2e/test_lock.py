"""One daemon per state folder, also when the state folder is deleted under a running daemon: its
lock file taken again, a second daemon refused, `status` true, and the daemon started again in place
on a fresh folder."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from conftest import requires_corpus
from riffd.daemon.lock import EXIT_RESTART, AlreadyRunning, StateLock, running_pid
from riffd.transcript.scan import scan_file


def test_a_lock_whose_folder_is_deleted_is_taken_again_and_never_given_to_a_second_holder(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    lost = threading.Event()
    lock = StateLock(state)
    lock.acquire(on_lost=lost.set)
    try:
        shutil.rmtree(state)
        assert running_pid(state) is not None  # the moment after: found all the same (its socket)
        with pytest.raises(AlreadyRunning):
            StateLock(state).acquire()
        assert lost.wait(5), "the deletion was not noticed"
        assert lock.retaken and "was deleted" in lock.lost
        assert (state / "riffd.lock").read_text().strip() == str(os.getpid())
        with pytest.raises(AlreadyRunning):
            StateLock(state).acquire()
    finally:
        code = lock.finish()
    assert code == EXIT_RESTART  # handed over for the restart in place: not released
    lock.release()
    assert running_pid(state) is None


@requires_corpus
@pytest.mark.slow
def test_a_daemon_whose_state_folder_is_deleted_refuses_a_second_and_starts_again_in_place(
    tmp_path: Path,
) -> None:
    from helpers.daemon import (
        NotifyListener,
        Sandbox,
        append_like_claude,
        resumed_duplicate,
        session_id_of,
    )
    from helpers.run import run_riffd

    box = Sandbox(tmp_path)
    box.project.mkdir(parents=True)
    (box.claude / "sessions").mkdir()
    box.write_config()
    try:
        daemon = box.start()
        shutil.rmtree(box.state)
        status = box.riffd("status")
        assert status.returncode != 3 and f"pid {daemon.pid}" in status.stdout, (
            status.stdout,
            status.stderr,
        )
        notify = NotifyListener(tmp_path / "notify-second.sock")
        try:
            second = run_riffd(
                "run",
                config=box.config,
                env={"NOTIFY_SOCKET": str(notify.path)},
                cwd=tmp_path,
                timeout=30,
            )
        finally:
            notify.close()
        assert second.returncode == 2 and f"pid {daemon.pid}" in second.stderr, second.stderr
        assert notify.find("READY") is None
        # The first noticed, and started again in place: the same process, ready a second time, on a
        # new folder.
        daemon.wait_notified("READY", after=daemon.ready_at)
        assert daemon.process.poll() is None
        assert "was deleted while this daemon held it" in daemon.stderr()
        assert (box.state / "riffd.lock").read_text().strip() == str(daemon.pid)
        status = daemon.wait_until(
            lambda: (
                lambda done: (
                    done if done.returncode in (0, 1) and "running" in done.stdout else None
                )
            )(box.riffd("status")),
            "status to say running",
        )
        assert f"pid {daemon.pid}" in status.stdout
        damaged = resumed_duplicate()  # and it works: a damaged session is repaired
        path = box.project / f"{session_id_of(damaged.lines)}.jsonl"
        append_like_claude(path, damaged.lines, pause=0)
        daemon.wait_until(lambda: scan_file(path).findings == [], "the repair after the restart")
        started = time.monotonic()
        daemon.stop()
        assert time.monotonic() - started < 10
    finally:
        box.close()
