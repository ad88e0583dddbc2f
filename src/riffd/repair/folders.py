"""The folders a restore writes into: never reached through a symlinked folder, made private, owned
as the folder above them.

A restore puts a session's files back below a base folder (a projects root, a config folder, or the
folder given with `riffd archive restore --to`). Every folder between that base and the file must be
a real folder: a folder someone replaced by a symlink (`<session>/tool-results` pointing elsewhere,
say) would have riffd write the archived bytes wherever the link leads, and riffd run as root would
write a user's bytes into root's folders. The one link allowed is the project folder right below a
projects root, which riffd follows everywhere (a project folder on another disk), and only as Linux's
`fs.protected_symlinks` allows: the link is riffd's own user's, or its owner owns the folder it
points to. The check is made just before the folder is used; a process that swaps a folder for a
link between the check and the write is not caught (the writers here work by path).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from riffd.fsio import REAL_FS, ensure_private_folder


class LinkedFolder(OSError):
    """A folder between a restore's base and its file is a symlink riffd does not write through."""


def check_folders(base: Path, folder: Path, *, project_link: bool = False) -> None:
    """Check that every folder from `base` (excluded) down to `folder` that exists is a real folder.
    With `project_link`, the folder right below `base` may be a symlink to a folder its owner may
    follow (see the module). Raise LinkedFolder naming the link, NotADirectoryError when a file
    stands in the way."""
    try:
        parts = folder.relative_to(base).parts
    except ValueError:
        parts = ()
    current = base
    for depth, part in enumerate(parts):
        current = current / part
        try:
            status = os.lstat(current)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(status.st_mode):
            if depth == 0 and project_link and _may_follow(current, status):
                continue
            raise LinkedFolder(
                0,
                f"{current} is a symlink (to {os.path.realpath(current)}); riffd never writes "
                f"through a linked folder below {base}: nothing was written there (remove the link, "
                "or restore with --to DIR)",
            )
        if not stat.S_ISDIR(status.st_mode):
            raise NotADirectoryError(0, f"{current} is not a folder", str(current))


def _may_follow(link: Path, status: os.stat_result) -> bool:
    """Whether a project folder's link is followed: it points to a folder, and it is this user's
    own or its owner owns that folder (so a user's link cannot lead root into root's folders)."""
    try:
        target = os.stat(link)
    except OSError:
        return False
    return stat.S_ISDIR(target.st_mode) and status.st_uid in (os.geteuid(), target.st_uid)


def make_folder(folder: Path) -> None:
    """Make `folder` and its missing parents as riffd makes folders (0700, whatever the umask),
    owned as the nearest folder above them that exists (riffd run as root leaves a user's tree
    theirs)."""
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if existing == folder:
        return
    made = [
        parent
        for parent in [folder, *folder.parents]
        if parent.is_relative_to(existing) and parent != existing
    ]
    ensure_private_folder(REAL_FS, folder)
    owner = existing.stat()
    if os.geteuid() == 0:
        for path in made:
            os.chown(path, owner.st_uid, owner.st_gid)
