"""Sample the job's GPUs at a low rate into the run dir, when nvidia-ml-py and a GPU are there.

Sites whose SLURM does not gather GPU usage (``gres/gpuutil``, ``gres/gpumem`` need SLURM >= 23.02 and
AcctGatherGpu) still get it: while a submitted run or sweep point runs, a daemon thread asks NVML every
``HPCR_GPU_SAMPLE_S`` seconds (default 30) for the utilisation and the memory used of the job's GPUs and
appends one JSON line to ``<run dir>/gpu_usage.jsonl``::

    {"t": 1764100000.0, "gpus": [{"index": 0, "util": 87, "mem_mb": 10342.0}]}

Without the library (``pip install nvidia-ml-py``), without a GPU, with ``CUDA_VISIBLE_DEVICES`` empty,
or with ``HPCR_GPU_SAMPLE_S=0``: nothing is sampled and nothing fails (``plan`` says why). jobs/usage.py
reads the file when sacct has no GPU figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.records.numbers import is_ascii_digits

SAMPLES_FILE = "gpu_usage.jsonl"
INTERVAL_ENV = "HPCR_GPU_SAMPLE_S"
DEFAULT_INTERVAL_S = 30.0
MAX_SAMPLES = 20_000  # a week at 30 s: the file stays small whatever the run's length

Reader = Callable[[], list[dict[str, Any]]]  # one sample: [{"index", "util", "mem_mb"}, ...]


@dataclass
class SamplingPlan:
    """Whether to sample, which GPUs (NVML indices or UUIDs; None: all it sees), how often, and why not."""

    sample: bool
    devices: list[str] | None = None
    interval_s: float = DEFAULT_INTERVAL_S
    reason: str = ""


def interval_s(environ: Mapping[str, str]) -> float:
    """Return the sampling interval (``HPCR_GPU_SAMPLE_S``; 0 or less turns sampling off)."""
    raw = environ.get(INTERVAL_ENV, "").strip()
    try:
        return float(raw) if raw else DEFAULT_INTERVAL_S
    except ValueError:
        return DEFAULT_INTERVAL_S


def plan(environ: Mapping[str, str], have_library: bool, gpu_count: int) -> SamplingPlan:
    """Decide whether to sample: the library imports, NVML counts a GPU, the job may use one, not turned off."""
    every = interval_s(environ)
    if every <= 0:
        return SamplingPlan(False, reason=f"{INTERVAL_ENV}={environ.get(INTERVAL_ENV)} turns sampling off")
    if not have_library:
        return SamplingPlan(False, reason="nvidia-ml-py is not installed")
    if gpu_count <= 0:
        return SamplingPlan(False, reason="no GPU")
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return SamplingPlan(True, None, every, f"all {gpu_count} GPU(s)")
    devices = [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    if not devices:
        return SamplingPlan(False, reason="CUDA_VISIBLE_DEVICES is empty: the job uses no GPU")
    return SamplingPlan(True, devices, every, f"GPU(s) {','.join(devices)}")


def _nvml() -> Any:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    return pynvml


def nvml_reader(pynvml: Any, devices: list[str] | None) -> Reader | None:
    """Return a function that reads one sample of ``devices`` through NVML (None when NVML cannot start)."""
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception:  # no driver, or no GPU: nothing to sample
        return None
    handles = []
    for d in devices if devices is not None else [str(i) for i in range(count)]:
        with contextlib.suppress(Exception):  # a device NVML cannot open (another job's): left out
            if is_ascii_digits(d):
                handles.append((int(d), pynvml.nvmlDeviceGetHandleByIndex(int(d))))
            else:
                handles.append((d, pynvml.nvmlDeviceGetHandleByUUID(d)))
    if not handles:
        return None

    def read() -> list[dict[str, Any]]:
        out = []
        for index, h in handles:
            with contextlib.suppress(Exception):
                util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
                mem = pynvml.nvmlDeviceGetMemoryInfo(h).used / 1024 / 1024
                out.append({"index": index, "util": int(util), "mem_mb": round(float(mem), 1)})
        return out

    return read


class GpuSampler:
    """A daemon thread that appends one sample line every ``interval_s`` (and one at stop) to the run dir."""

    def __init__(self, run_dir: str | Path, read: Reader, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self.path = Path(run_dir) / SAMPLES_FILE
        self.read, self.interval_s, self.clock = read, float(interval_s), clock
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hpcr-gpu-sampler", daemon=True)

    def sample(self) -> None:
        """Read the GPUs once and append the line (a failed read or write is skipped: sampling never fails)."""
        if self.samples >= MAX_SAMPLES:
            return
        with contextlib.suppress(Exception):
            gpus = self.read()
            if not gpus:
                return
            line = json.dumps({"t": round(self.clock(), 1), "gpus": gpus}) + "\n"
            with open(self.path, "a", encoding="utf-8") as f:  # one short line per write: a log, not a record
                f.write(line)
            self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> GpuSampler:
        """Start sampling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take the last sample and stop the thread."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()


@contextlib.contextmanager
def sampling(run_dir: str | Path, environ: Mapping[str, str] | None = None) -> Iterator[GpuSampler | None]:
    """Sample the job's GPUs into ``run_dir`` while the block runs, when ``plan`` says so (else yield None)."""
    environ = os.environ if environ is None else environ
    pynvml = _nvml()
    count = 0
    if pynvml is not None:
        with contextlib.suppress(Exception):
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
    decided = plan(environ, pynvml is not None, count)
    read = nvml_reader(pynvml, decided.devices) if decided.sample else None
    if read is None:
        yield None
        return
    sampler = GpuSampler(run_dir, read, decided.interval_s).start()
    try:
        yield sampler
    finally:
        sampler.stop()
