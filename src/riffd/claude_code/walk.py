"""Walking the roots for transcripts: every real folder once (by device and inode), symlinked
folders inside the roots followed with loop protection, each link that cannot be followed named.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path

from riffd.claude_code.folders import NEVER_TOUCH_DIRS, is_transcript_name
from riffd.fsio import REAL_FILES, FileSystem, RetryingFS

LinkHandler = Callable[[Path, Path], None]


def iter_transcripts(
    paths: Iterable[Path],
    on_error: Callable[[OSError], None] | None = None,
    *,
    fs: FileSystem = REAL_FILES,
    on_link: LinkHandler | None = None,
    on_folder: Callable[[Path], None] | None = None,
) -> Iterator[Path]:
    """Yield the transcript files named by `paths`: files as given, folders walked
    (`TranscriptWalk`: symlinked folders followed, each real folder and file once, never-touch
    folders skipped). Raise FileNotFoundError for a path that does not exist. A folder that cannot
    be listed, or a link to nothing, is never taken for an empty one: its OSError (with it as
    `filename`) goes to `on_error`, or is raised when there is none; a folder deleted meanwhile
    holds nothing. `on_link(link, target)` hears of each symlinked folder followed, `on_folder` of
    each folder entered. Statuses and listings retry EIO per `fs`'s policy (a seam gets the
    default one)."""
    walk = TranscriptWalk(on_error, fs, on_link, on_folder)
    for path in paths:
        try:
            # EIO retried: a status that cannot be read is an error, never "no such file".
            status = walk.fs.stat(path)
            if stat.S_ISLNK(status.st_mode):
                status = os.stat(path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{path}: no such file or folder") from None
        except OSError as exc:
            walk.failed(exc, path)
            continue
        if stat.S_ISREG(status.st_mode):
            if walk.first_visit(walk.files, status):
                yield path
            continue
        if not stat.S_ISDIR(status.st_mode):
            raise FileNotFoundError(f"{path}: neither a file nor a folder")
        yield from walk.folder(path, status)
    yield from walk.links()


class TranscriptWalk:
    """One walk over transcript folders, following symlinks inside them: the one way riffd lists
    transcripts.

    Real folders are walked first (sorted, depth first) and the symlinks met are followed
    afterwards, so a file reachable both ways is named by its real path. Every folder is entered
    once by device and inode, which stops a link back up the tree and a second link to one folder; a
    symlinked transcript is named only when the file it points to is not reached by the walk
    otherwise. Costs one stat per folder and per symlink, none per file.
    """

    def __init__(
        self,
        on_error: Callable[[OSError], None] | None,
        fs: FileSystem = REAL_FILES,
        on_link: LinkHandler | None = None,
        on_folder: Callable[[Path], None] | None = None,
    ) -> None:
        self.on_error, self.on_link, self.on_folder = on_error, on_link, on_folder
        # EIO retried per its policy (a seam gets the default one)
        self.fs = fs if isinstance(fs, RetryingFS) else RetryingFS(fs)
        self.folders: set[tuple[int, int]] = set()  # (device, inode) of every folder entered
        # of files named as given, and targets of linked transcripts
        self.files: set[tuple[int, int]] = set()
        self._folder_links: list[Path] = []
        self._file_links: list[Path] = []

    @staticmethod
    def first_visit(seen: set[tuple[int, int]], status: os.stat_result) -> bool:
        """Record `status`'s device and inode in `seen`; return False when it was there already."""
        key = (status.st_dev, status.st_ino)
        if key in seen:
            return False
        seen.add(key)
        return True

    def failed(self, exc: OSError, path: Path) -> None:
        """Hand an error about `path` to on_error, or raise it when there is none."""
        if exc.filename is None:
            exc.filename = str(path)
        if self.on_error is None:
            raise exc
        self.on_error(exc)

    def folder(self, folder: Path, status: os.stat_result | None = None) -> Iterator[Path]:
        """Yield the transcripts in `folder` and the real folders below it, once; remember the links
        met."""
        try:
            if status is None:
                status = self.fs.stat(folder)
            if not self.first_visit(self.folders, status):
                return
            entries = sorted(self.fs.entries(folder))
        except FileNotFoundError:
            return
        except OSError as exc:
            self.failed(exc, folder)
            return
        if self.on_folder is not None:
            self.on_folder(folder)
        for name, is_folder, is_link in entries:
            if is_link and not name.startswith(".") and name not in NEVER_TOUCH_DIRS:
                (self._file_links if is_transcript_name(name) else self._folder_links).append(
                    folder / name
                )
            elif not is_folder and is_transcript_name(name):
                yield folder / name
        for name, is_folder, is_link in entries:
            if (
                is_folder
                and not is_link
                and name not in NEVER_TOUCH_DIRS
                and not name.startswith(".")
            ):
                yield from self.folder(folder / name)

    def links(self) -> Iterator[Path]:
        """Follow the links met (folders first, then the folders met inside them, then linked
        transcripts)."""
        while self._folder_links:
            link = self._folder_links.pop(0)
            status = self._target(link)
            if status is None or not stat.S_ISDIR(status.st_mode):
                continue
            if (status.st_dev, status.st_ino) not in self.folders and self.on_link is not None:
                self.on_link(link, Path(os.path.realpath(link)))
            yield from self.folder(link, status)
        for link in self._file_links:
            status = self._target(link)
            if status is None or not stat.S_ISREG(status.st_mode) or self._walked(link):
                continue
            if self.first_visit(self.files, status):
                yield link

    def _target(self, link: Path) -> os.stat_result | None:
        """The status of what `link` points to; None (and on_error told) for a link to nothing or
        unreadable."""
        try:
            # following the link, which the seam's stat does not
            return self.fs.attempt(partial(os.stat, link), f"the status of {link}")
        except FileNotFoundError:
            if os.path.lexists(link):
                target = os.readlink(link)
                self.failed(
                    FileNotFoundError(
                        errno.ENOENT,
                        f"a symlink to {target}, which does not exist (a disk not mounted?)",
                        str(link),
                    ),
                    link,
                )
            return None
        except OSError as exc:
            self.failed(exc, link)
            return None

    def _walked(self, link: Path) -> bool:
        """Whether the transcript `link` points to was named already by its real path (its folder
        was walked)."""
        target = Path(os.path.realpath(link))
        try:
            folder = os.stat(target.parent)
        except OSError:
            return False
        return is_transcript_name(target.name) and (folder.st_dev, folder.st_ino) in self.folders
