"""Atomic file writes: a reader sees the old file or the new one, never half of one, even after a crash."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

#: A temp file whose writer cannot be checked (another host, or no pid in its name) is removed once
#: it is this old: no write of ours takes a day.
STALE_TEMP_S = 24 * 3600.0
_HOST = socket.gethostname().replace(".", "_")
_swept: set[Path] = set()  # folders whose stale temp files this process already removed
_swept_lock = threading.Lock()


def _temp_prefix(path: Path) -> str:
    # host and pid in the name: a later writer can tell a killed writer's file from a live one's
    return f".{path.name}.{_HOST}.{os.getpid()}."


_TEMP_NAME = re.compile(r"^\.(?P<target>.+)\.(?P<host>[^.]+)\.(?P<pid>[0-9]+)\.[a-z0-9_]{8}\.tmp\Z")


def _writer_is_gone(name: str, age_s: float) -> bool:
    """Whether ``name`` is a temp file of ours (``.<target>.<host>.<pid>.<random>.tmp``) with no live writer."""
    m = _TEMP_NAME.match(name)
    if m is None:
        return False  # not ours (or written before names carried the pid): leave it alone
    if m["host"] != _HOST:
        return age_s > STALE_TEMP_S  # another node's writer cannot be asked
    pid = int(m["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # alive, another user's
    return age_s > STALE_TEMP_S  # alive, or its pid reused: only when very old


def remove_stale_temp_files(folder: str | os.PathLike) -> list[Path]:
    """Remove the temp files in ``folder`` left by atomic writers that were killed; return them."""
    removed = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        name = entry.name
        if not (name.startswith(".") and name.endswith(".tmp")):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            if _writer_is_gone(name, now - entry.stat(follow_symlinks=False).st_mtime):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:  # gone already (another sweeper), or not ours to remove
            continue
    return removed


def _sweep_once(folder: Path) -> None:
    """The first write of this process into ``folder`` removes what killed writers left there."""
    key = folder.resolve()
    with _swept_lock:
        if key in _swept:
            return
        _swept.add(key)
    remove_stale_temp_files(key)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable: without this a crash can forget it though the data is on disk."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # a platform that cannot open folders (Windows)
    try:
        os.fsync(fd)
    except OSError:
        pass  # some network file systems refuse fsync on a folder; the rename is still atomic
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file beside ``path``; on clean exit fsync it, rename it over ``path`` and fsync the folder.

    The first write of a process into a folder also removes temp files left there by killed writers.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _sweep_once(path.parent)
    binary = "b" in mode
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; results are shared like any other file
        with os.fdopen(fd, mode, encoding=None if binary else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _read_umask() -> int:
    try:  # Linux reports it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)  # elsewhere: read once, at import, before any thread of ours exists
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _umask() -> int:
    return _UMASK


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically and return the path."""
    with atomic_open(path, "w") as f:
        f.write(text)
    return Path(path)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and return the path."""
    with atomic_open(path, "wb") as f:
        f.write(data)
    return Path(path)


def save_atomic(path: str | os.PathLike, save: Callable[[IO], None]) -> Path:
    """Call ``save(fileobj)`` (e.g. ``lambda f: torch.save(obj, f)``) into a temp file, then rename."""
    with atomic_open(path, "wb") as f:
        save(f)
    return Path(path)
