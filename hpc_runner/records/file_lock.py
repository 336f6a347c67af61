"""A lock on a file that holds across the nodes of a cluster, where sweep dirs live (NFS, Lustre, BeeGFS).

Two mechanisms, chosen per folder by ``lock_method``:

- ``posix``: ``fcntl.lockf`` (POSIX record locks). On NFS they go through the lock manager (lockd, or
  NFSv4's own locking) and hold between nodes; ``flock`` does not on NFS clients with
  ``local_lock=flock|all`` or on Lustre with ``localflock``, which is why this replaces it.
- ``lease``: an ``O_EXCL`` lease file beside the locked file, holding host, pid, a token and an
  expiry that the holder renews while it holds the lock. A lease whose holder died on this host, or
  that expired long ago (a node that died), is broken and taken. Used where POSIX locks are
  node-local or missing: NFS mounted ``nolock`` or ``local_lock=all|posix``, Lustre ``localflock`` or
  ``noflock`` (which raises ENOSYS), BeeGFS (node-local by default), or any ENOSYS/ENOLCK/EOPNOTSUPP
  from ``lockf``. ``HPCR_LOCK=posix|lease`` forces one.

The first time a process locks in a folder whose locks are node-local it says so, once, with what
to do. Locks are re-entrant within a thread (a transition may call another), and threads of one
process take turns (POSIX locks belong to the process, so they could not tell them apart).

A lock file sits in a folder another process may write (a run dir is writable inside the ``--safe`` sandbox),
so it is opened without following a link (``O_NOFOLLOW``) and without blocking (``O_NONBLOCK``), and only a
regular file is locked: a planted link (``.run.lock`` -> ``~/.bash_profile``) or a named pipe is bad input naming
it, never a file made elsewhere or a hang. The lease file is read the same way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import UserError
from hpc_runner.records.environment import setting
from hpc_runner.records.read import parse_json_text

ENV = "HPCR_LOCK"
LEASE_S = 120.0  # a holder renews its lease every LEASE_S / 3 while it holds the lock
STALE_S = 2 * LEASE_S  # a lease this long past its expiry belongs to a holder that is gone (another node)
_NO_POSIX_LOCKS = (errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP))


class LockTimeout(UserError):
    """Another process held the lock for longer than the caller would wait."""


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mounts: where, what filesystem, with which options."""

    point: str
    fstype: str
    options: tuple[str, ...]


def parse_mounts(text: str) -> list[Mount]:
    """Return the mounts of /proc/self/mounts text (octal escapes such as ``\\040`` decoded)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            point = parts[1].encode().decode("unicode_escape")
            out.append(Mount(point, parts[2], tuple(parts[3].split(","))))
    return out


def mount_of(path: Path, mounts: list[Mount]) -> Mount | None:
    """Return the mount that holds ``path`` (the longest mount point above it)."""
    real = os.path.realpath(path)
    above = [m for m in mounts if real == m.point or real.startswith(m.point.rstrip("/") + "/") or m.point == "/"]
    return max(reversed(above), key=lambda m: len(m.point), default=None)  # the last mount shadows


def _kernel_text(path: str) -> str:
    """A kernel file (the mount table): read through a descriptor, bounded, bad bytes replaced."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        chunks, size = [], 0
        while size < (8 << 20):
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def lock_method(folder: Path, mounts: list[Mount] | None = None, environ: dict | None = None) -> tuple[str, str]:
    """Return (``posix`` or ``lease``, why) for locks of files in ``folder``."""
    forced = setting(ENV, environ)  # a value other than posix or lease is refused, naming it (never ignored)
    if forced:
        return forced, f"{ENV}={forced}"
    if mounts is None:
        try:
            mounts = parse_mounts(_kernel_text("/proc/self/mounts"))
        except OSError:
            return "posix", "no mount table to read"
    m = mount_of(folder, mounts)
    if m is None:
        return "posix", "no mount found"
    opts = set(m.options)
    local_lock = next((o.split("=", 1)[1] for o in opts if o.startswith("local_lock=")), "none")
    if m.fstype.startswith("nfs"):
        if "nolock" in opts:
            return "lease", f"{m.point} is NFS mounted with nolock: its locks do not reach the other nodes"
        if local_lock in ("all", "posix"):
            return "lease", f"{m.point} is NFS mounted with local_lock={local_lock}: its locks stay on this node"
    if m.fstype == "lustre":
        if "localflock" in opts:
            return "lease", f"{m.point} is Lustre mounted with localflock: its locks stay on this node"
        if "noflock" in opts:
            return "lease", f"{m.point} is Lustre mounted with noflock: it has no locks (ENOSYS)"
    if "beegfs" in m.fstype:
        return "lease", f"{m.point} is BeeGFS, whose locks stay on each node unless tuneUseGlobalFileLocks is set"
    return "posix", f"{m.fstype} at {m.point}"


_said: set[str] = set()


def _say_once(why: str) -> None:
    if why not in _said:
        _said.add(why)
        print(f"hpc-runner: note: {why}; sweep locks use a lease file beside sweep.yaml instead (works on any "
              f"shared filesystem; set {ENV}=posix if your site's locks do reach every node)", file=sys.stderr,
              flush=True)


class _Held(threading.local):
    def __init__(self) -> None:
        self.depth: dict[str, int] = {}


_held = _Held()
_process_locks: dict[str, threading.RLock] = {}
_registry_lock = threading.Lock()


def _thread_lock(key: str) -> threading.RLock:
    with _registry_lock:
        return _process_locks.setdefault(key, threading.RLock())


@contextlib.contextmanager
def exclusive(path: Path, timeout: float = 600.0, what: str | None = None,
              sleep: Callable[[float], None] = time.sleep) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (a lock file) for the ``with`` block; LockTimeout after ``timeout``."""
    path = Path(path)
    key = os.path.realpath(path)
    tlock = _thread_lock(key)
    if not tlock.acquire(timeout=timeout):
        raise _timeout(path, timeout, what)
    try:
        if _held.depth.get(key):  # re-entered by the thread that holds it
            _held.depth[key] += 1
            try:
                yield
            finally:
                _held.depth[key] -= 1
            return
        method, why = lock_method(path.parent)
        if method == "lease":
            _say_once(why)
            cm = _lease(path, timeout, what, sleep)
        else:
            cm = _posix(path, timeout, what, sleep)
        with cm:
            _held.depth[key] = 1
            try:
                yield
            finally:
                _held.depth[key] = 0
    finally:
        tlock.release()


def _timeout(path: Path, timeout: float, what: str | None) -> LockTimeout:
    return LockTimeout(f"another hpc-runner process has held {path} for {timeout:g} s",
                       expected=f"the other command (or a job of {what or 'this sweep'}) to finish first")


@contextlib.contextmanager
def _posix(path: Path, timeout: float, what: str | None, sleep: Callable[[float], None]) -> Iterator[None]:
    deadline = time.monotonic() + timeout
    with os.fdopen(_open_lock_file(path), "r+b") as fh:
        while True:
            try:
                fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno in _NO_POSIX_LOCKS:  # Lustre noflock, NFS without lockd: fall back, say so
                    _say_once(f"{path.parent} refuses POSIX locks ({os.strerror(exc.errno)})")
                    with _lease(path, max(0.0, deadline - time.monotonic()), what, sleep):
                        yield
                    return
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise _timeout(path, timeout, what) from None
                sleep(0.05)
        try:
            yield
        finally:
            fcntl.lockf(fh, fcntl.LOCK_UN)


_NO_FOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _open_lock_file(path: Path) -> int:
    """Open (or make) the lock file ``path`` without following a link or blocking; refuse what is not a regular
    file. Return the descriptor."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NO_FOLLOW, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_a_lock_file(path, "a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR):
            raise _not_a_lock_file(path, "not a regular file") from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_a_lock_file(path, "a named pipe" if stat.S_ISFIFO(mode) else "not a regular file")
    return fd


def _not_a_lock_file(path: Path, kind: str) -> UserError:
    return UserError(f"the lock file {path} is {kind}, not the empty file hpc-runner makes; it was not followed or "
                     "opened (something in that folder planted it)", where=str(path),
                     expected=f"{path} removed (hpc-runner makes it again), after checking what else in "
                     f"{path.parent} was changed")


def lease_path(path: Path) -> Path:
    """Return the lease file that stands for the lock on ``path``."""
    return path.with_name(path.name + ".lease")


def _read_lease(lease: Path) -> dict | None:
    try:
        fd = os.open(lease, os.O_RDONLY | _NO_FOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        return {}  # a link or a pipe: judged by its age, never followed
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        data = parse_json_text(os.read(fd, 1 << 16), lease, "lock lease")
    except (OSError, UserError):
        return {}  # being written, or damaged: judged by its age
    finally:
        os.close(fd)
    return data if isinstance(data, dict) else {}


def _holder_gone(data: dict, lease: Path, now: float) -> bool:
    """Whether the lease's holder is certainly gone: a dead pid on this host, or long past its expiry."""
    if data.get("host") == socket.gethostname() and isinstance(data.get("pid"), int):
        try:
            os.kill(data["pid"], 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
    expires = data.get("expires")
    if not isinstance(expires, int | float):
        try:
            expires = lease.stat().st_mtime + LEASE_S
        except OSError:
            return False
    return now > expires + STALE_S - LEASE_S


def _write_lease(lease: Path, token: str, create: bool) -> None:
    body = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": token,
                       "expires": time.time() + LEASE_S}).encode()
    if create:
        fd = os.open(lease, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        return
    tmp = lease.with_name(f"{lease.name}.{token}.renew")
    tmp.write_bytes(body)
    os.replace(tmp, lease)


def _break(lease: Path, seen: dict) -> None:
    """Remove a stale lease; if another process replaced it meanwhile, put theirs back."""
    aside = lease.with_name(f"{lease.name}.stale-{uuid.uuid4().hex}")
    try:
        os.rename(lease, aside)
    except FileNotFoundError:
        return
    moved = _read_lease(aside) or {}
    if moved.get("token") != seen.get("token"):  # not the stale one: a live holder's; restore it
        with contextlib.suppress(OSError):
            os.link(aside, lease)
    with contextlib.suppress(OSError):
        os.unlink(aside)


@contextlib.contextmanager
def _lease(path: Path, timeout: float, what: str | None, sleep: Callable[[float], None]) -> Iterator[None]:
    lease = lease_path(path)
    token = uuid.uuid4().hex
    deadline = time.monotonic() + timeout
    while True:
        try:
            _write_lease(lease, token, create=True)
            break
        except FileExistsError:
            data = _read_lease(lease)
            if data is not None and _holder_gone(data, lease, time.time()):
                _break(lease, data)
                continue
            if time.monotonic() > deadline:
                raise _timeout(path, timeout, what) from None
            sleep(0.05)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(LEASE_S / 3):
            with contextlib.suppress(OSError):
                if (_read_lease(lease) or {}).get("token") == token:
                    _write_lease(lease, token, create=False)

    renewer = threading.Thread(target=renew, name="hpcr-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(timeout=5)
        if (_read_lease(lease) or {}).get("token") == token:
            with contextlib.suppress(OSError):
                os.unlink(lease)
