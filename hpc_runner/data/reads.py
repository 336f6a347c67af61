"""The file loads of a run: bounded per node when they read shared storage, and counted, per load.

The file-reading transforms of a chain (MONAI's ``LoadImage``/``LoadImaged``, or any transform with a true
``reads_files`` attribute) run through :func:`call_reading` (``TimedCompose`` does it for each of them):

* **counted**: the sizes of the files each call loads (the values of the keys a ``LoadImaged`` loads, the path a
  ``LoadImage`` is given; a folder such as a DICOM series counts its files), per load, not once per file; loads
  of a file that is not under a staged copy count as read from shared storage. The runner writes the counts to
  ``data_io.json`` when the run ends (``staging.record_loads``);
* **bounded**: a load from shared storage holds one of the node's read slots for the call (the lock files
  ``read-slot-<i>`` that staging's copies use: in the stage folder with ``--stage``, else in
  ``$HPCR_READ_SLOT_DIR`` or ``/tmp/hpcr-read-slots-<uid>``), so a node has at most ``read_slots`` (default 4;
  ``HPCR_READ_SLOTS``, or ``--read-slots`` with ``--stage``) files open on shared storage at once, whatever the
  number of tasks on it or their transform threads. ``HPCR_READ_SLOTS=0`` turns the bound off.

The policy is the process's (``configure``, set by the runner at a run's start from where its data is read);
loads in torch worker processes (``num_workers > 0`` without ``use_thread_workers``) are bounded when the worker
was forked after ``configure`` but their counts stay in the worker and are not reported.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.data.staging import read_slot
from hpc_runner.records.numbers import require_int

SLOTS_ENV = "HPCR_READ_SLOTS"
DIR_ENV = "HPCR_READ_SLOT_DIR"
DEFAULT_SLOTS = 4
_FOLDER_FILES = 10_000  # a folder given as one image (a DICOM series): at most this many of its files counted


@dataclass(frozen=True)
class ReadPolicy:
    """How this process's loads are bounded: ``slots`` lock files in ``root``; loads under ``local`` are free."""

    slots: int
    root: Path | None
    local: tuple[str, ...] = ()

    def is_local(self, path: str) -> bool:
        return any(path == p or path.startswith(p + os.sep) for p in self.local)


_policy: ReadPolicy | None = None
_lock = threading.Lock()
_counts = {"loads": 0, "loaded_bytes": 0, "shared_loads": 0, "shared_load_bytes": 0}


def configure(policy: ReadPolicy | None) -> None:
    """Set this process's read policy (None: count only, no bound) and start the counts again."""
    global _policy
    with _lock:
        _policy = policy
        for key in _counts:
            _counts[key] = 0


def snapshot() -> dict[str, int]:
    """The loads counted since ``configure``: loads, loaded_bytes, shared_loads, shared_load_bytes."""
    with _lock:
        return dict(_counts)


def slots_from_env(default: int = DEFAULT_SLOTS) -> int:
    """``HPCR_READ_SLOTS`` (0 turns the bound off), else ``default``; a UserError naming a bad value."""
    text = os.environ.get(SLOTS_ENV)
    if text is None or not text.strip():
        return default
    return require_int(text, SLOTS_ENV, "read slots", low=0, high=256)


def default_slot_dir() -> Path:
    """``$HPCR_READ_SLOT_DIR``, else ``/tmp/hpcr-read-slots-<uid>`` (node-local on every cluster node)."""
    given = os.environ.get(DIR_ENV)
    return Path(given) if given else Path("/tmp") / f"hpcr-read-slots-{os.getuid()}"


def slot_folder(folder: Path) -> Path | None:
    """Make ``folder`` (private) and return it; None when it is a link or cannot be made (the bound is then off)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or not os.access(folder, os.W_OK | os.X_OK):
        return None
    return folder


def policy_for_run(settings: Any, stage_dir: str | None, local: Iterable[str]) -> ReadPolicy:
    """The read policy of a run: its stage settings' read_slots (or ``HPCR_READ_SLOTS``), the stage folder's slots
    (or the node's default folder), and the staged copies it reads as local."""
    slots = settings.read_slots if settings is not None else slots_from_env()
    root = slot_folder(Path(stage_dir)) if stage_dir else None
    if root is None and slots:
        root = slot_folder(default_slot_dir())
    return ReadPolicy(slots, root, tuple(os.path.realpath(p) for p in local))


def is_reader(transform: Any) -> bool:
    """Whether ``transform`` reads files: MONAI's LoadImage/LoadImaged, or ``reads_files = True``."""
    flag = getattr(transform, "reads_files", None)
    if isinstance(flag, bool):
        return flag
    from monai.transforms import LoadImage, LoadImaged

    return isinstance(transform, (LoadImage, LoadImaged))


def _paths(value: Any, out: list[str]) -> None:
    if isinstance(value, (str, os.PathLike)):
        out.append(os.fspath(value))
    elif isinstance(value, (list, tuple)):
        for v in value[:1000]:
            _paths(v, out)


def paths_of(transform: Any, data: Any) -> list[str]:
    """The files a call of ``transform`` on ``data`` loads: the values of its keys, or ``data`` itself."""
    out: list[str] = []
    keys = getattr(transform, "keys", None)
    if isinstance(data, dict) and keys is not None:
        for key in keys if isinstance(keys, (list, tuple)) else (keys,):
            if key in data:
                _paths(data[key], out)
    else:
        _paths(data, out)
    return out


def size_of(path: str) -> int:
    """The bytes a load of ``path`` reads: a file's size, a folder's files' sizes (a series), 0 if missing."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return 0
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    if not stat.S_ISDIR(st.st_mode):
        return 0
    total = 0
    try:
        with os.scandir(path) as entries:
            for i, entry in enumerate(entries):
                if i >= _FOLDER_FILES:
                    break
                if entry.is_file(follow_symlinks=True):
                    total += entry.stat().st_size
    except OSError:
        pass
    return total


def call_reading(call: Callable[[], Any], transform: Any, data: Any) -> Any:
    """Run ``call`` (one file-reading transform on ``data``), counting the bytes it loads and, for loads from
    shared storage, holding one of the node's read slots meanwhile."""
    policy = _policy
    paths = paths_of(transform, data)
    sizes = [size_of(p) for p in paths]
    if policy is not None and policy.local:
        shared = [s for p, s in zip(paths, sizes) if not policy.is_local(os.path.realpath(p))]
    else:
        shared = sizes
    if policy is not None and policy.slots and policy.root is not None and shared:
        try:
            with read_slot(policy.root, policy.slots):
                out = call()
        except OSError as exc:
            if exc.filename is None or not str(exc.filename).startswith(str(policy.root)):
                raise
            out = call()  # a slot file that cannot be opened: read without the bound rather than fail the run
    else:
        out = call()
    with _lock:
        _counts["loads"] += len(paths)
        _counts["loaded_bytes"] += sum(sizes)
        _counts["shared_loads"] += len(shared)
        _counts["shared_load_bytes"] += sum(shared)
    return out

