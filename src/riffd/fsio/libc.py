"""What riffd asks of the C library, which Python has no wrapper for: exchanging two names
atomically, renaming without replacing, and pinning glibc's mmap threshold.
"""

from __future__ import annotations

import errno
import os
import platform
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ctypes


# Errors that mean "this filesystem (or kernel, or libc) cannot exchange two names", not "something
# is wrong".
EXCHANGE_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS})


_RENAME_EXCHANGE = 2  # <linux/fs.h>


_RENAME_SWAP = 2  # <stdio.h> on macOS, for renamex_np


_RENAME_NOREPLACE = 1  # <linux/fs.h>


_RENAME_EXCL = 4  # <stdio.h> on macOS


_AT_FDCWD = -100


_SYS_RENAMEAT2 = {
    "x86_64": 316,
    "aarch64": 276,
    "arm64": 276,
    "riscv64": 276,
    "ppc64le": 357,
    "s390x": 347,
}


_libc: ctypes.CDLL | None = None


def _c_library() -> ctypes.CDLL:
    """The C library, loaded at first use (ctypes is imported then: most commands never call into
    it)."""
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def exchange_names(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Swap two names atomically: `renameat2(RENAME_EXCHANGE)` on Linux (glibc's wrapper, else the
    raw system call), `renamex_np(RENAME_SWAP)` on macOS. Python has no wrapper for either. Raise
    OSError with the errno; ENOSYS where neither exists."""
    _rename_with(src, dst, _RENAME_EXCHANGE, _RENAME_SWAP, "exchange two file names atomically")


def rename_noreplace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename `src` to `dst` only when `dst` does not exist, atomically (FileExistsError when it
    does): `renameat2(RENAME_NOREPLACE)` on Linux, `renamex_np(RENAME_EXCL)` on macOS; ENOSYS where
    neither exists."""
    _rename_with(
        src, dst, _RENAME_NOREPLACE, _RENAME_EXCL, "rename a file without replacing another"
    )


def _rename_with(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    linux_flag: int,
    mac_flag: int,
    what: str,
) -> None:
    libc = _c_library()
    source, target = os.fsencode(src), os.fsencode(dst)
    if sys.platform == "darwin":
        function = getattr(libc, "renamex_np", None)
        result = function(source, target, mac_flag) if function is not None else None
    elif sys.platform.startswith("linux"):
        function = getattr(libc, "renameat2", None)
        if function is not None:
            result = function(_AT_FDCWD, source, _AT_FDCWD, target, linux_flag)
        # a libc older than glibc 2.28, or one without the wrapper
        elif platform.machine() in _SYS_RENAMEAT2:
            result = libc.syscall(
                _SYS_RENAMEAT2[platform.machine()], _AT_FDCWD, source, _AT_FDCWD, target, linux_flag
            )
        else:
            result = None
    else:
        result = None
    if result is None:
        raise OSError(
            errno.ENOSYS, f"this system cannot {what}", os.fsdecode(src), None, os.fsdecode(dst)
        )
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), os.fsdecode(src), None, os.fsdecode(dst))


# glibc's mallopt parameter, and the threshold riffd pins it to.
_M_MMAP_THRESHOLD = -3


MMAP_THRESHOLD = 1 << 20


def pin_mmap_threshold() -> bool:
    """Keep blocks of 1 MiB and more out of the C heap (glibc); return whether the setting took.

    glibc starts by serving blocks of 128 KiB and more with their own mappings, but each time such a
    block is freed it raises that threshold to the block's size (up to 32 MB). An index grows big
    arrays and dict tables by reallocating them, so after the first growth they are made inside the
    heap, where every copy they leave behind stays resident: a scan of the 1 GB session peaked 5 to
    20 MB higher, varying from run to run. A fixed threshold (setting it turns the adjustment off)
    keeps each big block in its own mapping, grown in place and returned to the system when freed.
    Batches of lines (256 KiB) stay in the heap. Elsewhere (macOS, musl) this does nothing.
    """
    try:
        if not sys.platform.startswith("linux") or not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError):  # a libc that does not know the name: not glibc
        return False
    return bool(_c_library().mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
