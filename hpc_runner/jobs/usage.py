"""What each point's job used, against what it asked for: from the one scheduler call ``status`` makes.

Per point (its job's last attempt; a packed point shows its task's job, which it shares), from the answer's
``Usage`` (scheduler/job_status.py; each backend parses its accounting into it):

- ``elapsed_s`` against ``time_limit_s``,
- ``cpu_efficiency`` = CPU time / (elapsed x CPUs), 0-1, and ``cpus_used`` = CPU time / elapsed
  (how many CPUs it kept busy on average) against ``cpus`` (allocated),
- ``max_rss_mb`` (peak memory) against ``mem_request_mb`` (the memory asked for),
- ``gpu_util`` (mean %), ``gpu_util_max`` and ``gpu_mem_mb`` (peak): from the scheduler's accounting where the
  site gathers them, else from the samples the job wrote into the run dir (``gpu_usage.jsonl``, see
  resources/gpu_sampler.py) when nvidia-ml-py and a GPU were there.

A figure the scheduler did not record is None (peak memory is sampled now and then: a short job may have none).
Nothing here calls the scheduler: the answer is given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.records.read import read_json_lines
from hpc_runner.scheduler.executor import SchedulerAnswer
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING
from hpc_runner.scheduler.job_status import Usage

MB = 1024 * 1024
GPU_SAMPLES_FILE = "gpu_usage.jsonl"  # hpc_runner.resources.gpu_sampler.SAMPLES_FILE, read without importing it
# the JSON fields ``status --json`` prints for every point (None where unknown)
JSON_FIELDS = ("elapsed_s", "time_limit_s", "cpus", "cpus_used", "cpu_efficiency", "max_rss_mb", "mem_request_mb",
               "gpu_util", "gpu_util_max", "gpu_mem_mb")


@dataclass
class PointUsage:
    """What one point's job used and asked for (None: not recorded)."""

    elapsed_s: float | None = None
    time_limit_s: float | None = None
    cpus: int | None = None
    cpus_used: float | None = None
    cpu_efficiency: float | None = None
    max_rss_mb: float | None = None
    mem_request_mb: float | None = None
    gpu_util: float | None = None
    gpu_util_max: float | None = None
    gpu_mem_mb: float | None = None
    gpu_source: str | None = None  # job_state.FROM_ACCOUNTING or "sampled"
    job_id: str | None = None  # the job it was read from (shared by the points of a packed task)
    node: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the fields ``status --json`` prints, rounded (None where unknown)."""
        out = {k: _round(getattr(self, k)) for k in JSON_FIELDS}  # (not asdict: it deep-copies, 10,000 times)
        if self.gpu_source:
            out["gpu_source"] = self.gpu_source
        return out

    @property
    def empty(self) -> bool:
        """True when nothing was recorded (a job that has not started, a local run)."""
        return all(getattr(self, k) is None for k in JSON_FIELDS)


def _round(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 3) if abs(value) < 10 else round(value, 1)
    return value


def cpu_efficiency(total_cpu_s: float | None, elapsed_s: float | None, cpus: int | None) -> float | None:
    """Return CPU time / (elapsed x CPUs), clipped to 0-1; None when any of them is unknown or zero."""
    if total_cpu_s is None or not elapsed_s or not cpus:
        return None
    return max(0.0, min(1.0, total_cpu_s / (elapsed_s * cpus)))


def from_usage(used: Usage, node: str | None = None) -> PointUsage:
    """Return a point's usage from its job's ``Usage`` (the scheduler's answer) and the node it ran on."""
    elapsed, total_cpu, cpus = used.elapsed_s, used.cpu_time_s, used.cpus or None
    u = PointUsage(elapsed_s=elapsed, time_limit_s=used.time_limit_s, cpus=cpus, node=node)
    if elapsed and cpus and total_cpu is not None:
        u.cpu_efficiency = cpu_efficiency(total_cpu, elapsed, cpus)
        u.cpus_used = total_cpu / elapsed
    if used.memory_request_bytes:
        u.mem_request_mb = used.memory_request_bytes / MB
    if used.peak_memory_bytes is not None:
        u.max_rss_mb = used.peak_memory_bytes / MB
    if used.gpu_util is not None or used.gpu_util_max is not None or used.gpu_memory_bytes is not None:
        u.gpu_util, u.gpu_util_max = used.gpu_util, used.gpu_util_max
        u.gpu_mem_mb = used.gpu_memory_bytes / MB if used.gpu_memory_bytes is not None else None
        u.gpu_source = FROM_ACCOUNTING  # the scheduler's accounting recorded it
    return u


def sampled_gpu(run_dir: Path) -> dict[str, float] | None:
    """Return the mean and peak GPU utilisation (%) and the peak GPU memory (MB) of the run dir's samples
    (``gpu_usage.jsonl``: one JSON line per sample, ``{"t", "gpus": [{"index", "util", "mem_mb"}]}``)."""
    path = os.path.join(run_dir, GPU_SAMPLES_FILE)  # a string: no Path object per point of a 10,000-point collect
    try:  # bounded, a regular file only: status and report read it from a shared sweep folder
        samples = read_json_lines(path, "GPU samples").records  # a line cut by a kill is skipped
    except UserError:
        return None
    utils: list[float] = []
    mems: list[float] = []
    for sample in samples:
        gpus = sample.get("gpus")
        if not isinstance(gpus, list):
            continue
        used = [g for g in gpus if isinstance(g, dict)]
        if not used:
            continue
        # one figure per sample: the mean utilisation of the job's GPUs, and the memory they held together
        u = [float(g["util"]) for g in used if isinstance(g.get("util"), int | float)]
        m = [float(g["mem_mb"]) for g in used if isinstance(g.get("mem_mb"), int | float)]
        if u:
            utils.append(sum(u) / len(u))
        if m:
            mems.append(sum(m))
    if not utils and not mems:
        return None
    return {"gpu_util": sum(utils) / len(utils) if utils else None, "gpu_util_max": max(utils) if utils else None,
            "gpu_mem_mb": max(mems) if mems else None}


def point_usage(state: Any, answer: SchedulerAnswer) -> PointUsage:
    """Return what a point's job used (``state``: a jobs.states.PointState; ``answer``: the status call's)."""
    job_id = getattr(state, "job_id", None)
    used = answer.usage.get(job_id) if job_id else None
    status = answer.status(job_id)
    u = from_usage(used, status.node if status is not None else None) if used is not None else PointUsage()
    u.job_id = job_id
    if u.gpu_source is None and getattr(state, "run_dir", None) is not None:
        sampled = sampled_gpu(state.run_dir)
        if sampled:
            u.gpu_util, u.gpu_util_max = sampled["gpu_util"], sampled["gpu_util_max"]
            u.gpu_mem_mb = sampled["gpu_mem_mb"]
            u.gpu_source = "sampled"
    return u


def usages(states: list[Any], answer: SchedulerAnswer) -> dict[int, PointUsage]:
    """Return each point's usage by index."""
    return {s.index: point_usage(s, answer) for s in states}
