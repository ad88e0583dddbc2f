"""`riffd export`: each session's active conversation, with its sidechains, as one readable file.

Streaming: a session is indexed (small per-line metadata, as a scan does), then its loaded lines are
read one at a time by offset and written out, so a 100 MB session exports in bounded memory. A line
that does not parse is reported with its number and skipped in the output; it never stops the
export. Each session is written to a temporary name and renamed when finished, and a manifest in the
target folder (`.riffd-export.json`) records what was exported from which source (size, mtime,
inode): a rerun skips sessions already done from the same source and resumes with the next.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

import orjson

from riffd.archive.schema import ARCHIVE_NAME
from riffd.commands.arguments import transcript_targets
from riffd.commands.config_loading import config_for_folders
from riffd.commands.output import EXIT_ERROR, EXIT_OK, riffd_advice
from riffd.display import display_path, key_path, path_key
from riffd.fsio import REAL_FS, create_private, ensure_private_folder, retrying_call
from riffd.transcript.detect import loaded_conversation
from riffd.transcript.index import SIDECHAIN, TranscriptIndex
from riffd.transcript.reader import iter_fd, parse_line
from riffd.transcript.scan import index_file

log = logging.getLogger(__name__)

MANIFEST = ".riffd-export.json"
FORMATS = ("md", "jsonl")


@dataclass
class ExportResult:
    """What exporting one session did."""

    source: str
    target: str | None
    status: str  # exported / skipped (unchanged since the last export) / failed
    lines: int = 0
    bad_lines: list[int] = field(default_factory=list)
    detail: str = ""


def conversation_lines(index: TranscriptIndex) -> list[int]:
    """Return the line indexes of the active conversation in reading order: the loaded lines (chain
    from root to newest message across compactions, with their siblings and results), in file
    order."""
    loaded = loaded_conversation(index)
    return [line for line, segment in enumerate(loaded.segment) if segment >= 0]


def iter_records(
    path: Path, index: TranscriptIndex, lines: Iterable[int]
) -> Iterator[tuple[int, bytes, Any]]:
    """Yield (line index, raw bytes, parsed record or an Unparsed/None) for `lines`, reading each by
    offset through one open descriptor (positional reads, EIO retried)."""
    fd = retrying_call(partial(REAL_FS.open, path, os.O_RDONLY), what=f"{path} (open)")
    try:
        for line in lines:
            offset, length = index.span(line)
            raw = b"".join(iter_fd(fd, what=str(path), start=offset, end=offset + length))
            yield line, raw, parse_line(raw.rstrip(b"\n"))
    finally:
        os.close(fd)


def index_of(path: Path) -> TranscriptIndex:
    """Index every line of `path` (bounded memory: metadata only) and analyse it, as a scan does."""
    return index_file(path).index


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _text_of(part.get("text", "")) if isinstance(part, dict) else str(part)
            for part in content
        )
    return "" if content is None else str(content)


def _fence(text: str, language: str = "") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{language}\n{text}\n{fence}"


def render_markdown_record(record: dict[str, Any]) -> str:
    """Return one transcript record as Markdown (empty for records that carry no conversation
    content)."""
    message = record.get("message")
    if not isinstance(message, dict):
        if record.get("type") == "system" and record.get("subtype") == "compact_boundary":
            return "---\n*The conversation was compacted here.*\n"
        return ""
    role = "User" if record.get("type") == "user" else "Assistant"
    stamp = record.get("timestamp", "")
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                parts.append(str(block.get("text", "")))
            elif kind == "thinking":
                parts.append(
                    f"<details><summary>thinking</summary>\n\n{block.get('thinking', '')}\n\n</details>"
                )
            elif kind == "tool_use":
                body = orjson.dumps(block.get("input"), option=orjson.OPT_INDENT_2).decode()
                parts.append(
                    f"**Tool call: {block.get('name')}** (`{block.get('id')}`)\n\n{_fence(body, 'json')}"
                )
            elif kind == "tool_result":
                error = " (error)" if block.get("is_error") is True else ""
                parts.append(
                    f"**Tool result{error}** (`{block.get('tool_use_id')}`)\n\n"
                    f"{_fence(_text_of(block.get('content')))}"
                )
    if not parts:
        return ""
    if record.get("isCompactSummary") is True:
        role = "Summary of the conversation so far"
    return f"### {role} {stamp}\n\n" + "\n\n".join(parts) + "\n"


@dataclass
class Exporter:
    """Exports sessions to a folder in one format, resuming from the folder's manifest."""

    target: Path
    format: str = "md"
    sidechains: (
        Callable[[Path, TranscriptIndex], list[tuple[str, Path | None, list[int]]]] | None
    ) = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(
                f"unknown export format {self.format!r}; expected one of {', '.join(FORMATS)}"
            )
        # 0700 whatever the umask: exports hold conversations
        ensure_private_folder(REAL_FS, self.target)
        self._manifest = self._load_manifest()

    def _load_manifest(self) -> dict[str, Any]:
        try:
            value = orjson.loads((self.target / MANIFEST).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return {}
        return value if isinstance(value, dict) else {}

    def _save_manifest(self) -> None:
        temp = self.target / f"{MANIFEST}.tmp"
        with create_private(temp) as out:
            out.write(orjson.dumps(self._manifest, option=orjson.OPT_INDENT_2))
        os.replace(temp, self.target / MANIFEST)

    def export(self, source: Path) -> ExportResult:
        """Export one session (skipped when the manifest shows it was exported from the same
        bytes)."""
        try:
            status = source.stat()
        except OSError as exc:
            return ExportResult(
                str(source), None, "failed", detail=f"{source}: {exc.strerror or exc}"
            )
        stamp = [status.st_size, status.st_mtime_ns, status.st_ino]
        key = str(source.resolve())
        done = self._manifest.get(path_key(key))  # names kept as riffd.display.path_key writes them
        if isinstance(done, dict) and isinstance(done.get("file"), str):
            done = done | {"file": key_path(done["file"])}
        if done is not None and not (
            isinstance(done, dict) and self._is_plain_name(done.get("file"))
        ):
            log.warning(
                "%s: the entry for %s names %r, not a file of this folder; ignored",
                self.target / MANIFEST,
                key,
                done.get("file") if isinstance(done, dict) else done,
            )
            done = None
        name = f"{source.stem}.{self.format}"
        if done and done.get("stamp") == stamp and (self.target / done["file"]).exists():
            return ExportResult(
                key, str(self.target / done["file"]), "skipped", detail="unchanged since exported"
            )
        if done:
            name = done["file"]
        elif (self.target / name).exists():
            name = f"{source.parent.name}--{source.stem}.{self.format}"  # two projects, one session name
        try:
            result = self._write(source, self.target / name)
        except OSError as exc:
            # the file that failed: the transcript read, or the folder or file written
            where = exc.filename if exc.filename is not None else source
            return ExportResult(
                key, None, "failed", detail=f"{where}: {exc.strerror or exc} (exporting {source})"
            )
        self._manifest[path_key(key)] = {
            "file": path_key(name),
            "stamp": stamp,
            "lines": result.lines,
            "bad_lines": result.bad_lines,
        }
        self._save_manifest()
        return result

    def _is_plain_name(self, name: object) -> bool:
        """Whether a manifest entry's file is a name riffd gives: one file right in the target
        folder (never a path that leads out of it, nor the manifest's own name or a temporary
        file's)."""
        if (
            not isinstance(name, str)
            or name in ("", ".", "..", MANIFEST)
            or "/" in name
            or os.sep in name
        ):
            return False
        if name.startswith(".") and name.endswith(".tmp"):
            return False
        return "\0" not in name and (self.target / name).parent.resolve() == self.target.resolve()

    def _write(self, source: Path, destination: Path) -> ExportResult:
        # the one check every write passes
        if destination.parent.resolve() != self.target.resolve():
            raise OSError(
                errno.EINVAL,
                f"{destination} is not in {self.target}; riffd writes exports only there",
            )
        index = index_of(source)
        wanted = conversation_lines(index)
        temp = destination.with_name(f".{destination.name}.tmp")
        result = ExportResult(str(source), str(destination), "exported")
        # A line that does not parse has no place in the tree, so it is never in the conversation:
        # name it anyway.
        result.bad_lines = [line + 1 for line in index.malformed]
        for number in result.bad_lines:
            log.warning("%s: line %d does not parse; left out of the export", source, number)
        with create_private(temp) as out:
            if self.format == "md":
                self._write_markdown(out, source, index, wanted, result)
            else:
                self._write_jsonl(out, source, index, wanted, result)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, destination)
        return result

    def _write_markdown(
        self,
        out: IO[bytes],
        source: Path,
        index: TranscriptIndex,
        lines: list[int],
        result: ExportResult,
    ) -> None:
        out.write(
            f"# Session {display_path(index.session_id or source.stem)}\n\nSource: `{display_path(source)}`\n\n".encode()
        )
        if result.bad_lines:
            named = ", ".join(map(str, result.bad_lines))
            out.write(
                f"*Line(s) {named} of the source do not parse and are left out.*\n\n".encode()
            )
        for _line, _raw, record in iter_records(source, index, lines):
            if not isinstance(record, dict):
                continue  # loaded lines parsed when indexed; only a file changed meanwhile gets here
            text = render_markdown_record(record)
            if text:
                out.write(display_path(text).encode() + b"\n")
                result.lines += 1
        for name, agent_file, side_lines in (
            self.sidechains(source, index) if self.sidechains else []
        ):
            out.write(f"\n## Subagent: {display_path(name)}\n\n".encode())
            side_path, side_index = source, index
            if agent_file is not None:
                side_path, side_index = agent_file, index_of(agent_file)
                side_lines = list(range(len(side_index)))
            for _line, _raw, record in iter_records(side_path, side_index, side_lines):
                text = render_markdown_record(record) if isinstance(record, dict) else ""
                if text:
                    out.write(display_path(text).encode() + b"\n")

    def _write_jsonl(
        self,
        out: IO[bytes],
        source: Path,
        index: TranscriptIndex,
        lines: list[int],
        result: ExportResult,
    ) -> None:
        for _line, raw, record in iter_records(source, index, lines):
            if not isinstance(record, dict):
                continue  # loaded lines parsed when indexed; only a file changed meanwhile gets here
            out.write(raw if raw.endswith(b"\n") else raw + b"\n")  # the line's bytes as they are
            result.lines += 1


def register(commands: Any) -> None:
    """Add `riffd export` to the riffd command parser."""
    export = commands.add_parser(
        "export",
        help="write each session's active conversation as one readable file",
        description="Write each session's active conversation (the one Claude Code would resume), with its "
        "sidechains, to --to DIR as Markdown or JSON Lines. Streams; a malformed line is reported and left out; "
        "each session is written when finished, and a rerun skips sessions already exported from the same bytes.",
    )
    export.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="transcripts or folders (default: Claude Code's projects folders)",
    )
    export.add_argument(
        "--to", type=Path, required=True, metavar="DIR", help="the folder to write into"
    )
    export.add_argument("--format", choices=FORMATS, default="md", help="md (default) or jsonl")
    export.set_defaults(run=run_export)


def run_export(args: Any) -> int:
    """`riffd export`: exit 0 when every session was exported or already was, 2 when one failed."""
    import sys

    if args.to.exists() and not args.to.is_dir():
        print(
            f"riffd: error: --to {args.to}: a file is there; --to names the folder to export into "
            "(made when missing)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    config = config_for_folders(args)
    files, errors = transcript_targets(
        args.paths,
        archive_path=config.state_dir / ARCHIVE_NAME,
        riffd=riffd_advice(args),
        roots=config.roots,
    )
    if not files:  # nothing to export: no folder made, no summary of nothing
        for error in errors:
            print(f"riffd: error: {error}", file=sys.stderr)
        if not errors:
            print("riffd: no transcripts to export; nothing written", file=sys.stderr)
        return EXIT_ERROR if errors else EXIT_OK
    exporter = Exporter(args.to, args.format, sidechains=sidechains_of)
    from riffd.transcript.targets import agent_files_of

    # An agent file is exported inside its session, not again on its own.
    included = {
        agent
        for path in files
        if not path.name.startswith("agent-")
        for agent in agent_files_of(path)
    }
    files = [path for path in files if path not in included]
    counts = {"exported": 0, "skipped": 0, "failed": 0}
    for number, path in enumerate(files, 1):
        result = exporter.export(path)
        counts[result.status] += 1
        if result.status == "failed":
            errors.append(result.detail)
        elif result.bad_lines:
            lines = ", ".join(map(str, result.bad_lines[:10]))
            print(
                f"riffd: {path}: line(s) {lines} do not parse; left out of the export",
                file=sys.stderr,
            )
        if sys.stderr.isatty() and len(files) > 1:
            print(f"\rriffd: {number}/{len(files)} sessions", end="", file=sys.stderr)
    for error in errors:
        print(f"riffd: error: {error}", file=sys.stderr)
    print(
        f"riffd: {counts['exported']} exported, {counts['skipped']} unchanged since the last export, "
        f"{counts['failed']} failed, into {args.to}",
        file=sys.stderr,
    )
    return EXIT_ERROR if errors else EXIT_OK


def sidechains_of(source: Path, index: TranscriptIndex) -> list[tuple[str, Path | None, list[int]]]:
    """Return a session's sidechains as (agent name, agent file or None, inline line indexes), in
    the order of the lines they hang from: inline runs (1.0.x) by their lines, agent files (2.0.x,
    2.1.x) by path."""
    from riffd.transcript.sidechains import find_sidechains
    from riffd.transcript.targets import agent_files_of

    found = find_sidechains(index, agent_files_of(source, index.session_id))
    runs: dict[int, list[int]] = {}
    if any(sidechain.layout == "inline" for sidechain in found):
        root_of: dict[int, int] = {}
        parents = index.parents
        for line, line_flags in enumerate(index.flags):
            if not line_flags & SIDECHAIN:
                continue
            path = [line]
            while parents[path[-1]] >= 0 and path[-1] not in root_of and len(path) <= len(parents):
                path.append(parents[path[-1]])
            root = root_of.get(path[-1], path[-1])
            for step in path:
                root_of[step] = root
            runs.setdefault(root, []).append(line)
    return [
        (sidechain.agent, None, runs.get(sidechain.first_line, []))
        if sidechain.layout == "inline"
        else (sidechain.agent, Path(sidechain.path), [])
        for sidechain in found
    ]
