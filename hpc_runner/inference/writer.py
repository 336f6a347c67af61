"""Writes outputs in the background while the next volume is inferred: a bounded queue and a small thread pool.

Each write, in a pool thread: encode_nifti (gzip releases the GIL), write to a temp file in the same folder
(``.<file>.<host>.<pid>.<random>.tmp``: nothing globbing ``*.nii.gz`` sees it), flush + fsync, rename to the
final name, fsync the folder, then one manifest line with the size and sha256. A killed process leaves at
most temp files, which the next writer in that folder removes; never a truncated file under its final name.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType

import numpy as np

from hpc_runner.inference.manifest import ManifestEntry, OutputManifest
from hpc_runner.inference.nifti import encode_nifti
from hpc_runner.records.atomic import atomic_open, remove_stale_temp_files
from hpc_runner.resources.cpus import decide_cpus

log = logging.getLogger(__name__)


class WriteError(RuntimeError):
    """An output could not be written; the message names the output file and the cause."""


def default_threads() -> int:
    """Return min(2, the job's CPU budget): writing must not take CPUs the job was not given."""
    return max(1, min(2, decide_cpus().count))


class ResultWriter:
    """Writes outputs in the background: a bounded queue and a small thread pool (concurrent.futures)."""

    def __init__(self, folder: Path, manifest: OutputManifest | None = None, *, compress_level: int = 1,
                 threads: int | None = None, queue_size: int = 4) -> None:
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        if not 0 <= compress_level <= 9:
            raise ValueError(f"compress_level must be 0..9, got {compress_level}")
        self.folder = Path(folder)
        self.manifest = manifest
        self.compress_level = compress_level
        self.threads = threads or default_threads()
        self.queue_size = queue_size
        self.folder.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_files(self.folder)  # what a killed writer left here
        self._slots = threading.BoundedSemaphore(queue_size)
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="hpcr-writer")
        self._lock = threading.Lock()
        self._futures: list[Future[None]] = []
        self._error: WriteError | None = None
        self._closed = False
        self.written = 0
        self.bytes = 0
        self.busy_s = 0.0
        self.wait_s = 0.0

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, case: str, filename: str, array: np.ndarray, affine: np.ndarray,
               metrics: dict | None = None) -> None:
        """Queue one output; blocks while queue_size writes are pending; raises WriteError (naming the file) as
        soon as an earlier write has failed. The array is not copied: do not change it afterwards."""
        if self._closed:
            raise RuntimeError("ResultWriter.submit after close()")
        self._raise_if_failed()
        t = time.perf_counter()
        self._slots.acquire()
        self.wait_s += time.perf_counter() - t
        try:
            self._raise_if_failed()
            future = self._pool.submit(self._write, case, filename, array, affine, dict(metrics or {}))
        except BaseException:
            self._slots.release()
            raise
        future.add_done_callback(lambda _f: self._slots.release())
        with self._lock:
            self._futures = [f for f in self._futures if not f.done()] + [future]

    def _write(self, case: str, filename: str, array: np.ndarray, affine: np.ndarray, metrics: dict) -> None:
        path = self.folder / filename
        t = time.perf_counter()
        try:
            data = encode_nifti(array, affine, self.compress_level)
            with atomic_open(path, "wb") as f:
                f.write(data)
            entry = ManifestEntry(case, filename, len(data), hashlib.sha256(data).hexdigest(), metrics)
            if self.manifest is not None:
                self.manifest.record(entry)
        except Exception as err:
            error = WriteError(f"{path}: could not write the output of case {case!r}: {type(err).__name__}: {err}")
            log.error("%s", error, exc_info=err)
            # kept without its traceback: the frames would keep this array alive until close()
            error.__cause__ = err.with_traceback(None)
            with self._lock:
                if self._error is None:
                    self._error = error
            return
        finally:
            with self._lock:
                self.busy_s += time.perf_counter() - t
        with self._lock:
            self.written += 1
            self.bytes += len(data)

    def record_only(self, case: str, metrics: dict) -> None:
        """Record a case with metrics but no file (evaluation without predictions)."""
        self._raise_if_failed()
        if self.manifest is not None:
            self.manifest.record(ManifestEntry(case, None, None, None, dict(metrics)))

    def close(self) -> None:
        """Wait for every queued write; raise the first WriteError. Idempotent."""
        if not self._closed:
            self._closed = True
            self._pool.shutdown(wait=True)
        self._raise_if_failed()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.close()
            return
        try:  # the body failed: still finish what was queued, but the body's error is the one raised
            self.close()
        except WriteError as write_error:
            exc.add_note(f"also: {write_error}")
