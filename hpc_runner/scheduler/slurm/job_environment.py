"""SLURM's job side: what SLURM tells a job about itself (``SLURM_*``), as a ``JobEnvironment``.

Chosen at run time when ``SLURM_JOB_ID`` is set (``activated``; the registry is scheduler/select.py). Everything
above the scheduler asks scheduler/job_env.py in neutral words; only this folder names SLURM's variables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.job_environment import JobEnvironment, RecordedJob, env_int, positive
from hpc_runner.scheduler.slurm.hostlist import expand_hostlist, first_host, node_address
from hpc_runner.scheduler.slurm.job_call import marked_end
from hpc_runner.scheduler.slurm.job_clock import job_end_time, stop_margin_s
from hpc_runner.scheduler.slurm.requeue import job_to_requeue, requeue_current_job
from hpc_runner.scheduler.slurm.site_probes import slurm_site_probes
from hpc_runner.scheduler.slurm.variables import end_time, in_job, launched_world, own_job_id, restart_count

# what the run page shows of a job (its ids, nodes and CPUs), in this order
SUMMARY_KEYS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST", "SLURM_CPUS_ON_NODE")
CLAIM_NAMES = ("RANK", "WORLD_SIZE", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_PROCID", "SLURM_STEP_ID")
LAUNCH_ADDRESS = "SLURM_LAUNCH_NODE_IPADDR"


class SlurmJobEnvironment(JobEnvironment):
    """A SLURM job's (or step's) environment."""

    name: ClassVar[str] = "slurm"
    step_daemon: ClassVar[str | None] = "slurmstepd"
    launch_address_name: ClassVar[str] = LAUNCH_ADDRESS

    @classmethod
    def activated(cls, environ: Mapping[str, str]) -> bool:
        """True when any of SLURM's job variables is set (a batch script or a step has SLURM_JOB_ID; a process a
        job started may have kept only some, such as srun's ranks or a CPU grant); SLURM_CONF alone is no job."""
        return any(k.startswith(("SLURM_", "SLURMD_")) and k != "SLURM_CONF" for k in environ)

    @classmethod
    def recorded(cls, variables: Mapping[str, Any]) -> RecordedJob:
        """Return what an earlier run.yaml's ``slurm:`` (every SLURM_* variable of the job) says."""
        env = {str(k): str(v) for k, v in variables.items() if v is not None}
        restarts = outside_int(env.get("SLURM_RESTART_COUNT", "")) or 0
        summary = [(k, env[k]) for k in SUMMARY_KEYS if k in env] if env.get("SLURM_JOB_ID") else []
        return RecordedJob(cls.name, own_job_id(env), restarts, summary)

    # ---------------------------------------------------------------- ids

    def in_job(self) -> bool:
        return in_job(self.environ)

    @property
    def job_id(self) -> str | None:
        return own_job_id(self.environ)

    @property
    def own_number(self) -> str | None:
        return self.environ.get("SLURM_JOB_ID") or None

    def job_number(self) -> tuple[int, str] | None:
        environ = self.environ
        name = "SLURM_JOB_ID" if environ.get("SLURM_JOB_ID") else "SLURM_JOBID"
        number = env_int(environ, name)
        return None if number is None else (number, name)

    @property
    def array_job_id(self) -> str | None:
        return self.environ.get("SLURM_ARRAY_JOB_ID") or None

    @property
    def array_task_id(self) -> str | None:
        return self.environ.get("SLURM_ARRAY_TASK_ID") or None

    @property
    def restarts(self) -> int:
        return restart_count(self.environ)

    @property
    def end_time(self) -> float | None:
        return end_time(self.environ)

    def ask_end_time(self, job_id: str | None = None) -> float | None:
        return job_end_time(job_id or own_job_id(self._environ), self._environ)

    def stop_margin_s(self, signal_delay_s: float | None) -> float:
        return stop_margin_s(signal_delay_s)

    # ---------------------------------------------------------------- what the job was granted

    def cpu_grant(self) -> tuple[int, str, str] | None:
        env = self.environ
        raw = env.get("SLURM_CPUS_PER_TASK", "").strip()
        if raw and (value := positive("SLURM_CPUS_PER_TASK", raw)):
            return value, "SLURM_CPUS_PER_TASK", f"SLURM_CPUS_PER_TASK={value}"
        tres = env.get("SLURM_TRES_PER_TASK", "")  # newer SLURM: "cpu=4" or "cpu:4,gres/gpu:1"
        for item in tres.split(","):
            key, _, raw = item.replace(":", "=", 1).partition("=")
            if key.strip() == "cpu" and (value := positive("SLURM_TRES_PER_TASK", raw)):
                return value, "SLURM_TRES_PER_TASK", f"SLURM_TRES_PER_TASK={tres}"
        # sbatch without --cpus-per-task sets no per-task variable: the job's CPUs on this node, per task
        raw = env.get("SLURM_CPUS_ON_NODE", "").strip()
        if env.get("SLURM_JOB_ID") and raw and (value := positive("SLURM_CPUS_ON_NODE", raw)):
            per_node = env.get("SLURM_NTASKS_PER_NODE", "").split("(")[0].strip()
            tasks = outside_int(per_node, low=1) or 1
            share = f" / {tasks} tasks per node" if tasks > 1 else ""
            return max(1, value // tasks), "SLURM_CPUS_ON_NODE", f"SLURM_CPUS_ON_NODE={value}{share}"
        return super().cpu_grant()

    def grant_cpus(self, count: int, environ: MutableMapping[str, str]) -> None:
        environ["SLURM_CPUS_PER_TASK"] = str(int(count))
        environ.pop("SLURM_TRES_PER_TASK", None)  # the more general grant would not be the slot's

    def gpu_grant(self) -> tuple[list[str], str] | None:
        env = self.environ
        for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
            granted = [g.strip() for g in env.get(name, "").split(",") if g.strip()]
            if granted:
                return granted, name
        return None

    @property
    def memory_mb(self) -> int | None:
        env = self.environ
        per_node = outside_int(env.get("SLURM_MEM_PER_NODE", ""))
        if per_node is not None:
            return per_node
        per_cpu, cpus = outside_int(env.get("SLURM_MEM_PER_CPU", "")), outside_int(env.get("SLURM_CPUS_ON_NODE", ""))
        if per_cpu is not None and cpus is not None:
            return per_cpu * cpus
        return None

    @property
    def scratch_dir(self) -> str | None:
        """SLURM's job_container/tmpfs gives each job its own TMPDIR (else the node's, shared: not the job's)."""
        env = self.environ
        return env.get("SLURM_JOB_TMPDIR") or None

    # ---------------------------------------------------------------- nodes and ranks

    def node_list(self) -> tuple[str, str] | None:
        environ = self.environ
        name = next((v for v in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST") if environ.get(v)),
                    None)
        return None if name is None else (environ[name], name)

    @property
    def nodes(self) -> list[str]:
        found = self.node_list()
        if found is None:
            return []
        try:
            return expand_hostlist(found[0])
        except ValueError as exc:
            raise ClusterError(f"{found[1]}={found[0]!r} is not a SLURM host list: {exc}",
                               expected="a list such as gpu[01-03,07],cpu5, as SLURM sets it") from None

    def first_node(self) -> tuple[str, str] | None:
        found = self.node_list()
        return None if found is None else (first_host(found[0], found[1]), found[1])

    def node_name(self) -> str | None:
        return self.environ.get("SLURMD_NODENAME") or None

    def node_address(self, host: str) -> str | None:
        return node_address(host)

    @property
    def num_nodes(self) -> int:
        environ = self.environ
        for name in ("SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
            if environ.get(name):
                return max(1, int(env_int(environ, name, 1) or 1))
        return super().num_nodes

    def launched_world(self) -> tuple[int, int]:
        return launched_world(self.environ)

    def launcher_without_torchrun(self) -> bool:
        """True for a task of a multi-task srun step that no launcher (torchrun) gave a RANK."""
        environ = self.environ
        if "RANK" in environ and "WORLD_SIZE" in environ:
            return False
        return launched_world(environ)[1] > 1 and "SLURM_PROCID" in environ

    @property
    def local_rank(self) -> int:
        environ = self.environ
        if "LOCAL_RANK" in environ:
            return int(env_int(environ, "LOCAL_RANK", 0) or 0)
        if self.launcher_without_torchrun() and "SLURM_LOCALID" in environ:
            return int(env_int(environ, "SLURM_LOCALID", 0) or 0)
        return 0

    @property
    def node_rank(self) -> int:
        environ = self.environ
        for name in ("GROUP_RANK", "SLURM_NODEID"):
            if name in environ:
                return int(env_int(environ, name, 0) or 0)
        return 0

    @property
    def step_id(self) -> str | None:
        return self.environ.get("SLURM_STEP_ID") or None

    def claim_names(self) -> tuple[str, ...]:
        return CLAIM_NAMES

    @property
    def launch_address(self) -> str | None:
        return self.environ.get(LAUNCH_ADDRESS) or None

    # ---------------------------------------------------------------- requeue

    def job_to_requeue(self) -> str | None:
        return job_to_requeue(self._environ)

    def _requeue(self) -> str | None:
        return requeue_current_job(self._environ)

    def around_call(self, args_file: Path) -> contextlib.AbstractContextManager[None]:
        """As under submitit's runner: ``SUBMITIT_FOLDER`` is the log folder, and a job that is no array notes
        when its call ended (scheduler/slurm/job_call.py ``marked_end``)."""
        return marked_end(args_file.parent)

    def site_probes(self) -> dict[str, dict[str, Any]]:
        return slurm_site_probes(self.job_id)

    # ---------------------------------------------------------------- records

    def variables(self) -> dict[str, str]:
        return {k: v for k, v in sorted(self.environ.items()) if k.startswith("SLURM_")}

    def job_variables(self) -> dict[str, str]:
        """Every SLURM_*/SLURMD_* variable but the cluster's config (SLURM_CONF): the node list, task counts, ids."""
        return {k: v for k, v in self.environ.items() if k.startswith(("SLURM_", "SLURMD_")) and k != "SLURM_CONF"}

    def summary(self) -> dict[str, str]:
        env = self.environ
        return {k: env[k] for k in SUMMARY_KEYS if k in env} if env.get("SLURM_JOB_ID") else {}

    def log_files(self) -> dict[str, str]:
        """submitit's stdout/stderr files of this job, when it runs under submitit (a command job: none known)."""
        try:
            import submitit

            paths = submitit.JobEnvironment().paths
            return {"stdout": str(paths.stdout), "stderr": str(paths.stderr)}
        except Exception:  # not a submitit job
            return {}
