"""`session_health`: a session's findings (riffd.transcript.scan, as `riffd scan` gives them), the
API error each would cause on resume, whether riffd repairs it, when, and the command that repairs
it now. A deleted session is judged on the copy the archive would restore."""

from __future__ import annotations

from pathlib import Path

from riffd.claude_code.liveness import claude_dirs_for, session_liveness
from riffd.config import Config
from riffd.daemon.lock import running_pid
from riffd.display import shell_command
from riffd.mcp_server.conversation import Conversations
from riffd.mcp_server.memory import Memory, ToolProblem
from riffd.mcp_server.results import FindingReport, Health
from riffd.transcript.findings import INFORMATIONAL, REPAIRABLE, api_error_for
from riffd.transcript.scan import scan_file


def session_health(memory: Memory, conversations: Conversations, session: str) -> Health:
    """Scan the session `session` names and say what is wrong and what riffd does about it."""
    ref = memory.find(session)
    path = conversations.transcript(ref)
    config = memory.config
    live, why = (
        session_liveness(
            path,
            claude_dirs_for(path, config.claude_dir, config.roots),
            config.repair.quiet_period,
            session_id=ref.session_id,
        )
        if ref.path is not None
        else (False, "")
    )
    report = scan_file(
        path,
        backup_dir=str(config.backups.dir),
        is_live=lambda _p, _s: live,
        riffd=memory.riffd,
    )
    if report.error is not None:
        raise ToolProblem(f"Session {ref.session_id} cannot be checked: {report.error}.")
    daemon = running_pid(config.state_dir) is not None
    repairs = config.repair.mode == "repair" and not report.not_a_transcript
    idle = f"idle for {config.repair.quiet_period:g} s"
    findings = []
    for finding in report.findings:
        fixed = repairs and finding.cls in REPAIRABLE and finding.cls in config.repair.classes
        when = (
            "never: it describes how the session went, not damage"
            if finding.cls in INFORMATIONAL
            else "never: riffd reports it and leaves the lines as they are"
            if not fixed
            else "once restore_session has put it back: then by `riffd fix` or the daemon"
            if ref.path is None
            else f"by the running daemon, once the session has been {idle}"
            if daemon
            else f"when `riffd fix` runs while the session is {idle} (no daemon runs)"
        )
        findings.append(
            FindingReport(
                str(finding.cls),
                list(finding.lines),
                finding.message,
                finding.api_error or api_error_for(finding.cls, finding.tool_id),
                fixed,
                when,
            )
        )
    notes = list(report.suggestions)
    if ref.path is None:
        notes.insert(
            0,
            "The transcript was deleted; this is the archive's copy, as restore_session puts it back.",
        )
    if live:
        notes.insert(0, f"The session is live ({why}): riffd repairs it only once it is idle.")
    needs = any(item.riffd_repairs for item in findings) and ref.path is not None
    # (riffd as Claude Code runs the server, on the same state: Memory.riffd)
    repair_now = f"{memory.riffd} {shell_command('fix', str(ref.path))}" if needs else None
    if needs and live:
        repair_now = _repair_now_while_live(path, config, ref.session_id, notes, memory.riffd)
    return Health(
        ref.session_id,
        str(ref.path or ref.archived_path or path),
        not any(item.finding not in INFORMATIONAL for item in findings),
        findings,
        repair_now,
        notes,
    )


def _repair_now_while_live(
    path: Path, config: Config, session_id: str, notes: list[str], riffd: str
) -> str | None:
    """What repairs a live session's transcript now, as `riffd fix` says it: nothing while a
    Claude Code process has it open; `riffd fix --quiet-period 0` when only the quiet period holds
    it (with a note: only if the session is closed)."""
    held, _ = session_liveness(
        path, claude_dirs_for(path, config.claude_dir, config.roots), 0, session_id=session_id
    )
    if held:
        return None
    notes.append(
        "Only the quiet period holds it: repair_now repairs it now, but run it only if you are "
        "sure the session is closed (not the one you are in)."
    )
    return f"{riffd} {shell_command('fix', '--quiet-period', '0', str(path))}"
