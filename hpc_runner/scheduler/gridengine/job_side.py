"""What Grid Engine tells a job about itself, read in one place (``GridEngineJobEnvironment``), and how a job asks
to be run again.

Active when ``JOB_ID`` and ``SGE_TASK_ID`` are both set (Grid Engine sets ``SGE_TASK_ID`` in every job, to
``undefined`` outside an array). Read, as Grid Engine 8.1.9 sets them in a job:

- ``JOB_ID``, ``SGE_TASK_ID`` (1-based; our task is ``SGE_TASK_ID - 1``), ``JOB_NAME``, ``QUEUE``;
- ``NSLOTS``: the slots granted (``-pe smp N`` gives N; 1 without a parallel environment): our CPU grant;
- ``PE_HOSTFILE``: a file, one line per host, ``host slots queue processors``: the nodes;
- ``TMPDIR``: the job's scratch folder, which Grid Engine makes and removes. Debian's 8.1.9 sets ``TMP`` to it
  and, in the jobs seen here, not ``TMPDIR``: both are read, ``TMPDIR`` first;
- ``RESTARTED``: 1 when this run is a rerun (after exit 99, or a host that died); Grid Engine does not count
  them, so we do (below);
- ``SGE_STDOUT_PATH``/``SGE_STDERR_PATH``: the job's own logs.

Requeue: a rerunnable job (``-r y``, job_script.py) that exits with status 99 is put back in the queue and run
again (qacct: ``failed 25 : rescheduling``, then a second record). ``requeue`` says yes (the job's id) when this
process may ask; the caller then exits with ``requeue_exit_code``. ``-notify`` sends SIGUSR2 the queue's
``notify`` seconds before a SIGKILL (h_rt, qdel) and SIGUSR1 before a SIGSTOP.

Bounded as SLURM's requeue is (``HPCR_MAX_REQUEUES``, default 5): each yes is counted first in a file in the
job's log folder (``hpcr-requeues.<JOB_ID>[.<task>]`` beside ``SGE_STDOUT_PATH``, ASCII digits; the log folder
outlives every run of the job, and a rerun keeps its job id), and ``restarts`` is the larger of that count and
``RESTARTED``. Where the count cannot be kept (no stdout path, a file
that cannot be written, or one that holds no count), a job that was rerun already (``RESTARTED=1``) asks no more.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.numbers import outside_int
from hpc_runner.records.read import read_record_text
from hpc_runner.scheduler.gridengine.answers import REQUEUE_EXIT, our_task_id
from hpc_runner.scheduler.gridengine.job_call import memory_error_as_kill
from hpc_runner.scheduler.job_environment import (
    MAX_REQUEUES_ENV,
    JobEnvironment,
    RecordedJob,
    host_file_lines,
    max_requeues,
    scheduler_int,
)

MAX_COUNT_BYTES = 64
REQUEUE_COUNT_NAME = "hpcr-requeues"  # in the job's log folder: how many requeues it asked for and was told yes
# the variables that make a process part of this job: a job submitted from inside must not inherit them
JOB_VARIABLES = ("JOB_ID", "SGE_TASK_ID", "SGE_TASK_FIRST", "SGE_TASK_LAST", "SGE_TASK_STEPSIZE", "NSLOTS",
                 "NHOSTS", "NQUEUES", "PE", "PE_HOSTFILE", "RESTARTED", "SGE_JOB_SPOOL_DIR", "JOB_SCRIPT",
                 "SGE_STDOUT_PATH", "SGE_STDERR_PATH", "SGE_STDIN_PATH", "QUEUE", "JOB_NAME")
_SHOWN = ("JOB_ID", "SGE_TASK_ID", "JOB_NAME", "QUEUE", "NSLOTS", "NHOSTS", "PE", "PE_HOSTFILE", "RESTARTED",
          "TMPDIR", "TMP", "HOSTNAME")


def _number(environ: Mapping[str, str], name: str, low: int = 0) -> int | None:
    return scheduler_int(environ, name, "Grid Engine", low, unset=("undefined",))


def pe_hosts(text: str) -> list[tuple[str, int]]:
    """The hosts of a ``PE_HOSTFILE`` (``host slots queue processors`` per line) with their slots, in order."""
    hosts = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and (slots := outside_int(words[1], low=1)) is not None:
            hosts.append((words[0][:255], slots))
    return hosts


class GridEngineJobEnvironment(JobEnvironment):
    """A Grid Engine job's own view of itself (see the module's text)."""

    name: ClassVar[str] = "gridengine"
    step_daemon: ClassVar[str | None] = "sge_shepherd"
    requeue_exit_code: ClassVar[int | None] = REQUEUE_EXIT

    @classmethod
    def activated(cls, environ: Mapping[str, str]) -> bool:
        return bool(environ.get("JOB_ID")) and "SGE_TASK_ID" in environ

    @classmethod
    def recorded(cls, variables: Mapping[str, Any]) -> RecordedJob:
        job = str(variables.get("JOB_ID") or "") or None
        return RecordedJob(cls.name, job_id=job)

    def in_job(self) -> bool:
        return self.activated(self.environ)

    @property
    def ge_task(self) -> int | None:
        """Grid Engine's task number (1-based), None outside an array."""
        return _number(self.environ, "SGE_TASK_ID", low=1) if self.in_job() else None

    @property
    def job_id(self) -> str | None:
        if not self.in_job():
            return None
        number = _number(self.environ, "JOB_ID")
        return None if number is None else our_task_id(str(number), self.ge_task)

    @property
    def own_number(self) -> str | None:
        if not self.in_job():
            return None
        task = self.ge_task
        return self.environ["JOB_ID"].strip() + ("" if task is None else f".{task}")

    def job_number(self) -> tuple[int, str] | None:
        number = _number(self.environ, "JOB_ID") if self.in_job() else None
        return None if number is None else (number, "JOB_ID")

    @property
    def array_job_id(self) -> str | None:
        return self.environ["JOB_ID"].strip() if self.in_job() and self.ge_task is not None else None

    @property
    def array_task_id(self) -> str | None:
        task = self.ge_task
        return None if task is None else str(task - 1)

    @property
    def restarts(self) -> int:
        """How often this job was run again: our count of its requeues, or ``RESTARTED`` (0 or 1) when larger."""
        if not self.in_job():
            return 0
        return max(_number(self.environ, "RESTARTED") or 0, self.requeue_count() or 0)

    def requeue_count_file(self) -> Path | None:
        """Where this job's (task's) requeues are counted: ``hpcr-requeues.<JOB_ID>[.<task>]`` in its log folder
        (the folder of ``SGE_STDOUT_PATH``, or that path when it is the folder), None when Grid Engine names none."""
        stdout = self.environ.get("SGE_STDOUT_PATH", "").strip() if self.in_job() else ""
        number = self.own_number
        if not stdout.startswith("/") or number is None:
            return None
        folder = Path(stdout) if Path(stdout).is_dir() else Path(stdout).parent
        return folder / f"{REQUEUE_COUNT_NAME}.{number}"

    def requeue_count(self) -> int | None:
        """How many requeues this job asked for and was told yes (0 before the first); None when not counted here
        (no count file's place, or a file that holds no count)."""
        path = self.requeue_count_file()
        if path is None:
            return None
        try:
            text = read_record_text(path, "requeue count", MAX_COUNT_BYTES, error=ClusterError)
        except (ClusterError, OSError):
            return None
        return 0 if text is None else outside_int(text.strip())

    def cpu_grant(self) -> tuple[int, str, str] | None:
        slots = _number(self.environ, "NSLOTS", low=1) if self.in_job() else None
        if slots is None:
            return super().cpu_grant()
        return slots, "NSLOTS", f"NSLOTS={slots}"

    @property
    def scratch_dir(self) -> str | None:
        if not self.in_job():
            return None
        return self.environ.get("TMPDIR") or self.environ.get("TMP") or None

    def _hosts(self) -> list[tuple[str, int]]:
        path = self.environ.get("PE_HOSTFILE") if self.in_job() else None
        return pe_hosts("\n".join(host_file_lines(path, "Grid Engine PE_HOSTFILE")))

    def node_list(self) -> tuple[str, str] | None:
        if not self.in_job():
            return None
        hosts = self._hosts()
        if hosts:
            return ",".join(h for h, _ in hosts), "PE_HOSTFILE"
        host = self.node_name()
        return (host, "HOSTNAME") if host else None

    @property
    def nodes(self) -> list[str]:
        listed = self.node_list()
        return listed[0].split(",") if listed else []

    def first_node(self) -> tuple[str, str] | None:
        listed = self.node_list()
        return (listed[0].split(",")[0], listed[1]) if listed else None

    def node_name(self) -> str | None:
        if not self.in_job():
            return None
        import socket

        return self.environ.get("HOSTNAME") or socket.gethostname()

    @property
    def num_nodes(self) -> int:
        return max(1, len(self._hosts())) if self.in_job() else super().num_nodes

    def job_to_requeue(self) -> str | None:
        if not self.in_job() or self.global_rank != 0:
            return None
        bound, restarts = max_requeues(self.environ), self.restarts
        if restarts >= bound or (self.requeue_count() is None and restarts >= 1):
            print(f"hpc-runner: job {self.job_id} was run again {restarts} time(s) already ({MAX_REQUEUES_ENV}="
                  f"{bound}{'' if self.requeue_count() is not None else '; no requeue count kept beside its log'}); "
                  "not requeued again", flush=True)
            return None
        return self.job_id

    def _requeue(self) -> str | None:
        """Grid Engine requeues a job that exits 99: yes (this job's id) when it may ask, counted first (the module's
        text); the caller exits 99. None past the bound, or when the count cannot be written."""
        job = self.job_to_requeue()
        path = self.requeue_count_file()
        if job is None or path is None:
            return job
        try:
            write_text_atomic(path, f"{self.restarts + 1}\n")
        except OSError as exc:
            print(f"hpc-runner: job {job} not requeued: its requeue count {path} cannot be written ({exc})", flush=True)
            return None
        return job

    def around_call(self, args_file: Path) -> contextlib.AbstractContextManager[None]:
        """A ``MemoryError`` in the call ends the job as the kill past ``h_vmem`` would (job_call.py)."""
        return memory_error_as_kill()

    def variables(self) -> dict[str, str]:
        env = self.environ
        return {k: env[k] for k in sorted(env) if k.startswith("SGE_") or k in JOB_VARIABLES or k in _SHOWN} \
            if self.in_job() else {}

    def job_variables(self) -> dict[str, str]:
        env = self.environ
        return {k: env[k] for k in JOB_VARIABLES if k in env} if self.in_job() else {}

    def summary(self) -> dict[str, str]:
        env = self.environ
        return {k: env[k] for k in _SHOWN if env.get(k)} if self.in_job() else {}

    def log_files(self) -> dict[str, str]:
        env = self.environ
        if not self.in_job():
            return {}
        logs = {"stdout": env.get("SGE_STDOUT_PATH", ""), "stderr": env.get("SGE_STDERR_PATH", "")}
        return {k: v for k, v in logs.items() if v}
