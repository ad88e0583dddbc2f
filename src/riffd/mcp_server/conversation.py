"""`read_session`: the conversation Claude Code would load when it resumes a session, as readable
text with line numbers, in pages.

The text is the active chain (riffd.commands.export: the loaded lines in file order, compaction
summaries marked, a compact boundary said), each record headed by its line number in the
transcript, after a head naming the session and its sidechains. A deleted session is read from the
archive: its transcripts are written, as the archive gives them, to a private folder of the server's
own, and read from there like any other. One session's text is kept for the next page; a page is a
slice of it, so the pages join to the whole text.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path

from riffd.commands.export import (
    conversation_lines,
    index_of,
    iter_records,
    render_markdown_record,
    sidechains_of,
)
from riffd.mcp_server.memory import Memory, SessionRef, ToolProblem
from riffd.mcp_server.results import Page
from riffd.transcript.reader import Unparsed
from riffd.transcript.sessions import describe_file

KEPT_TEXTS = 2  # sessions whose text is kept for the next page (memory stays flat across calls)
MAX_PAGE = 200_000
# the temporary folder of one server: riffd-mcp-<pid>-<random>
TEMP_PREFIX = "riffd-mcp-"


class Conversations:
    """The texts of the sessions read lately, and the folder deleted ones are written to."""

    def __init__(self, memory: Memory) -> None:
        self._memory = memory
        self._texts: OrderedDict[tuple[str, int, int, int], str] = OrderedDict()
        self._folder: Path | None = None
        self._written: tuple[str, int] | None = None  # (session, archived bytes) in the folder

    def close(self) -> None:
        """Remove the folder of deleted sessions' transcripts."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def page(self, session: str, start: int = 0, max_chars: int = 20_000) -> Page:
        """The page of `session`'s text that starts at character `start`."""
        if not 1 <= max_chars <= MAX_PAGE:
            raise ToolProblem(f"max_chars must be between 1 and {MAX_PAGE}, not {max_chars}.")
        if start < 0:
            raise ToolProblem(f"start must be 0 or more, not {start}.")
        ref = self._memory.find(session)
        path = self.transcript(ref)
        text = self.text(ref.session_id, path, from_archive=ref.deleted)
        if start > len(text):
            raise ToolProblem(
                f"start {start} is past the end of session {ref.session_id}'s text "
                f"({len(text)} characters)."
            )
        end = min(len(text), start + max_chars)
        if end < len(text):  # end the page at a line's end when one is in its second half
            cut = text.rfind("\n", start + max_chars // 2, end)
            end = cut + 1 if cut >= 0 else end
        return Page(
            ref.session_id,
            start,
            text[start:end],
            end if end < len(text) else None,
            len(text),
            ref.deleted,
        )

    def transcript(self, ref: SessionRef) -> Path:
        """The session's main transcript: on disk, else written from the archive with its
        subagents' transcripts beside it (as `<id>/subagents/...`)."""
        if ref.path is not None:
            return ref.path
        archive = self._memory.archive()
        files = archive.files_of(ref.session_id)
        if not files:
            raise ToolProblem(f"The archive holds no transcript of session {ref.session_id}.")
        signature = (ref.session_id, sum(archive.cursor(path)[1] for _id, path, _s in files))
        if self._folder is None:
            sweep_folders_of_dead_servers()
            # 0700: conversations
            self._folder = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-"))
        main = self._folder / "session" / f"{ref.session_id}.jsonl"
        if self._written == signature and main.exists():
            return main
        shutil.rmtree(main.parent, ignore_errors=True)  # the session read before
        main.parent.mkdir()
        for file_id, path, _session in files:
            parts = Path(path).parts
            if "subagents" in parts:
                target = main.parent / ref.session_id / "subagents" / Path(path).name
            elif Path(path).name.startswith("agent-"):
                target = main.parent / Path(path).name
            else:
                target = main
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                for line in archive.iter_file(file_id):
                    out.write(line)
        self._written = signature
        return main

    def text(self, session_id: str, path: Path, *, from_archive: bool) -> str:
        """The readable text of the conversation in `path` (kept for the next page)."""
        try:
            status = path.stat()
        except OSError as exc:
            raise ToolProblem(f"{path} cannot be read ({exc.strerror or exc}).") from exc
        key = (str(path), status.st_size, status.st_mtime_ns, status.st_ino)
        if key in self._texts:
            self._texts.move_to_end(key)
            return self._texts[key]
        text = render(session_id, path, from_archive=from_archive)
        self._texts[key] = text
        while len(self._texts) > KEPT_TEXTS:
            self._texts.popitem(last=False)
        return text


def render(session_id: str, path: Path, *, from_archive: bool) -> str:
    """The conversation Claude Code would load from `path`, as text: a head naming the session and
    its sidechains, then each loaded record headed by its line number."""
    try:
        index = index_of(path)
        info = describe_file(path)
        loaded = conversation_lines(index)
        sidechains = sidechains_of(path, index)
        parts = [
            f"Session {session_id}"
            + (f": {info.title}" if info.title else "")
            + (f"\nProject: {info.project}" if info.project else "")
            + f"\n{len(loaded)} of the transcript's {len(index)} lines are in the conversation "
            "Claude Code loads on resume"
            + (" (read from riffd's archive: the transcript was deleted)" if from_archive else "")
            + "."
        ]
        if sidechains:
            parts.append(
                "Sidechains (subagents), not in the text below:\n"
                + "\n".join(
                    f"- agent {agent}: "
                    + (f"{len(lines)} inline line(s)" if file is None else f"file {file.name}")
                    for agent, file, lines in sidechains
                )
            )
        for line, _raw, record in iter_records(path, index, loaded):
            if isinstance(record, dict):
                shown = render_markdown_record(record)
                if shown:
                    parts.append(f"[line {line + 1}] {shown.rstrip()}")
            elif isinstance(record, Unparsed):
                parts.append(
                    f"[line {line + 1}] (not JSON: {record.reason}; Claude Code skips this line)"
                )
    except OSError as exc:
        raise ToolProblem(f"{path} cannot be read ({exc.strerror or exc}).") from exc
    return "\n\n".join(parts) + "\n"


def sweep_folders_of_dead_servers() -> None:
    """Remove the temporary folders (conversations read from the archive) of servers of this user
    that were killed before they could remove their own: `riffd-mcp-<pid>-*` whose process is gone."""
    top = Path(tempfile.gettempdir())
    try:
        names = [name for name in os.listdir(top) if name.startswith(TEMP_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(TEMP_PREFIX) :].split("-", 1)[0]
        folder = top / name
        try:
            if not pid.isdigit() or folder.lstat().st_uid != os.getuid() or not folder.is_dir():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue
