"""`restore_session`: a deleted session put back where `claude --resume <id>` finds it, by the code
of `riffd archive restore` (riffd.commands.archive_restore: the whole session, byte for byte, files
kept whole first and the transcripts last, checked as written), never with `--force`: a file that
is there is never overwritten. A session a running Claude Code process has registered is refused.

What `riffd archive restore` says is what this returns (riffd.commands.archive_restore.RestoreRun):
the files it wrote, and its notes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from riffd.archive.packs import PackDamaged
from riffd.claude_code.liveness import claude_dirs_for, running_entries, same_session
from riffd.commands.archive_restore import restore_session_files
from riffd.commands.output import EXIT_ERROR
from riffd.mcp_server.memory import Memory, ToolProblem, archive_problem, resume_command
from riffd.mcp_server.results import RestoreResult


def restore_session(memory: Memory, session: str) -> RestoreResult:
    """Put back what is missing of the session `session` names, from the archive; raise
    ToolProblem when it is live, not archived, or a file failed."""
    ref = memory.find(session)
    if not ref.archived:
        raise ToolProblem(
            f"The archive holds no transcript of session {ref.session_id}, so there is nothing to "
            "restore."
        )
    config = memory.config
    archive = memory.archive()
    try:
        files = archive.files_of(ref.session_id)
        project = next(
            (
                item["project"]
                for item in archive.sessions()
                if item["session_id"] == ref.session_id and item["project"]
            ),
            None,
        )
    except (sqlite3.Error, PackDamaged) as exc:
        memory.forget_archive()
        raise archive_problem(memory.archive_path, exc, memory.riffd) from exc
    folders = {config.claude_dir}
    for _id, path, _session in files:
        folders.update(claude_dirs_for(Path(path), config.claude_dir, config.roots))
    for folder in folders:
        try:
            entries = running_entries(folder)
        except OSError as exc:  # (a session may then be running unseen)
            raise ToolProblem(
                f"Claude Code's session registry {folder / 'sessions'} cannot be read ({exc}); "
                "restore the session once it can."
            ) from exc
        for entry in entries:
            if entry.registration is None:  # (it may be this session's: fail closed)
                raise ToolProblem(
                    f"{entry.registry_file} names the running pid {entry.pid} but is "
                    f"{entry.trouble}, so session {ref.session_id} may be live; restore it once "
                    "that process has ended, or delete the entry if no Claude Code process uses it."
                )
            if same_session(entry.registration.session_id, [ref.session_id]):
                raise ToolProblem(
                    f"Session {ref.session_id} is live (a running Claude Code process has it, per "
                    f"{entry.registry_file}); restore it once that process has ended."
                )
    try:
        run = restore_session_files(archive, ref.session_id, config)
    except (sqlite3.Error, PackDamaged) as exc:
        memory.forget_archive()
        raise archive_problem(memory.archive_path, exc, memory.riffd) from exc
    errors = run.errors()
    if run.exit_code == EXIT_ERROR:
        raise ToolProblem(
            f"Session {ref.session_id} was not restored whole: "
            + (errors[0] if errors else run.summary or "riffd archive restore failed")
            + (
                f" (and {len(errors) - 1} more error(s); run `riffd archive restore "
                f"{ref.session_id}` to see them)"
                if len(errors) > 1
                else ""
            )
        )
    return RestoreResult(
        ref.session_id,
        [str(target) for _path, target in run.written],
        run.exit_code == 0,
        run.summary,
        [text for kind, text in run.said if kind != "restored" and text != run.summary],
        resume_command(
            ref.session_id, project, True, ref.path or ref.archived_path, riffd=memory.riffd
        ),
    )
