"""The MCP server: riffd's tools registered on the official SDK's FastMCP (`mcp` 1.x, the extra
`riffd[mcp]`), served on stdio.

Each tool is a thin call into riffd (riffd.mcp_server.lookup, conversation, health, restore) whose
`ToolProblem` becomes an MCP tool error of one sentence; the server goes on serving. Those modules
are imported at a tool's first call (the typed results they return are in `results`), so the server
answers `initialize` without loading them. The protocol
owns the real standard output: before serving, file descriptor 1 is pointed at standard error, so
nothing riffd or a library prints can ever corrupt a message.
"""

from __future__ import annotations

import functools
import io
import os
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.types import ToolAnnotations

from riffd import __version__
from riffd.commands.output import INTERRUPTED, ctrl_c_or_ignored
from riffd.mcp_server.memory import Memory, ToolProblem
from riffd.mcp_server.results import (
    Health,
    Page,
    RestoreResult,
    SearchResult,
    SessionSummary,
)

if TYPE_CHECKING:
    from riffd.mcp_server.conversation import Conversations

Result = TypeVar("Result")

INSTRUCTIONS = (
    "riffd keeps every Claude Code conversation of this machine in its archive, also the sessions "
    "Claude Code has deleted (after 30 days by default). Use these tools to recall what was said or "
    "decided in earlier sessions (search, then read_session), to see which sessions exist "
    "(list_sessions), to check whether a session will resume cleanly (session_health), and to put a "
    "deleted session back so `claude --resume` can continue it (restore_session). A SESSION argument "
    "is a full session id, a unique prefix of one (any length), or `latest` (the newest "
    "session of this project)."
)
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
RESTORES = ToolAnnotations(
    readOnlyHint=False, destructiveHint=False, idempotentHint=True, openWorldHint=False
)


def answered(memory: Memory, tool: Callable[..., Result]) -> Callable[..., Result]:
    """`tool`, with riffd's failures as MCP tool errors of one sentence (an archive error also
    closes the archive, so the next call opens it again)."""

    @functools.wraps(tool)
    def call(*args: Any, **kwargs: Any) -> Result:
        try:
            return tool(*args, **kwargs)
        except ToolProblem as exc:
            raise ToolError(str(exc)) from None
        except sqlite3.Error as exc:
            memory.forget_archive()
            raise ToolError(f"The archive could not be read ({exc}); try again.") from None
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise ToolError(f"{where}{exc.strerror or exc}; try again.") from None

    return call


class Recall:
    """What the tools share: `memory`, and the texts of the sessions read lately (`Conversations`,
    made at the first read). The tools' modules are imported at their first call, so the server
    answers `initialize` without loading them."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self._conversations: Conversations | None = None

    def conversations(self) -> Conversations:
        """The session texts kept for the next page, and the folder deleted ones are read from."""
        if self._conversations is None:
            from riffd.mcp_server.conversation import Conversations

            self._conversations = Conversations(self.memory)
        return self._conversations

    def close(self) -> None:
        """Close the archive and remove the folder of deleted sessions' transcripts."""
        if self._conversations is not None:
            self._conversations.close()
        self.memory.close()


def build_server(recall: Recall) -> FastMCP:
    """The FastMCP server with riffd's five tools over `recall`."""
    memory = recall.memory
    server = FastMCP("riffd", instructions=INSTRUCTIONS, log_level="WARNING")
    # The version `initialize` names: FastMCP takes none and would name the SDK's own
    server._mcp_server.version = __version__

    @server.tool(annotations=READ_ONLY)
    @functools.partial(answered, memory)
    def search(
        query: str,
        project: str | None = None,
        session: str | None = None,
        since: str | None = None,
        limit: int = 10,
    ) -> list[SearchResult]:
        """Search every conversation riffd has archived, deleted sessions included, for messages
        holding all the words of `query`. Use it to recall what was said, decided or tried in an
        earlier session. Filters: `project` (the sessions whose project path starts with it as text:
        give a whole path, and mind that /a/app also keeps /a/app2),
        `session` (an id, a unique prefix, or `latest`), `since` (a date, YYYY-MM-DD). Returns up
        to `limit` hits, newest first: session id, project, title, local time, role, a short
        snippet, the transcript path and line, whether the transcript still exists, and `go_back`,
        the shell command that resumes the session (with `riffd archive restore` first when it was
        deleted). Read more of a hit with read_session."""
        from riffd.mcp_server import lookup

        return lookup.search(memory, query, project, session, since, limit)

    @server.tool(annotations=READ_ONLY)
    @functools.partial(answered, memory)
    def list_sessions(
        project: str | None = None, deleted: bool = False, limit: int = 20
    ) -> list[SessionSummary]:
        """List Claude Code sessions, newest first: id, title, project, last activity, size,
        health (riffd's findings), whether the archive holds it, whether it was deleted, and the
        command that resumes it. By default the sessions on disk; with `deleted` true, those Claude
        Code deleted that riffd's archive still holds (restore_session brings one back). `project`
        keeps one project's sessions (its path)."""
        from riffd.mcp_server import lookup

        return lookup.list_sessions(memory, project, deleted, limit)

    @server.tool(annotations=READ_ONLY)
    @functools.partial(answered, memory)
    def read_session(session: str, start: int = 0, max_chars: int = 20000) -> Page:
        """Read a session's conversation as Claude Code would load it on resume: the active chain
        (compaction summaries marked, sidechains named), as text in which each record is headed by
        its line number in the transcript. Works for deleted sessions too, from the archive. The
        text comes in pages of at most `max_chars` characters from character `start`; when
        `next_start` is not null, call again with start=next_start for the next page."""
        return recall.conversations().page(session, start, max_chars)

    @server.tool(annotations=READ_ONLY)
    @functools.partial(answered, memory)
    def session_health(session: str) -> Health:
        """Check a session the way `riffd scan` does: each finding (e.g. a duplicate or missing
        tool_result) with its lines, the API error it would cause when the session is resumed,
        whether riffd repairs it and when, and `repair_now`, the command that repairs it now. Use it
        when a session fails to resume or before resuming an old one."""
        from riffd.mcp_server import health

        return health.session_health(memory, recall.conversations(), session)

    @server.tool(annotations=RESTORES)
    @functools.partial(answered, memory)
    def restore_session(session: str) -> RestoreResult:
        """Put a deleted session back where `claude --resume <id>` finds it, byte for byte from
        riffd's archive: its transcripts and every file of it the archive holds. It only writes what
        is missing: a file that exists is never overwritten, so calling it again is harmless. A
        session a running Claude Code process has open is refused. Returns the files written,
        whether the whole session is there now, notes, and the command that resumes it."""
        from riffd.mcp_server import restore

        return restore.restore_session(memory, session)

    return server


def serve(memory: Memory) -> None:
    """Serve riffd's tools on stdio until the client closes it."""
    protocol = os.fdopen(os.dup(1), "wb")  # the protocol's own standard output
    os.dup2(2, 1)  # a stray print (riffd's, a library's, a child's) goes to stderr
    recall = Recall(memory)
    server = build_server(recall)

    async def run() -> None:
        stdout = anyio.wrap_file(io.TextIOWrapper(protocol, encoding="utf-8"))
        async with stdio_server(stdout=stdout) as (read_stream, write_stream):
            await server._mcp_server.run(
                read_stream, write_stream, server._mcp_server.create_initialization_options()
            )

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, ctrl_c_or_ignored(_interrupted))
    try:
        anyio.run(run)
    finally:
        recall.close()
        print(f"riffd {__version__}: MCP server stopped", file=sys.stderr)


def _interrupted(_signum: int, _frame: object) -> None:
    """Ctrl-C: stop now. The server waits for its client in a thread's read of standard input,
    which only the end of that input interrupts (a KeyboardInterrupt waited for it); what riffd
    writes (a restore) is safe against a stop at any instant, as against kill -9."""
    os.write(2, f"{INTERRUPTED}\n".encode())
    os._exit(130)
