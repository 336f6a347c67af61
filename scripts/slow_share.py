#!/usr/bin/env python3
"""A folder that stands for shared storage: a read-only FUSE view of SRC at MNT that counts and slows its reads.

    python scripts/slow_share.py SRC MNT [--latency-ms 2] [--mbps 200]     # runs until unmounted
    python scripts/slow_share.py --start SRC MNT [...]                       # in the background, waits for it
    python scripts/slow_share.py --stop MNT                                  # umount (the process then ends)
    cat MNT/.slow-share.json                                                 # bytes and reads so far

Every read() pays ``latency_ms`` and the whole mount shares ``mbps`` MB/s (a token bucket), as a parallel
filesystem seen from one node does under load; what was read is counted per file. The counters are
a file in the mount itself (``.slow-share.json``, not counted) so a test or a bench reads them through the
same path its jobs use. Needs /dev/fuse, libfuse3 (Debian's libfuse3-3) and ``mfusepy`` (PyPI); root, or
fuse3's fusermount3, to mount. The tests (tests/slow_share.py) and bench/staging.py start and stop it.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import subprocess
import sys
import threading
import time

STATS = ".slow-share.json"


def _operations(src: str, latency_s: float, bytes_per_s: float):
    from mfusepy import FuseOSError, Operations

    class SlowShare(Operations):
        """A read-only passthrough of ``src`` that sleeps on every read and counts the bytes."""

        use_ns = True

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.read_bytes = 0
            self.reads = 0
            self.per_file: dict[str, int] = {}
            self.next_free = time.monotonic()  # the bandwidth limit: when the shared "link" is free again
            self.started = time.time()

        def _real(self, path: str) -> str:
            return os.path.join(src, path.lstrip("/"))

        def _stats(self) -> bytes:
            with self.lock:
                data = {"read_bytes": self.read_bytes, "reads": self.reads, "files": dict(self.per_file),
                        "latency_ms": latency_s * 1000, "mbps": bytes_per_s / 1e6 if bytes_per_s else None}
            return (json.dumps(data, sort_keys=True) + "\n").encode()

        def getattr(self, path, fh=None):
            if path == "/" + STATS:
                st = os.lstat(src)
                return {"st_mode": 0o100444, "st_nlink": 1, "st_size": len(self._stats()),
                        "st_mtime": time.time_ns(), "st_atime": st.st_atime_ns, "st_ctime": st.st_ctime_ns,
                        "st_uid": st.st_uid, "st_gid": st.st_gid}
            try:
                st = os.lstat(self._real(path))
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None
            out = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")}
            return {**out, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        def readdir(self, path, fh):
            names = [".", "..", *os.listdir(self._real(path))]
            return names + ([STATS] if path == "/" else [])

        def readlink(self, path):
            return os.readlink(self._real(path))

        def statfs(self, path):
            sv = os.statvfs(src)
            return {k: getattr(sv, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                                "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

        def access(self, path, amode):
            if amode & os.W_OK:
                raise FuseOSError(errno.EROFS)
            if path != "/" + STATS and not os.access(self._real(path), amode):
                raise FuseOSError(errno.EACCES)
            return 0

        def open(self, path, flags):
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EROFS)
            if path == "/" + STATS:
                return 0
            try:
                return os.open(self._real(path), os.O_RDONLY)
            except OSError as exc:
                raise FuseOSError(exc.errno or errno.EIO) from None

        def read(self, path, size, offset, fh):
            if path == "/" + STATS:
                return self._stats()[offset:offset + size]
            data = os.pread(fh, size, offset)
            wait = latency_s
            with self.lock:
                self.read_bytes += len(data)
                self.reads += 1
                self.per_file[path] = self.per_file.get(path, 0) + len(data)
                if bytes_per_s:
                    now = time.monotonic()
                    start = max(now, self.next_free)
                    self.next_free = start + len(data) / bytes_per_s
                    wait += self.next_free - now
            if wait > 0:
                time.sleep(wait)
            return data

        def release(self, path, fh):
            if path != "/" + STATS:
                os.close(fh)
            return 0

    return SlowShare()


def mount(src: str, mnt: str, latency_ms: float, mbps: float) -> None:
    """Serve the view until it is unmounted (foreground)."""
    from mfusepy import FUSE

    ops = _operations(os.path.abspath(src), latency_ms / 1000.0, mbps * 1e6)
    # direct_io: every read reaches read() (the page cache would hide the second and later reads of a file)
    FUSE(ops, mnt, foreground=True, ro=True, allow_other=True, direct_io=True, nothreads=False)


def mounted(mnt: str) -> bool:
    """Whether ``mnt`` shows the counters (the view is up)."""
    return os.path.isfile(os.path.join(mnt, STATS))


def start(src: str, mnt: str, latency_ms: float, mbps: float, log: str | None = None) -> int:
    """Start the view in the background; return its pid once it answers (RuntimeError after 20 s)."""
    os.makedirs(mnt, exist_ok=True)
    out = open(log or os.devnull, "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), src, mnt, "--latency-ms", str(latency_ms),
                             "--mbps", str(mbps)], stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + 20
    while not mounted(mnt):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the slow share did not come up at {mnt} (see {log or 'its log'})")
        time.sleep(0.05)
    return proc.pid


def stop(mnt: str) -> None:
    """Unmount the view (its process then ends)."""
    for cmd in (["fusermount3", "-u", mnt], ["umount", mnt], ["umount", "-l", mnt]):
        try:
            if subprocess.run(cmd, capture_output=True).returncode == 0:
                return
        except FileNotFoundError:
            continue


def stats(mnt: str) -> dict:
    """The counters of the view at ``mnt``."""
    with open(os.path.join(mnt, STATS), encoding="utf-8") as f:
        return json.load(f)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", metavar="SRC MNT | MNT")
    p.add_argument("--start", action="store_true", help="start in the background and wait until it answers")
    p.add_argument("--stop", action="store_true", help="unmount MNT")
    p.add_argument("--latency-ms", type=float, default=2.0, help="added to every read (default 2 ms)")
    p.add_argument("--mbps", type=float, default=200.0, help="MB/s for the whole mount (default 200; 0: no limit)")
    args = p.parse_args()
    if args.stop:
        stop(args.paths[0])
        return 0
    src, mnt = args.paths
    if args.start:
        print(start(src, mnt, args.latency_ms, args.mbps))
        return 0
    mount(src, mnt, args.latency_ms, args.mbps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
