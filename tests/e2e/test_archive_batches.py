"""A real `riffd run` holds appended lines for the archive a few seconds (archive.write_delay), and
never loses them: a stop writes them, and after a kill -9 the next start archives them from the
file. The delay is its longest here (60 s), so the lines surely wait when the daemon stops."""

from __future__ import annotations

import pytest

from helpers import damage
from helpers.daemon import Sandbox, append_like_claude, lines_committed
from riffd.archive.store import Archive

LINES = damage.generated_session(segments=2, turns=3, parallel=2)


def archived_to(sandbox: Sandbox, path) -> int:
    """The byte of `path` the archive has it up to (0: not at all)."""
    archive = Archive(sandbox.state / "archive.db", read_only=True)
    try:
        return archive.cursor(str(path))[1]
    finally:
        archive.close()


def archived(sandbox: Sandbox, path) -> bytes:
    archive = Archive(sandbox.state / "archive.db", read_only=True)
    try:
        ((file_id, _path, _session),) = archive.files_of(str(path))
        return b"".join(archive.iter_file(file_id))
    finally:
        archive.close()


def started_with_waiting_lines(sandbox: Sandbox):
    """A daemon that read a session and holds its last appends for the archive."""
    sandbox.write_config(archive__write_delay=60.0, repair__mode="report-only")
    path = sandbox.project / "5e55104e-0000-4000-8000-00000000c0de.jsonl"
    daemon = sandbox.start()
    store = sandbox.open_store()
    append_like_claude(path, LINES[:4], pause=0)
    daemon.wait_until(lambda: lines_committed(store, path) == 4, "the first lines read")
    first = daemon.wait_until(lambda: archived_to(sandbox, path), "the first read archived")
    append_like_claude(path, LINES[4:])
    daemon.wait_until(lambda: lines_committed(store, path) == len(LINES), "every append read")
    assert archived_to(sandbox, path) == first < path.stat().st_size  # the appends wait
    return daemon, path


@pytest.mark.slow
def test_a_stop_writes_the_lines_waiting_for_the_archive(sandbox: Sandbox) -> None:
    daemon, path = started_with_waiting_lines(sandbox)
    daemon.stop()
    assert archived(sandbox, path) == path.read_bytes() == b"".join(LINES)


@pytest.mark.slow
def test_lines_waiting_when_the_daemon_is_killed_are_archived_at_its_next_start(
    sandbox: Sandbox,
) -> None:
    daemon, path = started_with_waiting_lines(sandbox)
    daemon.kill()
    assert archived_to(sandbox, path) < path.stat().st_size
    daemon = sandbox.start()  # the file is unchanged: no event, no append brings it back
    daemon.wait_until(
        lambda: archived_to(sandbox, path) == path.stat().st_size, "the archive caught up"
    )
    daemon.stop()
    assert archived(sandbox, path) == b"".join(LINES)
    assert "archived" in daemon.stderr() and "the archive had missed" in daemon.stderr()
