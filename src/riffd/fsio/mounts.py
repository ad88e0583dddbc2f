"""Which filesystem holds a path, and whether it is a network or FUSE one (events do not arrive
reliably there, and an I/O error means a server failed for a moment).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


# Filesystems where files live on another machine or in a user-space server: change events do not
# arrive reliably (riffd polls), and an I/O error means a server failed for a moment, so riffd
# retries even an fsync there.
REMOTE_FILESYSTEMS = frozenset(
    {
        "9p",
        "drvfs",
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "sshfs",
        "fuse",
        "fuseblk",
        "davfs",
        "afpfs",
        "virtiofs",
        "vboxsf",
        "prl_fs",
        "vmhgfs",
    }
)


def filesystem_type(path: Path, mounts: Path = Path("/proc/self/mounts")) -> str | None:
    """Return the type of the file system holding `path` (Linux), or None when it cannot be told."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return None
    try:
        target = str(Path(path).resolve())
    except OSError:
        target = os.path.abspath(path)
    best, best_type = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) >= len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def is_remote(path: Path) -> bool:
    """Return True when `path` is on a network or FUSE filesystem (see REMOTE_FILESYSTEMS)."""
    kind = filesystem_type(path)
    return kind is not None and (kind in REMOTE_FILESYSTEMS or kind.startswith("fuse."))
