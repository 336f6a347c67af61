"""How many CPUs this process was given: decided here and nowhere else (stdlib and the scheduler's job side only).

Order: the user's explicit setting (``--cpus N``, which sets ``HPCR_CPUS``), then SLURM's grant
(``SLURM_CPUS_PER_TASK``, ``SLURM_TRES_PER_TASK``, else ``SLURM_CPUS_ON_NODE`` inside a job), then the
affinity mask. The result never exceeds the affinity mask, SLURM's grant or a cgroup CPU quota, and
ranks that torchrun started inside one task share it. ``os.cpu_count()`` counts the machine's cores, not
the ones this process may run on: it is used only where there is no affinity call (macOS, Windows).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.errors import ConfigError, UserError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.job_env import cpu_grant

ENV_CPUS = "HPCR_CPUS"
CLI_FLAG = "--cpus"
# value -> who set HPCR_CPUS in this process (--cpus, a local profile), so the record names it, not the shell
_ORIGIN: dict[str, str] = {}
CGROUP_FILES = (Path("/sys/fs/cgroup/cpu.max"), Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"))


@dataclass(frozen=True)
class CpuBudget:
    """The CPUs a process may use: how many, which setting decided it, and the whole reasoning."""

    count: int
    source: str  # "--cpus", "HPCR_CPUS", "SLURM_CPUS_PER_TASK", ..., "affinity"
    detail: str

    def record(self) -> dict[str, object]:
        """Return the fields written to run.yaml under ``cpus``."""
        return {"count": self.count, "source": self.source, "detail": self.detail}


def set_explicit_cpus(count: int, origin: str = CLI_FLAG, environ: dict[str, str] | None = None) -> None:
    """Make ``count`` the explicit CPU setting of this process and of the processes it starts."""
    env = os.environ if environ is None else environ
    env[ENV_CPUS] = str(int(count))
    _ORIGIN.clear()
    _ORIGIN[str(int(count))] = origin


def affinity_cpus() -> tuple[int, str] | None:
    """Return (CPUs in the affinity mask, their ids as text), or None where there is no affinity call."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    ids = sorted(os.sched_getaffinity(0))
    return len(ids), cpu_ranges(ids)


def cpu_ranges(ids: list[int]) -> str:
    """Return CPU ids as a mask in taskset/SLURM style: ``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    parts: list[str] = []
    start = prev = None
    for i in [*ids, None]:
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = i
    return ",".join(parts)


def cgroup_cpu_quota(files: tuple[Path, ...] = CGROUP_FILES) -> tuple[int, str] | None:
    """Return (whole CPUs of the cgroup quota, rounded up, the file) or None when there is no quota."""
    for path in files:
        try:
            text = path.read_text().split()
            if path.name == "cpu.max":  # cgroup v2: "<quota> <period>" or "max <period>"
                quota, period = text[0], text[1]
            else:  # cgroup v1: quota and period in two files, -1 = no quota
                quota, period = text[0], path.with_name("cpu.cfs_period_us").read_text().split()[0]
        except (OSError, IndexError):
            continue
        if quota in ("max", "-1") or int(period) <= 0:
            return None
        return max(1, math.ceil(int(quota) / int(period))), str(path)
    return None


def _explicit(env: Mapping[str, str], explicit: int | None) -> tuple[int, str, str] | None:
    if explicit is not None:
        if int(explicit) < 1:
            raise UserError(f"{CLI_FLAG} {explicit} is not a number of CPUs", expected="a whole number >= 1")
        return int(explicit), CLI_FLAG, f"{CLI_FLAG} {int(explicit)}"
    raw = env.get(ENV_CPUS, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{ENV_CPUS}={raw!r} is not a number of CPUs", where="environment",
                          expected="a whole number >= 1 (or unset it)")
    if (origin := _ORIGIN.get(raw)) is not None:
        return value, origin, f"{origin} {value}"
    return value, ENV_CPUS, f"{ENV_CPUS}={value}"


def decide_cpus(environ: Mapping[str, str] | None = None, explicit: int | None = None) -> CpuBudget:
    """Return the CPUs this process may use: explicit setting, then SLURM's grant, then the affinity mask."""
    env = os.environ if environ is None else environ
    mask = affinity_cpus()
    grant = cpu_grant(env)  # the scheduler's grant to this task (scheduler/job_env.py)
    chosen = _explicit(env, explicit) or grant
    if chosen is None:
        if mask is None:  # no affinity call (macOS, Windows): the one count left
            count = getattr(os, "process_cpu_count", os.cpu_count)() or 1
            chosen = count, "cpu_count", f"{count} CPUs (this platform has no affinity mask)"
        else:
            chosen = mask[0], "affinity", f"affinity mask: {mask[0]} CPUs ({mask[1]})"
    count, source, detail = chosen
    # never more than the CPUs we can run on, nor more than SLURM granted
    caps = []
    if mask is not None and source != "affinity":
        caps.append((mask[0], f"affinity mask {mask[0]} CPUs ({mask[1]})"))
    if grant is not None and grant[1] != source:
        caps.append((grant[0], grant[2]))
    if (quota := cgroup_cpu_quota()) is not None:
        caps.append((quota[0], f"cgroup quota {quota[0]} CPUs ({quota[1]})"))
    for limit, why in caps:
        if limit < count:
            count, detail = limit, f"{detail}, capped by {why}"
    local_ranks = outside_int(env.get("LOCAL_WORLD_SIZE", ""), low=2)
    if env.get("TORCHELASTIC_RUN_ID") and local_ranks is not None:
        # torchrun started these ranks inside one task: they share its CPUs
        count, detail = max(1, count // local_ranks), f"{detail}, shared by {local_ranks} torchrun ranks"
    return CpuBudget(max(1, count), source, detail)
