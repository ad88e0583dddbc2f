"""Watching the transcript roots: which files count, which observer, and events turned into queue
entries.

Events are hints, never the whole truth: `reconcile` compares every transcript under the roots with
its stored watermark (at start-up and on the rescan schedule), which is what catches changes made
while riffd was down, events an overflowing inotify queue dropped, and folders where no events
arrive at all (WSL2 drvfs and 9p, network and FUSE mounts: `auto` polls those).
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from riffd.claude_code.folders import NEVER_TOUCH_DIRS, is_transcript_name
from riffd.claude_code.session_files import CONFIG_FOLDERS, SessionFile, classify, iter_files_below
from riffd.claude_code.walk import LinkHandler, iter_transcripts
from riffd.fsio import REAL_FILES, REMOTE_FILESYSTEMS, RetryingFS, filesystem_type
from riffd.state.store import StateStore

log = logging.getLogger(__name__)

MATCHES_KEPT = 20_000  # paths whose `TranscriptFilter.matches` answer is kept

# File systems where native change events do not arrive (or not reliably): poll them.
INOTIFY_LIMIT_HINT = (
    "the inotify limit is reached (raise it with `sysctl fs.inotify.max_user_watches=524288` and "
    "`fs.inotify.max_user_instances=512`); polling instead"
)


@dataclass(frozen=True)
class TranscriptFilter:
    """Which files under the roots are transcripts riffd watches (documented in the config example),
    and which files of sessions it keeps whole (riffd.claude_code.session_files: in the session
    folders under the roots, and in the config folders `configs`)."""

    roots: tuple[Path, ...]
    include: tuple[str, ...] = ("*.jsonl",)
    exclude: tuple[str, ...] = ()
    configs: tuple[Path, ...] = ()
    # path -> `matches`, asked at each event and each file processed (two events an append, and the
    # worker's look): the answer depends on the path alone
    _matched: dict[str, bool] = field(
        default_factory=dict, init=False, compare=False, hash=False, repr=False
    )

    @property
    def watched_folders(self) -> tuple[Path, ...]:
        """The folders to watch: the roots, and the config folders' sub-folders that hold sessions'
        files."""
        return self.roots + tuple(
            config / name for config in self.configs for name in CONFIG_FOLDERS
        )

    def session_file(self, path: Path) -> SessionFile | None:
        """Return what file of a session `path` is, when it is one the archive keeps whole and the
        patterns do not exclude (matched against its path relative to its root, as transcripts
        are)."""
        found = classify(path, self.roots, self.configs)
        if found is None or not self.exclude:
            return found
        for root in self.roots:
            if path.is_relative_to(root):
                relative = str(path.relative_to(root))
                return (
                    None
                    if any(fnmatch.fnmatch(relative, pattern) for pattern in self.exclude)
                    else found
                )
        return found

    def matches(self, path: Path) -> bool:
        """Return True when `path` is a transcript under one of the roots that the patterns
        admit."""
        name = str(path)
        known = self._matched.get(name)
        if known is None:
            if len(self._matched) >= MATCHES_KEPT:
                self._matched.clear()
            known = self._matched[name] = self._admits(path)
        return known

    def _admits(self, path: Path) -> bool:
        if not is_transcript_name(path.name) or not any(
            fnmatch.fnmatch(path.name, p) for p in self.include
        ):
            return False
        for root in self.roots:
            try:
                relative = path.relative_to(root)
            except ValueError:
                continue
            if any(
                part in NEVER_TOUCH_DIRS or part.startswith(".") for part in relative.parts[:-1]
            ):
                return False
            return not any(fnmatch.fnmatch(str(relative), pattern) for pattern in self.exclude)
        return False

    def transcripts(
        self, on_error: Callable[[OSError], None] | None = None, on_link: LinkHandler | None = None
    ) -> Iterable[Path]:
        """Yield every matching transcript under the roots that exist, symlinked folders followed,
        each real file once (one walk over all roots); a folder that cannot be listed goes to
        `on_error`, each symlinked folder followed to `on_link` (see iter_transcripts)."""
        roots = [root for root in self.roots if is_folder(root, on_error)]
        yield from (
            path
            for path in iter_transcripts(roots, on_error, on_link=on_link)
            if self.matches(path)
        )


def is_folder(
    path: Path, on_error: Callable[[OSError], None] | None = None, fs: RetryingFS = REAL_FILES
) -> bool:
    """Return True when `path` is a folder now, through a symlink (EIO retried per `fs`); one whose
    status cannot be read is not one for now, and goes to `on_error` (or the log): the next refresh
    or rescan looks again."""
    try:
        return stat.S_ISDIR(fs.attempt(partial(os.stat, path), f"the status of {path}").st_mode)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if exc.filename is None:
            exc.filename = str(path)
        if on_error is not None:
            on_error(exc)
        else:
            log.warning("cannot read the status of %s now: %s; looking again later", path, exc)
        return False


def choose_observer(kind: str, roots: Iterable[Path]) -> tuple[str, str]:
    """Given the configured observer kind and the roots, return ("native" | "polling", why)."""
    if kind in ("native", "polling"):
        return kind, "configured"
    for root in roots:
        fs_type = filesystem_type(root if root.exists() else root.parent)
        if fs_type is not None and (fs_type in REMOTE_FILESYSTEMS or fs_type.startswith("fuse.")):
            return "polling", f"{root} is on {fs_type}, where change events do not arrive reliably"
    return "native", "local file system"


def _is_folder_link(path: Path) -> bool:
    return path.is_symlink() and path.is_dir()


# The events `_Handler` acts on. A file opened, or closed without a write (every read: riffd's own
# take five per append), is left out of the watch itself (the inotify mask), so the observer's
# threads never handle those events only for the handler to drop them.
EVENTS: list[type[FileSystemEvent]] = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]


class _Handler(FileSystemEventHandler):
    """Events of one watch to the watcher; those of a symlinked folder's target (`alias`: target,
    link) are named through the link, as the walk names its files."""

    def __init__(self, watcher: Watcher, alias: tuple[Path, Path] | None = None) -> None:
        self.watcher = watcher
        self.alias = alias

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        self.watcher.events += 1
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if not raw:
                continue
            path = Path(os.fsdecode(raw))
            if self.alias is not None:
                target, link = self.alias
                path = link / path.relative_to(target) if path.is_relative_to(target) else path
            if event.is_directory or (
                event.event_type in ("created", "moved") and _is_folder_link(path)
            ):
                if event.event_type in ("created", "moved"):
                    # A new project or subagents folder, or a link to one: files may be written
                    # before its watch exists.
                    self.watcher.enqueue_folder(path)
            elif (
                self.watcher.filter.matches(path)
                or self.watcher.filter.session_file(path) is not None
            ):
                self.watcher.on_change(str(path))


@dataclass
class Watcher:
    """A watchdog observer over the roots that feeds `on_change` with changed transcript paths."""

    filter: TranscriptFilter
    on_change: Callable[[str], None]
    kind: str = "auto"
    polling_interval: float = 5.0
    events: int = 0
    observer_kind: str = "none"
    observer_why: str = ""
    watched: set[Path] = field(default_factory=set)
    # the observer's watch of each root watched (dropped when the root is removed)
    _root_watches: dict[Path, ObservedWatch] = field(default_factory=dict)
    # Symlinked folders under the roots, each watched on its own (an observer does not follow
    # links): link -> watch
    linked: dict[Path, ObservedWatch] = field(default_factory=dict)
    _observer: BaseObserver | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        """Start observing every root that exists (a missing root is picked up by `refresh`
        later)."""
        kind, why = choose_observer(self.kind, self.filter.roots)
        if kind == "native":
            try:
                self._start(Observer(), "native", why)
                return
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EMFILE):
                    raise
                log.warning("native file events unavailable: %s", INOTIFY_LIMIT_HINT)
                self.stop()
                why = INOTIFY_LIMIT_HINT
        self._start(PollingObserver(timeout=self.polling_interval), "polling", why)

    def _start(self, observer: BaseObserver, kind: str, why: str) -> None:
        with self._lock:
            self._observer = observer
            self.observer_kind, self.observer_why = kind, why
            self.watched, self.linked = set(), {}
            self._root_watches = {}
            observer.start()
        self.refresh()
        missing = self.missing_roots()
        log.info(
            "watching %s with %s events (%s)%s",
            ", ".join(map(str, self.watched)) or "nothing yet",
            kind,
            why,
            f"; waiting for {', '.join(map(str, missing))} to appear" if missing else "",
        )

    def missing_roots(self) -> list[Path]:
        """Return the roots not watched yet (they did not exist, or could not be read, when last
        looked at), and those watched that are no folder now (removed: watched again by `refresh`
        once they are back)."""
        with self._lock:
            return [
                root
                for root in self.filter.watched_folders
                if root not in self.watched or not is_folder(root)
            ]

    def refresh(self) -> list[Path]:
        """Watch roots that have appeared since start and return them; raise nothing for roots still
        missing."""
        appeared: list[Path] = []
        with self._lock:
            observer = self._observer
            if observer is None:
                return appeared
            for root in sorted(self.watched):
                if not is_folder(root):  # removed (its watch went with it): again once it is back
                    handle = self._root_watches.pop(root, None)
                    if handle is not None:
                        with contextlib.suppress(KeyError, OSError):
                            observer.unschedule(handle)
                    self.watched.discard(root)
                    log.warning("%s is gone: riffd watches it again once it is back", root)
            for root in self.filter.watched_folders:
                if root in self.watched or not is_folder(root):
                    continue
                # A root that is a symlink (~/.claude/projects on another disk) is watched in its
                # real folder: an observer watching the link would see the link, not the folder.
                target = Path(os.path.realpath(root))
                alias = (target, root) if target != Path(os.path.abspath(root)) else None
                try:
                    self._root_watches[root] = observer.schedule(
                        _Handler(self, alias), str(target), recursive=True, event_filter=EVENTS
                    )
                    self.watched.add(root)
                    appeared.append(root)
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EMFILE):
                        log.warning(
                            "cannot watch %s: %s; the rescan still covers it",
                            root,
                            INOTIFY_LIMIT_HINT,
                        )
                    else:
                        log.warning("cannot watch %s: %s; the rescan still covers it", root, exc)
        return appeared

    def watch_links(self, links: Iterable[Path], *, only: bool = False) -> None:
        """Watch each symlinked folder in `links` (found by a walk of the roots) that is not watched
        yet; with `only` (`links` is every link a whole walk found), stop watching the links no
        longer there. A link that cannot be watched is logged: the rescan still covers it."""
        with self._lock:
            observer = self._observer
            if observer is None:
                return
            wanted = set(links)
            for link in sorted(wanted - self.linked.keys()):
                # The real folder is watched (an observer watching the link would not follow it),
                # its events renamed to the link's paths.
                target = Path(os.path.realpath(link))
                try:
                    self.linked[link] = observer.schedule(
                        _Handler(self, (target, link)),
                        str(target),
                        recursive=True,
                        event_filter=EVENTS,
                    )
                    log.info("watching %s, a symlink to %s", link, target)
                except OSError as exc:
                    log.warning(
                        "cannot watch %s (a symlink to %s): %s; the rescan still covers it",
                        link,
                        os.path.realpath(link),
                        exc,
                    )
            for link in sorted(self.linked.keys() - wanted) if only else ():
                with contextlib.suppress(KeyError, OSError):
                    observer.unschedule(self.linked[link])
                del self.linked[link]

    def stop(self) -> None:
        """Stop the observer and wait for its threads."""
        with self._lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=10)

    def enqueue_folder(self, folder: Path) -> None:
        """Queue every transcript, and every file of a session kept whole, already in a folder that
        just appeared (what cannot be listed now, the rescan catches later)."""
        if is_folder(folder):
            links = [folder] if folder.is_symlink() else []
            try:
                for path in iter_transcripts(
                    [folder],
                    lambda exc: log.warning("%s", exc),
                    on_link=lambda link, _target: links.append(link),
                ):
                    if self.filter.matches(path):
                        self.on_change(str(path))
                for path in iter_files_below(folder, lambda exc: log.warning("%s", exc)):
                    if (
                        not self.filter.matches(path)  # (a `.jsonl` saved output is one)
                        and self.filter.session_file(path) is not None
                    ):
                        self.on_change(str(path))
            except OSError as exc:
                log.warning("cannot list %s now: %s; the rescan catches it later", folder, exc)
            self.watch_links(links)


def reconcile(
    transcript_filter: TranscriptFilter,
    store: StateStore,
    on_change: Callable[[str], None],
    on_error: Callable[[OSError], None] | None = None,
    watcher: Watcher | None = None,
) -> int:
    """Queue every transcript whose file differs from its stored watermark, or that riffd has not
    seen, and every stored file that is gone; return how many were queued. Costs one stat per file,
    no reads. A folder that cannot be listed goes to `on_error` (its files are then looked at one by
    one, never forgotten). The symlinked folders the walk followed are handed to `watcher`, which
    watches them (and no others)."""
    known = store.known_files()
    queued = 0
    links: list[Path] = []
    for path in transcript_filter.transcripts(on_error, lambda link, _target: links.append(link)):
        name = str(path)
        stored = known.pop(name, None)
        try:
            status = path.stat()
        except OSError:
            continue
        if stored != (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns):
            on_change(name)
            queued += 1
    for name in known:  # stored, but no longer under the roots or no longer there
        on_change(name)
        queued += 1
    if watcher is not None:
        watcher.watch_links(links, only=True)
    return queued
