"""Datasets that cache the deterministic prefix of a transform chain: in memory, or in a shared folder.

`CachedDataset(data, transform, cache_dir=None, ...)` is what a bundle names in `_target_`: with
`cache_dir: null` it is MONAI's in-memory `CacheDataset`; with a folder it is `PersistentCacheDataset`,
a persistent cache that many jobs (the points of a sweep, the ranks of a DDP run) can fill and read at
once. The bundle switches with one override (``--cache_dir /scratch/$USER/hpcr-cache``).

Layout: ``<cache_dir>/<transform key[:16]>/<item key>.pt`` plus ``transforms.json`` describing the
cached transforms. The transform key hashes every cached transform with its arguments and the MONAI
version; the item key hashes the data list item and the size and mtime of the files it names (see
`hpc_runner.data.cache_key`). A changed transform, argument or input file therefore gets new files;
nothing stale is ever read. Old folders are left for the user to delete.

Concurrency: an item file is written to a temp file in the same folder, fsynced, then published with
``os.link`` (write-once: an existing file is never replaced under a reader, which NFS would turn into
ESTALE) or, where hard links are not supported, ``os.replace``. A per-item ``flock`` keeps two jobs from
computing the same item; it is only an optimisation, so a filesystem without locks stays correct.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from copy import deepcopy
from dataclasses import asdict, dataclass
from multiprocessing.pool import ThreadPool
from pathlib import Path
from typing import Any

import torch
from monai.data import CacheDataset, Dataset
from monai.transforms import Compose, convert_to_contiguous, reset_ops_id
from monai.utils import convert_to_tensor, optional_import

from hpc_runner.data.cache_key import cache_split, describe, item_key, transform_key, transform_name
from hpc_runner.data.transform_timing import timed
from hpc_runner.data.workers import cache_fill_workers

tqdm, has_tqdm = optional_import("tqdm", name="tqdm")

MANIFEST = "transforms.json"
TEMP_SUFFIX = ".tmp"
LOCK_SUFFIX = ".lock"
# a temp file this old belongs to a job that died while writing it
STALE_TEMP_S = 3600.0
log = logging.getLogger("hpc_runner.data.cache")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # mkstemp makes 0600; a shared cache must be readable like any other file


@dataclass
class FillStats:
    """What filling a persistent cache did."""

    items: int = 0
    computed: int = 0
    reused: int = 0
    recomputed_corrupt: int = 0
    seconds: float = 0.0
    bytes: int = 0
    folder: str = ""
    waited_for_others: int = 0

    def to_dict(self) -> dict:
        """Return a JSON-ready dict."""
        return asdict(self)


def publish_once(tmp: Path, final: Path) -> bool:
    """Move the finished temp file to ``final`` unless a file is already there; return True if ours was used."""
    try:
        os.link(tmp, final)
        return True
    except FileExistsError:
        return False  # another job published the same item first: keep its file, readers may hold it open
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV, errno.ENOSYS):
            raise
    # no hard links here (some FUSE/SMB mounts): rename is still atomic; a rare double write replaces
    # one complete file by an identical one
    if final.exists():
        return False
    os.replace(tmp, final)
    return True


def save_item_atomic(obj: Any, final: Path) -> bool:
    """torch.save ``obj`` into a temp file beside ``final``, fsync it and publish it once; True if ours won."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=TEMP_SUFFIX, dir=final.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        return publish_once(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def item_lock(path: Path, wait: bool):
    """Hold an exclusive flock on ``path`` (yield True), or yield False if another holder has it and not ``wait``.

    Where the filesystem has no flock the body runs unlocked: publishing is write-once either way.
    """
    import fcntl

    try:
        # read-only is enough for flock, and works on a lock file another user of the group created
        fd = os.open(path, os.O_CREAT | os.O_RDONLY, _FILE_MODE)
    except PermissionError:
        yield True  # cannot lock here; publishing is write-once either way
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        except OSError:
            pass  # ENOLCK / ENOSYS (e.g. Lustre without -o flock): correctness does not depend on it
        yield True
    finally:
        os.close(fd)


def prune_stale_temps(folder: Path, older_than_s: float = STALE_TEMP_S) -> int:
    """Delete what killed jobs left in ``folder`` more than ``older_than_s`` ago; return how many files.

    That is temp files, and lock files of items that exist (a job died between publishing and unlocking).
    """
    removed = 0
    now = time.time()
    stale = [*folder.glob(f".*{TEMP_SUFFIX}")]
    stale += [p for p in folder.glob(f"*{LOCK_SUFFIX}") if p.with_name(p.name[: -len(LOCK_SUFFIX)]).is_file()]
    for p in stale:
        with contextlib.suppress(FileNotFoundError):
            if now - p.stat().st_mtime > older_than_s:
                p.unlink()
                removed += 1
    return removed


def nbytes(obj: Any) -> int:
    """Return the bytes held by the tensors and arrays in ``obj`` (dicts, lists and tuples are walked)."""
    if isinstance(obj, torch.Tensor):
        return obj.element_size() * obj.numel()
    if hasattr(obj, "nbytes") and hasattr(obj, "dtype"):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    return 0


def _as_compose(transform: Any) -> Compose:
    return transform if isinstance(transform, Compose) else Compose(transform)


class PersistentCacheDataset(Dataset):
    """A persistent cache of the deterministic prefix, safe to share between concurrent jobs.

    The prefix is the transforms before the first random one (MONAI's rule, as in `CacheDataset`).
    All cached items are filled when the dataset is built (a progress bar shows it); files already in
    the folder are reused. Each epoch reads the item files and runs the rest of the chain. With
    ``keep_in_memory`` the files are read once and kept, as `CacheDataset` keeps its items.
    """

    def __init__(
        self,
        data: Sequence,
        transform: Sequence[Callable] | Callable,
        cache_dir: str | os.PathLike,
        cache_num: int = sys.maxsize,
        cache_rate: float = 1.0,
        num_workers: int | None = 1,
        progress: bool = True,
        copy_cache: bool = True,
        track_meta: bool = False,
        hash_files: bool = True,
        keep_in_memory: bool = False,
    ) -> None:
        super().__init__(data=data, transform=_as_compose(transform))
        self.cache_dir = Path(cache_dir).expanduser()
        self.set_num = cache_num
        self.set_rate = cache_rate
        self.num_workers = cache_fill_workers(num_workers)
        self.progress = progress
        self.copy_cache = copy_cache
        self.track_meta = track_meta
        self.hash_files = hash_files
        self.keep_in_memory = keep_in_memory
        self.split = cache_split(self.transform)
        self.cached_transforms = list(self.transform.transforms[: self.split])
        self.key = transform_key(self.cached_transforms, extra={"track_meta": bool(track_meta)})
        self.folder = self.cache_dir / self.key[:16]
        self.stats = FillStats(folder=str(self.folder))
        self._keys: list[str] = []
        self._memory: list[Any] | None = None
        self._corrupt_lock = threading.Lock()
        self.set_data(data)

    # -- filling -------------------------------------------------------------------------------------

    def set_data(self, data: Sequence) -> None:
        """Set the data list and fill the cache for it (files of other data lists are kept)."""
        self.data = data
        n = len(data)
        self.cache_num = min(int(self.set_num), int(n * self.set_rate), n)
        self._keys = [item_key(data[i], hash_files=self.hash_files) for i in range(self.cache_num)]
        self._memory = None
        if self.cache_num > 0:
            self.stats = s = self.fill()
            line = (f"cache {self.folder}: {s.items} item{'' if s.items == 1 else 's'}, {s.computed} computed, "
                    f"{s.reused} already there ({s.seconds:.1f} s)")
            log.info("%s", line)
            if self.progress:  # on stdout, so a run's log.txt records whether the cache was reused
                print(f"hpc-runner: {line}", flush=True)
            if self.keep_in_memory:
                with ThreadPool(self.num_workers) as pool:
                    self._memory = list(pool.imap(self._load, range(self.cache_num)))

    def item_path(self, index: int) -> Path:
        """Return the cache file of item ``index``."""
        return self.folder / f"{self._keys[index]}.pt"

    def missing(self) -> list[int]:
        """Return the indices of cached items whose file is not (yet) in the folder."""
        return [i for i in range(self.cache_num) if not self.item_path(i).is_file()]

    def _write_manifest(self) -> None:
        path = self.folder / MANIFEST
        if path.is_file():
            return
        import monai

        text = json.dumps(
            {
                "key": self.key,
                "monai": monai.__version__,
                "transforms": [transform_name(t) for t in self.cached_transforms],
                "track_meta": self.track_meta,
                "description": [describe(t) for t in self.cached_transforms],
            },
            indent=1,
        )
        fd, tmp = tempfile.mkstemp(prefix=f".{MANIFEST}.", suffix=TEMP_SUFFIX, dir=self.folder)
        try:
            os.fchmod(fd, _FILE_MODE)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            publish_once(Path(tmp), path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    def fill(self) -> FillStats:
        """Compute and write every cached item that is missing; return what was done."""
        start = time.perf_counter()
        stats = FillStats(items=self.cache_num, folder=str(self.folder))
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_manifest()
        prune_stale_temps(self.folder)
        bar = None
        if self.progress and has_tqdm:
            bar = tqdm(total=self.cache_num, desc=f"Caching to {self.folder}", leave=True)
        lock = threading.Lock()

        def done(status: str | None, index: int) -> None:
            with lock:
                if status == "computed":
                    stats.computed += 1
                elif status == "reused":
                    stats.reused += 1
                if status is not None and bar is not None:
                    bar.update(1)

        try:
            present = [i for i in range(self.cache_num) if self.item_path(i).is_file()]
            for i in present:
                done("reused", i)
            todo = sorted(set(range(self.cache_num)) - set(present))
            # first pass: skip items another job is computing; second pass: wait for them
            busy = []
            with ThreadPool(self.num_workers) as pool:
                for i, status in zip(todo, pool.imap(lambda i: self._ensure(i, wait=False), todo)):
                    if status is None:
                        busy.append(i)
                    done(status, i)
                stats.waited_for_others = len(busy)
                for i, status in zip(busy, pool.imap(lambda i: self._ensure(i, wait=True), busy)):
                    done(status, i)
        finally:
            if bar is not None:
                bar.close()
        stats.seconds = time.perf_counter() - start
        stats.bytes = sum(p.stat().st_size for i in range(self.cache_num) if (p := self.item_path(i)).is_file())
        return stats

    def _ensure(self, index: int, wait: bool) -> str | None:
        """Make sure item ``index`` is on disk: "reused", "computed", or None if another job holds it."""
        final = self.item_path(index)
        if final.is_file():
            return "reused"
        lock_path = final.with_name(final.name + LOCK_SUFFIX)
        with item_lock(lock_path, wait) as held:
            if not held:
                return None
            if final.is_file():
                status = "reused"
            else:
                save_item_atomic(self._storable(self._compute(index)), final)
                status = "computed"
            # only after the file exists, so the lock still excludes everyone while it does not
            with contextlib.suppress(FileNotFoundError):
                lock_path.unlink()
        return status

    def _compute(self, index: int) -> Any:
        item = self.transform(deepcopy(self.data[index]), end=self.split, threading=True)
        reset_ops_id(item)
        return item

    def _storable(self, item: Any) -> Any:
        item = convert_to_tensor(item, convert_numeric=False, track_meta=self.track_meta)
        return convert_to_contiguous(item, memory_format=torch.contiguous_format)

    # -- reading -------------------------------------------------------------------------------------

    def _load(self, index: int) -> Any:
        path = self.item_path(index)
        try:
            return torch.load(path, weights_only=True)
        except FileNotFoundError:
            pass  # deleted under us (a user cleaning the cache): compute it again
        except Exception as exc:  # a file that does not load is never used; it is replaced
            with self._corrupt_lock:
                warnings.warn(f"cache file {path} does not load ({type(exc).__name__}: {exc}); recomputing it",
                              stacklevel=2)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                self.stats.recomputed_corrupt += 1
        self._ensure(index, wait=True)
        return torch.load(path, weights_only=True)

    def _transform(self, index: int) -> Any:
        index = index % len(self) if len(self) else index
        if index >= self.cache_num:
            return super()._transform(index)
        if self._memory is not None:
            data = self._memory[index]
            data = deepcopy(data) if self.copy_cache else data
        else:
            data = self._load(index)
        if self.split < len(self.transform.transforms):
            data = self.transform(data, start=self.split)
        return data


class CachedDataset(Dataset):
    """Cache the deterministic prefix in memory (``cache_dir=None``: MONAI `CacheDataset`) or in ``cache_dir``.

    With a folder, the cache is a `PersistentCacheDataset`: filled once (by ``hpc-runner cache`` or the
    first job), keyed by the data item and the cached transforms with their arguments, and safe to
    share between concurrent jobs. ``.dataset`` is the dataset doing the work; ``.mode`` is
    ``"memory"`` or ``"persistent"``.
    """

    def __init__(
        self,
        data: Sequence,
        transform: Sequence[Callable] | Callable,
        cache_dir: str | os.PathLike | None = None,
        cache_num: int = sys.maxsize,
        cache_rate: float = 1.0,
        num_workers: int | None = 1,
        progress: bool = True,
        copy_cache: bool = True,
        track_meta: bool = False,
        hash_files: bool = True,
        keep_in_memory: bool = False,
    ) -> None:
        # timed: summary.json's per-transform times (hpc_runner.data.transform_timing)
        transform = timed(_as_compose(transform))
        if cache_dir is None or str(cache_dir).strip() in ("", "null", "None"):
            self.mode = "memory"
            # MONAI would take os.cpu_count() for None: the machine's cores, not this job's
            self.dataset: Dataset = CacheDataset(
                data, transform, cache_num=cache_num, cache_rate=cache_rate,
                num_workers=cache_fill_workers(None) if num_workers is None else num_workers,
                progress=progress, copy_cache=copy_cache,
            )
        else:
            self.mode = "persistent"
            self.dataset = PersistentCacheDataset(
                data, transform, cache_dir, cache_num=cache_num, cache_rate=cache_rate, num_workers=num_workers,
                progress=progress, copy_cache=copy_cache, track_meta=track_meta, hash_files=hash_files,
                keep_in_memory=keep_in_memory,
            )
        # no transform attribute of its own: per-thread copies and reseeding (hpc_runner.data.seeding)
        # must find the one chain that runs, in .dataset
        self.data = data

    @property
    def transform(self) -> Compose:
        """The transform chain of the dataset doing the work."""
        return self.dataset.transform

    @transform.setter
    def transform(self, value: Any) -> None:
        self.dataset.transform = _as_compose(value)

    @property
    def cache_dir(self) -> Path | None:
        """The persistent cache folder, or None for the in-memory cache."""
        return getattr(self.dataset, "cache_dir", None)

    def __len__(self) -> int:
        return len(self.dataset)

    def _transform(self, index: int) -> Any:
        return self.dataset._transform(index)

    def set_data(self, data: Sequence) -> None:
        """Replace the data list and refill the cache."""
        self.data = data
        self.dataset.set_data(data)
