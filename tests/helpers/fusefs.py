"""A FUSE filesystem of our own for the tests: a passthrough to a real folder that fails on purpose.

It behaves like the cloud-sync and network folders of shared/filesystems.md: libfuse's high-level
API (so renaming over, or unlinking, a file that is still open hides it as `.fuse_hiddenNNNN`), EIO
or ESTALE on chosen operations and paths with a seeded chance, and (with `exchange = "drop"`) a
layer that accepts RENAME_EXCHANGE and performs a plain rename, as mfusepy does by default; with
`exchange = "refuse"`, one that answers EINVAL.

The filesystem runs in its own process (`python tests/fusefs.py BACKING MOUNTPOINT CONTROL`), so a test that hangs
or fails can always unmount it. The faults are read from the JSON file CONTROL whenever it changes::

    {"seed": 1, "exchange": "honour" | "drop" | "refuse", "rules": [{"ops": ["rename", "getattr"],
     "glob": "*.jsonl", "errno": 5, "chance": 0.1, "times": 3, "unlinked": false}]}

A rule with `"delay": SECONDS` makes the operation that long instead of failing it (a cloud folder
fetching a file on demand).

A rule applies to an operation in `ops` on a path matching `glob` (fnmatch on the path inside the
mount, "/" first), with `chance` (1 = always), at most `times` times (absent: no limit). With
`unlinked`, it applies only to an open file whose last name is gone (`getattr` of such a handle
gives ESTALE on NFS, and with `hard_remove`, which `Mount(..., hard_remove=True)` sets: then an open
file renamed over or unlinked really goes). `Mount` (a context manager) mounts, rewrites CONTROL and
unmounts; tests that need FUSE use the `fuse` fixture, which skips them with one reason where
/dev/fuse or fusermount3 is missing.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2


def fuse_unavailable() -> str | None:
    """Return why FUSE tests cannot run here, or None when they can."""
    if not os.path.exists("/dev/fuse"):
        return (
            "no /dev/fuse on this machine (FUSE tests need it; .ci/run installs fuse3 where it can)"
        )
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian's fuse3 package; .ci/run installs it where it can)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return (
            f"the mfusepy binding cannot load libfuse 3 ({exc}); install fuse3 and the test extras"
        )
    return None


class Mount:
    """A mounted faulty passthrough of `backing` at `mountpoint`; `faults(...)` changes its
    faults."""

    def __init__(
        self, backing: Path, mountpoint: Path, control: Path, *, hard_remove: bool = False
    ) -> None:
        self.backing, self.mountpoint, self.control = backing, mountpoint, control
        self.hard_remove = hard_remove
        self.process: subprocess.Popen[bytes] | None = None
        self.log = control.with_suffix(".log")

    def faults(self, *rules: dict[str, Any], seed: int = 0, exchange: str = "honour") -> None:
        """Replace the filesystem's faults (they apply to the next operations)."""
        staging = self.control.with_suffix(".tmp")
        staging.write_text(json.dumps({"seed": seed, "exchange": exchange, "rules": list(rules)}))
        os.replace(staging, self.control)

    def __enter__(self) -> Mount:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        if not self.control.exists():
            self.faults()
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    str(self.backing),
                    str(self.mountpoint),
                    str(self.control),
                    "hard_remove" if self.hard_remove else "",
                ],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 10
        while not os.path.ismount(self.mountpoint):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the test filesystem did not mount: {self.log.read_text(errors='replace')}"
                )
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(
            ["fusermount3", "-u", "-z", str(self.mountpoint)], check=False, capture_output=True
        )
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# --- the filesystem process
# -----------------------------------------------------------------------------


def serve(
    backing: str, mountpoint: str, control: str, options: str = ""
) -> None:  # pragma: no cover
    import mfusepy

    class Faults:
        def __init__(self) -> None:
            self.stamp: tuple[int, int] | None = None
            self.rules: list[dict[str, Any]] = []
            self.exchange = "honour"
            self.rng = random.Random(0)
            self.lock = threading.Lock()

        def refresh(self) -> None:
            try:
                status = os.stat(control)
            except FileNotFoundError:
                return
            stamp = (status.st_ino, status.st_mtime_ns)
            if stamp == self.stamp:
                return
            settings = json.loads(Path(control).read_text())
            self.stamp, self.rules = stamp, [dict(rule) for rule in settings.get("rules", [])]
            self.exchange = settings.get("exchange", "honour")
            self.rng = random.Random(settings.get("seed", 0))

        def check(self, op: str, path: str | None, *, unlinked: bool = False) -> None:
            delay = 0.0
            with self.lock:
                self.refresh()
                for rule in self.rules:
                    if op not in rule["ops"] or (rule.get("unlinked") and not unlinked):
                        continue
                    if path is not None and not fnmatch.fnmatch(path, rule.get("glob", "*")):
                        continue
                    if rule.get("times") is not None and rule["times"] <= 0:
                        continue
                    if self.rng.random() < rule.get("chance", 1.0):
                        if rule.get("times") is not None:
                            rule["times"] -= 1
                        if rule.get("delay"):  # slow, not failing (a file fetched on demand)
                            delay = max(delay, float(rule["delay"]))
                            continue
                        raise mfusepy.FuseOSError(rule.get("errno", errno.EIO))
            if delay:
                time.sleep(delay)

    faults = Faults()

    class Passthrough(mfusepy.Operations):
        use_ns = True

        def __init__(self) -> None:
            self.root = backing
            self.paths: dict[int, str] = {}  # open handle -> the path it was opened at

        def _full(self, path: str) -> str:
            return os.path.join(self.root, path.lstrip("/"))

        def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
            status = os.fstat(fh) if fh is not None else os.lstat(self._full(path or "/"))
            faults.check(
                "getattr",
                path if path is not None else self.paths.get(fh or -1),
                unlinked=fh is not None and status.st_nlink == 0,
            )
            return {
                key: getattr(status, key)
                for key in (
                    "st_atime_ns",
                    "st_ctime_ns",
                    "st_mtime_ns",
                    "st_gid",
                    "st_mode",
                    "st_nlink",
                    "st_size",
                    "st_uid",
                    "st_ino",
                )
            }

        def readdir(self, path: str, fh: int) -> list[str]:
            faults.check("readdir", path)
            return [".", "..", *os.listdir(self._full(path))]

        def open(self, path: str, flags: int) -> int:
            faults.check("open", path)
            fh = os.open(self._full(path), flags)
            self.paths[fh] = path
            return fh

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            faults.check("create", path)
            fh = os.open(self._full(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            self.paths[fh] = path
            return fh

        def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
            faults.check("read", path or self.paths.get(fh))
            return os.pread(fh, size, offset)

        def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
            faults.check("write", path or self.paths.get(fh))
            return os.pwrite(fh, data, offset)

        def fsync(self, path: str | None, datasync: int, fh: int) -> int:
            faults.check("fsync", path or self.paths.get(fh))
            os.fsync(fh)
            return 0

        def flush(self, path: str | None, fh: int) -> int:
            return 0

        def release(self, path: str | None, fh: int) -> int:
            self.paths.pop(fh, None)
            os.close(fh)
            return 0

        def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
            faults.check("truncate", path)
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(self._full(path or "/"), length)
            return 0

        def unlink(self, path: str) -> int:
            faults.check("unlink", path)
            os.unlink(self._full(path))
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            faults.check("mkdir", path)
            os.mkdir(self._full(path), mode)
            return 0

        def rmdir(self, path: str) -> int:
            os.rmdir(self._full(path))
            return 0

        def chmod(self, path: str | None, mode: int, fh: int | None = None) -> int:
            faults.check("chmod", path)
            if fh is not None:
                os.fchmod(fh, mode)
            else:
                os.chmod(self._full(path or "/"), mode)
            return 0

        def chown(self, path: str | None, uid: int, gid: int, fh: int | None = None) -> int:
            return 0

        def utimens(
            self, path: str | None, times: tuple[int, int] | None = None, fh: int | None = None
        ) -> int:
            faults.check("utimens", path)
            os.utime(self._full(path or "/"), ns=times)
            return 0

        def link(self, target: str, source: str) -> int:
            faults.check("link", target)
            os.link(self._full(source), self._full(target))
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            stv = os.statvfs(self._full(path))
            return {
                key: getattr(stv, key)
                for key in (
                    "f_bavail",
                    "f_bfree",
                    "f_blocks",
                    "f_bsize",
                    "f_favail",
                    "f_ffree",
                    "f_files",
                    "f_flag",
                    "f_frsize",
                    "f_namemax",
                )
            }

        def rename(self, old: str, new: str, flags: int = 0) -> int:
            if flags & RENAME_EXCHANGE and faults.exchange == "refuse":
                raise mfusepy.FuseOSError(errno.EINVAL)
            faults.check("rename", new)
            faults.check("rename", old)
            if flags & RENAME_EXCHANGE and faults.exchange != "drop":
                sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
                from riffd.fsio import exchange_names

                exchange_names(self._full(old), self._full(new))
                return 0
            if flags & RENAME_NOREPLACE and os.path.lexists(self._full(new)):
                raise mfusepy.FuseOSError(errno.EEXIST)
            os.rename(self._full(old), self._full(new))  # the exchange flag dropped: a plain rename
            return 0

    class FlagPassingFUSE(mfusepy.FUSE):
        """mfusepy drops rename's flags; pass them on, so the filesystem itself decides what it
        honours."""

        def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
            return int(
                self.operations.rename(
                    old.decode(self.encoding, self.errors),
                    new.decode(self.encoding, self.errors),
                    flags,
                )
            )

    extra = {"hard_remove": True} if options == "hard_remove" else {}
    FlagPassingFUSE(Passthrough(), mountpoint, foreground=True, nothreads=False, **extra)


if __name__ == "__main__":  # pragma: no cover
    serve(*sys.argv[1:5])
