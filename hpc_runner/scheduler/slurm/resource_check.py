"""Ask the scheduler whether a job could ever start, before it is queued: ``sbatch --test-only``.

The script tested is the one submitit would submit (``executor.sbatch_script`` with the same
parameters, and the array size), so partition, time, nodes, CPUs, memory, GPUs/gres, account, qos
and constraint are judged by SLURM itself. ``--test-only`` queues nothing and writes nothing. An
impossible request (a partition that does not exist, three GPUs on a node with two, a time above the
partition's limit) is refused with the scheduler's own reason; one call per distinct script.
When ``sbatch`` is missing or does not answer in time, nothing is refused here: the real
submission reports it.
"""

from __future__ import annotations

import subprocess
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.profile import ClusterProfile
from hpc_runner.scheduler.slurm.cluster_info import NO_CONTROLLER, controller_problem

_ANSWERS: dict[str, str | None] = {}  # script -> refusal (None: it could start); one call per distinct script
_PREFIXES = ("sbatch: error: ", "sbatch: ", "error: ")


def sbatch_refusal(script: str, timeout: float = 60) -> str | None:
    """Return why ``sbatch --test-only`` refuses ``script`` (its own words), or None when it could start."""
    if script in _ANSWERS:
        return _ANSWERS[script]
    try:
        res = run_command(["sbatch", "--test-only"], input=script, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None  # no answer is not a refusal
    reason = None
    if res.returncode != 0:
        lines: list[str] = []
        for line in (res.stderr + "\n" + res.stdout).splitlines():
            line = line.strip()
            for prefix in _PREFIXES:
                line = line.removeprefix(prefix)
            if line and line not in lines:
                lines.append(line)
        reason = "; ".join(lines)[:600] or f"sbatch --test-only exited {res.returncode}"
    _ANSWERS[script] = reason
    return reason


_SHOWN = ("partition", "nodes", "ntasks_per_node", "cpus_per_task", "gpus_per_node", "gpus_per_task", "gres", "mem",
          "mem_per_gpu", "time", "account", "qos", "constraint")


def requested(parameters: dict[str, Any]) -> str:
    """Return the resources asked for, as ``partition=gpu time=60 ...`` (time in minutes)."""
    return " ".join(f"{k}={parameters[k]}" for k in _SHOWN if parameters.get(k) not in (None, ""))


def check_resources(profile: ClusterProfile, script: str, parameters: dict[str, Any], *, what: str) -> None:
    """Raise ClusterError with sbatch's reason when the job ``what`` (its ``script``) could never start."""
    reason = sbatch_refusal(script)
    if reason:
        silent = unanswered(profile)
        if silent is not None:
            raise silent
        raise ClusterError(
            f"pre-flight: the scheduler refuses {what} (profile {profile.name}: {requested(parameters)}), nothing "
            f"was submitted: sbatch --test-only says: {reason}",
            where=profile.where,
            expected="resources the cluster can give (partition, GPUs, time limit, account, qos in the cluster "
            "profile or --slurm KEY=VALUE)",
            hint="`sinfo -s` lists the partitions and their time limits; --no-preflight skips this check",
        )


def unanswered(profile: ClusterProfile) -> ClusterError | None:
    """The error for a refusal that is no refusal: the profile's controller does not answer ``scontrol ping``
    (sbatch then prints DNS and socket lines that say nothing about the job); None when it answers, or when
    scontrol cannot be asked (no answer is not a proof)."""
    problem = controller_problem(timeout=5.0)
    if problem is None or not problem.startswith(("no SLURM controller", "there is no SLURM")):
        return None
    return ClusterError(
        f"{NO_CONTROLLER} for profile {profile.name} ({problem}); nothing was submitted",
        where=profile.where,
        expected="to submit from a login node of that cluster, where `scontrol ping` answers (or --cluster local to "
        "run the jobs here)",
        hint="`hpc-runner cluster show NAME` shows the profile; --dry-run prints the scripts without asking",
    )
