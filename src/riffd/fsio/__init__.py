"""The one I/O layer riffd reads and writes files through (a package face: import from here).

`seam` is the `FileSystem` every file operation goes through (tests subclass it to inject faults),
`retrying` the same with its retry policy (`RetryingFS`: call sites read `fs.stat(path)`), `retry`
retries what a cloud-synced folder fails for a moment, `durable` holds the writes every
writer shares (whole buffers, exact offsets, flushes, private folders and files), `mounts` tells a
network or FUSE filesystem, and `libc` asks the C library for what Python has no wrapper for
(atomic exchange, rename without replace, glibc's mmap threshold).
"""

from riffd.fsio.durable import (
    FOLDER_MODE,
    REMOVE_ATTEMPTS,
    OffsetWriter,
    create_private,
    ensure_private_folder,
    fsync_file,
    fsync_folder,
    remove_leftover,
    replace_file,
    write_all,
)
from riffd.fsio.libc import (
    EXCHANGE_UNSUPPORTED,
    MMAP_THRESHOLD,
    exchange_names,
    pin_mmap_threshold,
    rename_noreplace,
)
from riffd.fsio.mounts import REMOTE_FILESYSTEMS, filesystem_type, is_remote
from riffd.fsio.retry import (
    CLOUD_SYNC_HINT,
    DEFAULT_RETRY,
    IO_STATS,
    IOStats,
    ReadFailed,
    RetryPolicy,
    is_cloud_sync_error,
    retrying_call,
)
from riffd.fsio.retrying import REAL_FILES, RetryingFS
from riffd.fsio.seam import NOFOLLOW, REAL_FS, FileSystem

__all__ = [
    "CLOUD_SYNC_HINT",
    "DEFAULT_RETRY",
    "EXCHANGE_UNSUPPORTED",
    "FOLDER_MODE",
    "IO_STATS",
    "MMAP_THRESHOLD",
    "NOFOLLOW",
    "REAL_FILES",
    "REAL_FS",
    "REMOTE_FILESYSTEMS",
    "REMOVE_ATTEMPTS",
    "FileSystem",
    "IOStats",
    "OffsetWriter",
    "ReadFailed",
    "RetryPolicy",
    "RetryingFS",
    "create_private",
    "ensure_private_folder",
    "exchange_names",
    "filesystem_type",
    "fsync_file",
    "fsync_folder",
    "is_cloud_sync_error",
    "is_remote",
    "pin_mmap_threshold",
    "remove_leftover",
    "rename_noreplace",
    "replace_file",
    "retrying_call",
    "write_all",
]
