"""A request without a partition gets one that fits it: the cluster's default when it can hold the job, else
the partition whose nodes and time limit fit with the fewest GPUs to spare (a CPU job is not sent to the GPU
nodes when another partition takes it). A plain function of ``sinfo``'s text, tested on golden outputs."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.profile import ClusterProfile
from hpc_runner.scheduler.slurm.profile_init import SINFO_COMMAND, Partition, limit_minutes, parse_sinfo

SINFO_TIMEOUT_S = 5  # a login node's sinfo answers in milliseconds; a slow one leaves the choice to sbatch


@dataclass(frozen=True)
class Request:
    """What one job asks of a node: its minutes, GPUs, CPUs and nodes."""

    minutes: int
    gpus: int
    cpus: int
    nodes: int

    @classmethod
    def of(cls, profile: ClusterProfile) -> Request:
        """The request a profile makes (GPUs from gpus_per_node, gpus_per_task or a gres ``gpu[:TYPE]:N``)."""
        gpus = int(profile.get("gpus_per_node") or 0) or int(profile.get("gpus_per_task") or 0)
        m = re.search(r"gpu(?::[A-Za-z0-9_.-]+)?:([0-9]+)", str(profile.get("gres") or ""))
        if m and not gpus:
            gpus = int(m.group(1))
        tasks = int(profile.get("ntasks_per_node") or 1)
        return cls(profile.time_minutes(), gpus, int(profile.get("cpus_per_task") or 1) * tasks,
                   int(profile.get("nodes") or 1))


def misfits(part: Partition, request: Request) -> list[str]:
    """Why ``part`` cannot hold ``request`` (empty: it can)."""
    why = []
    limit = limit_minutes(part.time_limit)
    if limit is not None and request.minutes > limit:
        why.append(f"allows {part.time_limit}, the job asks {request.minutes} min")
    if request.gpus > part.gpus:
        why.append(f"has {part.gpus} GPU(s) per node, the job asks {request.gpus}")
    if part.cpus and request.cpus > part.cpus:
        why.append(f"has {part.cpus} CPUs per node, the job asks {request.cpus}")
    if part.nodes and request.nodes > part.nodes:
        why.append(f"has {part.nodes} node(s), the job asks {request.nodes}")
    return why


def choose_partition(partitions: list[Partition], request: Request) -> tuple[str | None, str]:
    """Return (the partition to ask for, why) or (None, "") when the default fits or nothing does (the
    pre-flight's ``sbatch --test-only`` then says why)."""
    up = [p for p in partitions if p.up]
    default = next((p for p in up if p.default), None)
    if default is not None and not misfits(default, request):
        return None, ""
    fitting = [p for p in up if not misfits(p, request)]
    if not fitting:
        return None, ""
    pick = min(fitting, key=lambda p: (p.gpus - request.gpus, limit_minutes(p.time_limit) or 10**9, p.name))
    why = (f"the default partition {default.name} {'; '.join(misfits(default, request))}" if default is not None
           else "the cluster has no default partition")
    return pick.name, f"partition {pick.name} (no partition was named and {why})"


def partition_for(profile: ClusterProfile) -> tuple[str | None, str]:
    """Ask ``sinfo`` and choose for a profile that names no partition; (None, "") when it names one or sinfo
    does not answer."""
    if profile.get("partition"):
        return None, ""
    try:
        res = run_command(SINFO_COMMAND, timeout=SINFO_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None, ""
    if res.returncode != 0:
        return None, ""
    return choose_partition(parse_sinfo(res.stdout), Request.of(profile))
