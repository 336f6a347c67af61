"""The in-memory cluster: a second scheduler behind the ``Executor`` interface, on a clock the test owns.

``MemoryCluster`` holds the jobs and the clock; ``MemoryExecutor`` (``executor: memory`` in a profile) is the
``Executor`` over it, so the sweep's logic (governor, top-ups, retries, causes, right-size, cancel) runs through
the same code paths as on SLURM, in milliseconds. Nothing runs by itself: the test moves the clock
(``advance``), decides how each job ends (``finish``, ``plan``) and may run a task's function here (``run``).

What it models, as SLURM does it:

- one submission per group: an array ``12_0``, ``12_1``... for several tasks, a plain ``13`` for one;
  ``MaxArraySize``; a per-user QOS submit limit (``MaxSubmitJobsPerUser``: every pending or running task
  counts; a submission past it is refused whole, with sbatch's words) and ``MaxJobsPerUser`` (jobs past it
  wait with reason ``QOSMaxJobsPerUserLimit``);
- pending, running and final states; a job that reaches its time limit ends TIMEOUT; every failure cause
  (FAILED with its exit code, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED ``by <uid>``);
- dependencies (``afterok``, ``afterany``, ``afternotok``; ``,`` all of them, ``?`` any; an array's id stands for
  all its tasks): ``Dependency`` while they may still be met; one that never can be is ended CANCELLED when the
  cluster honours ``--kill-on-invalid-dep`` (``kill_invalid_dep``, what the SLURM executor asks for), else the
  job stays pending with reason ``DependencyNeverSatisfied``;
- requeue (``scontrol requeue``, and SLURM's own after NODE_FAIL/PREEMPTED): the attempt ends, a new one waits;
  held jobs; array parallelism; nodes, ``--exclude``; cancel (an array's id cancels all its tasks);
- usage: what SLURM's accounting records per attempt (elapsed, time limit, CPU time, CPUs, memory request) and per
  step (peak memory, GPU figures). ``query`` answers in our own words (``JobStatus``, ``Usage``, ``Attempt``: the
  typed answer every backend gives), so the sweep's logic reads it exactly as it reads SLURM's.

- the job side: a task the test runs here (``run``) sees the variables SLURM gives a job (ids, restarts, its end
  time, CPUs, nodes: SLURM's job side, scheduler/slurm/job_environment.py, is chosen by them and reads them), and
  its requeue comes to this cluster.

This is the test backend: it imports no real backend (the words it shares with SLURM, it writes out itself), and
a profile reaches it only inside ``MemoryCluster().installed()``.

Not modelled: signals before the time limit, partitions, GRES scheduling, other users.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.executor import (
    Executor,
    Job,
    JobRequest,
    Limit,
    SchedulerAnswer,
    SubmitLimits,
    array_ids,
)
from hpc_runner.scheduler.job_environment import in_process_job
from hpc_runner.scheduler.job_logs import JobLogs
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_NOWHERE, FROM_QUEUE
from hpc_runner.scheduler.job_status import FAILED_STATES, Attempt, JobState, JobStatus
from hpc_runner.scheduler.job_status import Usage as JobUsage
from hpc_runner.scheduler.profile import ClusterProfile, KeySpec, check_time_room, parse_time_minutes
from hpc_runner.scheduler.units import parse_size_bytes

PENDING, RUNNING, REQUEUED = "PENDING", "RUNNING", "REQUEUED"
DONE = JobState.COMPLETED.value
# the words a job may end in here (SLURM's: BOOT_FAIL and DEADLINE besides our own), and ours for each
FINAL_STATES = FAILED_STATES | {DONE, "BOOT_FAIL", "DEADLINE"}
OUR_STATES = {"BOOT_FAIL": JobState.NODE_FAIL, "DEADLINE": JobState.TIMEOUT, REQUEUED: JobState.PENDING}
# the profile keys this cluster reads beyond profiles.COMMON_KEYS (SLURM's names: it models SLURM)
PROFILE_KEYS: dict[str, KeySpec] = {
    "nodes": ((int,), "a whole number of nodes"),
    "ntasks_per_node": ((int, type(None)), "a whole number of tasks per node"),
    "mem": ((str, int, type(None)), "memory per node, e.g. 16G"),
    "mem_gb": ((int, float, type(None)), "memory per node in GB"),
    "qos": ((str, type(None)), "a QOS name"),
    "account": ((str, type(None)), "an account name"),
    "exclude": ((str, type(None)), "nodes to avoid, comma-separated"),
    "array_parallelism": ((int, type(None)), "how many tasks of an array may run at once"),
    "max_submit_jobs": ((int, type(None)), "the most jobs to keep queued at once"),
    "signal_delay_s": ((int, type(None)), "seconds before the time limit that the stop signal comes"),
}
# sacct's ExitCode of a job that ended so, when the test names none (status:signal)
EXIT_CODES = {DONE: "0:0", "FAILED": "1:0", "TIMEOUT": "0:15", "OUT_OF_MEMORY": "0:125", "CANCELLED": "0:15",
              "PREEMPTED": "0:15", "NODE_FAIL": "0:0", "BOOT_FAIL": "0:0", "DEADLINE": "0:15"}
# what sbatch prints when the QOS submit limit refuses a job (scheduler/slurm/limits.py LIMIT_MESSAGES knows it)
QOS_REFUSAL = ("sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: "
               "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)")
NEVER_SATISFIED = "DependencyNeverSatisfied"
DEPENDENCY_KINDS = ("afterok", "afterany", "afternotok")
MB = 1024 * 1024


@dataclass
class Usage:
    """What one attempt used, as sacct records it (None: not recorded)."""

    cpus_used: float | None = None  # CPUs kept busy on average: TotalCPU = cpus_used x Elapsed
    max_rss_mb: float | None = None  # the peak of its steps (MaxRSS)
    gpu_util: float | None = None  # mean % (TRESUsageInAve gres/gpuutil)
    gpu_util_max: float | None = None  # peak % (TRESUsageInMax gres/gpuutil)
    gpu_mem_mb: float | None = None  # peak (TRESUsageInMax gres/gpumem)


@dataclass
class JobRun:
    """One attempt of a job (a requeued job has several, oldest first; sacct -D prints one record each)."""

    state: str = PENDING
    started: float | None = None
    ended: float | None = None
    nodes: list[str] = field(default_factory=list)
    exit_code: str = "0:0"
    usage: Usage = field(default_factory=Usage)


@dataclass
class Plan:
    """How the current attempt ends once it has run ``after_s`` seconds (unless its time limit comes first)."""

    state: str
    after_s: float
    exit_code: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass
class MemoryJob:
    """One job or array task of the in-memory cluster: what was asked, and its attempts."""

    job_id: str  # ``12_3`` (array task) or ``13``
    array_id: str
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    settings: dict[str, Any]  # the profile's settings with the request's on top
    user: str
    account: str
    qos: str
    submitted: float
    dependency: str | None = None
    held: bool = False
    array_limit: int | None = None
    reason: str = "None"
    attempts: list[JobRun] = field(default_factory=lambda: [JobRun()])
    plan: Plan | None = None
    result: Any = None
    error: BaseException | None = None

    @property
    def current(self) -> JobRun:
        """Return the attempt that runs now or ran last."""
        return self.attempts[-1]

    @property
    def state(self) -> str:
        """Return the current attempt's state."""
        return self.current.state

    @property
    def queued(self) -> bool:
        """True while pending or running (what counts against a submit limit)."""
        return self.state in (PENDING, RUNNING)

    @property
    def time_limit_s(self) -> float:
        """Return the time limit in seconds (the profile's ``time``, 60 minutes when it names none)."""
        return parse_time_minutes(self.settings.get("time", 60)) * 60.0

    @property
    def cpus(self) -> int:
        """Return the CPUs allocated (AllocCPUS): CPUs per task x tasks per node x nodes."""
        s = self.settings
        return int(s.get("cpus_per_task") or 1) * int(s.get("ntasks_per_node") or 1) * self.node_count

    @property
    def node_count(self) -> int:
        """Return how many nodes the job asks for."""
        return int(self.settings.get("nodes") or 1)

    def excluded(self) -> set[str]:
        """Return the nodes the job must avoid (``--exclude``)."""
        return {n.strip() for n in str(self.settings.get("exclude") or "").split(",") if n.strip()}


class MemoryCluster:
    """A scheduler in memory: jobs, a QOS, nodes and a clock (``now``, seconds) that only the test moves."""

    def __init__(
        self,
        *,
        max_submit: int | None = None,
        max_running: int | None = None,
        max_array_size: int = 1001,
        nodes: Sequence[str] = ("mem1", "mem2"),
        cpus_per_node: int = 64,
        mem_gb_per_node: float = 256.0,
        default_mem_mb: int = 4096,
        user: str = "tester",
        account: str = "default",
        qos: str = "normal",
        kill_invalid_dep: bool = True,
        first_job_id: int = 1,
        accounting: bool = True,
    ) -> None:
        self.max_submit = max_submit
        self.max_running = max_running
        self.max_array_size = max_array_size
        self.nodes = list(nodes)
        self.cpus_per_node = cpus_per_node
        self.mem_gb_per_node = mem_gb_per_node
        self.default_mem_mb = default_mem_mb
        self.user, self.account, self.qos = user, account, qos
        self.kill_invalid_dep = kill_invalid_dep
        self.accounting = accounting  # False: a site without accounting (the answer comes from the queue only)
        self.now = 0.0
        self.jobs: dict[str, MemoryJob] = {}  # by job id, in submission order
        self.calls: Counter = Counter()  # sbatch, sacct, squeue, scancel, scontrol: as the SLURM executor makes them
        self.refused: list[str] = []  # sbatch's message of each refused submission
        self.most_queued = 0  # the most jobs of the user ever queued at once (a governor must keep it in its limit)
        self._next_id = first_job_id

    # ---------------------------------------------------------------- what the test drives

    @contextlib.contextmanager
    def installed(self) -> Iterator[MemoryCluster]:
        """Make this the cluster that ``executor: memory`` profiles reach in this process, for the block."""
        _INSTALLED.append(self)
        try:
            yield self
        finally:
            _INSTALLED.remove(self)

    def job(self, job_id: str) -> MemoryJob:
        """Return the job or array task ``job_id``; KeyError names the known ones."""
        try:
            return self.jobs[job_id]
        except KeyError:
            raise KeyError(f"the in-memory cluster has no job {job_id} (it has {', '.join(self.jobs)})") from None

    def queued_jobs(self, user: str | None = None) -> list[tuple[str, str, str]]:
        """``squeue -h -r -u USER -o %i|%a|%q``: the user's pending and running jobs, (job id, account, qos) each."""
        self.calls["squeue"] += 1
        return [(j.job_id, j.account, j.qos) for j in self.jobs.values() if j.queued and j.user == (user or self.user)]

    def queued(self, user: str | None = None) -> list[str]:
        """Return the ids of the user's pending and running jobs (array tasks one by one)."""
        return [j.job_id for j in self.jobs.values() if j.queued and j.user == (user or self.user)]

    def state(self, job_id: str) -> str:
        """Return the job's state now (``PENDING``, ``RUNNING``, ``COMPLETED``, ``CANCELLED``...)."""
        return self.job(job_id).state

    def advance(self, seconds: float) -> None:
        """Move the clock on: eligible jobs start, planned outcomes and time limits end jobs when they fall due,
        in time order (a job that waits on another starts the moment it may)."""
        if seconds < 0:
            raise ValueError("the clock only moves forward")
        end = self.now + seconds
        self._start_eligible()
        while True:
            running = [j for j in self.jobs.values() if j.state == RUNNING]
            job = min(running, key=self._due, default=None)
            if job is None or self._due(job) > end:
                break
            at = self._due(job)
            self.now = max(self.now, at)
            plan = job.plan
            if plan is not None and job.current.started + plan.after_s <= at:
                self._end(job, plan.state, plan.exit_code, plan.usage)
            else:
                self._end(job, "TIMEOUT", None, None)
            self._settle()
            self._start_eligible()
        self.now = end
        self._start_eligible()

    def plan(self, job_ids: str | Sequence[str], state: str = DONE, after_s: float = 0.0,
             exit_code: str | None = None, **usage: float) -> None:
        """Decide how jobs end: ``state`` once they have run ``after_s`` seconds (their time limit, if shorter,
        ends them TIMEOUT first); ``usage``: the figures sacct records (``Usage``'s fields)."""
        _check_final(state)
        for job_id in [job_ids] if isinstance(job_ids, str) else job_ids:
            self.job(job_id).plan = Plan(state, after_s, exit_code, Usage(**usage))

    def finish(self, job_id: str, state: str = DONE, *, exit_code: str | None = None, requeue: bool = False,
               **usage: float) -> None:
        """End the job's current attempt now with ``state`` (a pending job starts first, for no time);
        ``requeue``: the scheduler queues it again, as SLURM does after NODE_FAIL or PREEMPTED."""
        _check_final(state)
        job = self.job(job_id)
        if job.state not in (PENDING, RUNNING):
            raise ValueError(f"job {job_id} has ended already ({job.state})")
        if job.state == PENDING:
            self._start(job, job.excluded())
        self._end(job, state, exit_code, Usage(**usage) if usage else None, requeue=requeue)
        self._settle()

    def requeue(self, job_id: str) -> None:
        """``scontrol requeue``: the current attempt ends REQUEUED and a new one waits."""
        self.calls["scontrol"] += 1
        job = self.job(job_id)
        if job.state == PENDING:
            raise ClusterError(f"scontrol requeue refused: job {job_id} is pending")
        if job.state == RUNNING:
            self._end(job, REQUEUED, "0:15", None, requeue=True)
        else:  # an ended job: its last attempt keeps its state, a new one waits
            job.attempts.append(JobRun())
            job.plan, job.reason = None, "BeginTime"
        self._settle()

    def release(self, job_id: str) -> None:
        """``scontrol release`` of a held job (it starts at the next scheduling pass)."""
        self.calls["scontrol"] += 1
        job = self.job(job_id)
        job.held = False
        job.reason = "None"

    def run(self, job_id: str) -> Any:
        """Run the job's function here, with its arguments (the task itself, in this process), as a job of this
        cluster: it sees the variables SLURM gives a job (``job_variables``) and its requeue comes here. The job
        runs for no time and ends COMPLETED, or FAILED (exit 1) when the function raises, unless it requeued
        itself (then its new attempt waits); return what it returned."""
        job = self.job(job_id)
        if job.state == PENDING:
            self._start(job, job.excluded())
        attempt = job.current
        try:
            with in_process_job(self.job_variables(job_id), self._requeue_from_job):
                job.result = job.fn(*job.args)
        except Exception as exc:  # the test reads it from job.error, as sacct would only say FAILED
            job.error = exc
            if job.current is attempt:
                self.finish(job_id, "FAILED")
            return None
        if job.current is attempt:
            self.finish(job_id, DONE)
        return job.result

    def job_variables(self, job_id: str) -> dict[str, str]:
        """Return what SLURM tells the running job ``job_id`` about itself: ids, restarts, end time (its time left
        on this cluster's clock, from now on the real one), CPUs and nodes."""
        job = self.job(job_id)
        started = job.current.started if job.current.started is not None else self.now
        left = max(0.0, started + job.time_limit_s - self.now)
        cpus = int(job.settings.get("cpus_per_task") or 1)
        out = {"SLURM_JOB_ID": job_id if "_" not in job_id else str(self._task_number(job)),
               "SLURM_RESTART_COUNT": str(len(job.attempts) - 1),
               "SLURM_JOB_END_TIME": str(int(time.time() + left)), "SLURM_CPUS_PER_TASK": str(cpus),
               "SLURM_CPUS_ON_NODE": str(cpus), "SLURM_JOB_NODELIST": ",".join(job.current.nodes) or self.nodes[0]}
        if "_" in job_id:
            out["SLURM_ARRAY_JOB_ID"], out["SLURM_ARRAY_TASK_ID"] = job_id.split("_", 1)
        return out

    def _task_number(self, job: MemoryJob) -> int:
        """An array task's own job number (SLURM gives each task one; its array id stays the first task's)."""
        return 1_000_000 + list(self.jobs).index(job.job_id)

    def _requeue_from_job(self, job_id: str) -> bool:
        """``scontrol requeue`` asked by the running job itself (the job side's requeue)."""
        self.requeue(job_id)
        return True

    # ---------------------------------------------------------------- what the executor asks (the scheduler side)

    def submit(self, fn: Callable[..., Any], task_args: Sequence[tuple[Any, ...]], settings: Mapping[str, Any],
               request: JobRequest) -> list[str]:
        """sbatch: queue one job (one task) or one array (several); refused whole past a limit, like sbatch."""
        self.calls["sbatch"] += 1
        count = len(task_args)
        qos = str(settings.get("qos") or self.qos)
        try:
            if count > self.max_array_size:
                raise ClusterError(f"sbatch refused the submission: sbatch: error: Batch job submission failed: "
                                   f"Invalid job array specification ({count} tasks > MaxArraySize "
                                   f"{self.max_array_size})")
            self._check_fits(settings)
            if request.dependency:
                self._dependency_state(request.dependency)  # refused when it names an unknown job
            queued = sum(1 for j in self.jobs.values() if j.queued and j.user == self.user and j.qos == qos)
            if self.max_submit is not None and queued + count > self.max_submit:
                raise ClusterError(f"sbatch refused the submission: {' '.join(QOS_REFUSAL.splitlines())}")
        except ClusterError as exc:
            self.refused.append(exc.message)
            raise
        array_id = str(self._next_id)
        self._next_id += 1
        parallel = request.array_parallelism or settings.get("array_parallelism")
        ids = []
        for n, args in enumerate(task_args):
            job_id = f"{array_id}_{n}" if count > 1 else array_id
            self.jobs[job_id] = MemoryJob(
                job_id, array_id, request.job_name, fn, tuple(args), dict(settings), self.user,
                str(settings.get("account") or self.account), qos, self.now, request.dependency, request.hold,
                int(parallel) if parallel and count > 1 else None, "JobHeldUser" if request.hold else "None")
            ids.append(job_id)
        self.most_queued = max(self.most_queued, len(self.queued()))
        self._settle()
        return ids

    def check_resources(self, settings: Mapping[str, Any]) -> None:
        """``sbatch --test-only``: ClusterError when no node of the cluster could ever run such a job."""
        self.calls["sbatch --test-only"] += 1
        self._check_fits(settings)

    def limits(self, settings: Mapping[str, Any]) -> SubmitLimits:
        """Return the submit limits of a job with these settings and the user's queued jobs counted."""
        self.calls["squeue"] += 1
        qos = str(settings.get("qos") or self.qos)
        out = SubmitLimits(user=self.user, account=str(settings.get("account") or self.account), qos=qos,
                           max_array_size=self.max_array_size, max_array_source="the in-memory cluster")
        source = f"QOS {qos} (in-memory cluster)"
        if self.max_submit is not None:
            out.limits.append(Limit("MaxSubmitJobsPerUser", source, self.max_submit))
        if self.max_running is not None:
            out.limits.append(Limit("MaxJobsPerUser", source, self.max_running, limits_submission=False))
        if settings.get("max_submit_jobs") is not None:  # the user's own bound, as read_limits adds it
            out.limits.append(Limit("max_submit_jobs", "the cluster profile", int(settings["max_submit_jobs"])))
        out.jobs = [(j.job_id, j.account, j.qos) for j in self.jobs.values() if j.queued and j.user == self.user]
        out.recount()
        return out

    def answer(self, job_ids: Sequence[str | None]) -> SchedulerAnswer:
        """Return the answer of one accounting call (SLURM's sacct, here): every task's status, usage and attempts."""
        if not array_ids(job_ids):
            return SchedulerAnswer({}, FROM_NOWHERE)
        if not self.accounting:  # as the SLURM executor falls back to squeue: states of the queued jobs only
            self.calls["squeue"] += 1
            queued = {j.job_id: self._status(j) for j in self._tasks(array_ids(job_ids)) if j.queued}
            return SchedulerAnswer(queued, FROM_QUEUE, 1, "accounting is off on this cluster")
        self.calls["sacct"] += 1
        statuses, usage, attempts = {}, {}, {}
        for job in self._tasks(array_ids(job_ids)):
            statuses[job.job_id] = self._status(job)
            usage[job.job_id] = self._usage(job, job.current)
            attempts[job.job_id] = [Attempt(REQUEUED if a.state == REQUEUED else _ours(a.state).value,
                                            ",".join(a.nodes) or None) for a in job.attempts]
        return SchedulerAnswer(statuses, FROM_ACCOUNTING, 1, usage=usage, attempts=attempts)

    def _elapsed(self, attempt: JobRun) -> float:
        if attempt.started is None:
            return 0.0
        return (attempt.ended if attempt.ended is not None else self.now) - attempt.started

    def _status(self, job: MemoryJob) -> JobStatus:
        """Return the job's status now (its current attempt), in our own words."""
        attempt = job.current
        words = attempt.state.split()
        code, _, signal = attempt.exit_code.partition(":")
        return JobStatus(job.job_id, _ours(attempt.state), raw=attempt.state, exit_code=int(code),
                         node=",".join(attempt.nodes) or None, elapsed_s=self._elapsed(attempt),
                         requeues=len(job.attempts) - 1, signal=int(signal or 0) or None,
                         cancelled_by=words[2] if len(words) >= 3 and words[1] == "by" else None)

    def _usage(self, job: MemoryJob, attempt: JobRun) -> JobUsage:
        """Return what the attempt used and was given (what SLURM's accounting records of it)."""
        started = attempt.started is not None
        elapsed = self._elapsed(attempt)
        u = attempt.usage
        gpu = u.gpu_util is not None or u.gpu_util_max is not None or u.gpu_mem_mb is not None
        return JobUsage(
            elapsed_s=elapsed, time_limit_s=job.time_limit_s,
            cpu_time_s=(u.cpus_used or 0.0) * elapsed if u.cpus_used is not None else 0.0,
            peak_memory_bytes=round(u.max_rss_mb * MB) if u.max_rss_mb is not None and started else None,
            memory_request_bytes=round((_mem_mb(job.settings) or self.default_mem_mb) * MB),
            cpus=job.cpus if started else None,
            gpu_util=u.gpu_util if gpu else None,
            gpu_util_max=(u.gpu_util_max if u.gpu_util_max is not None else u.gpu_util) if gpu else None,
            gpu_memory_bytes=u.gpu_mem_mb * MB if u.gpu_mem_mb is not None else None)

    def queued_states(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Return squeue's state of each queued task of the jobs (``squeue -r -j ...``)."""
        self.calls["squeue"] += 1
        return {j.job_id: j.state for j in self._tasks(array_ids(job_ids)) if j.queued}

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        """scancel: end every pending or running task of the jobs CANCELLED (by this user); return the ids."""
        self.calls["scancel"] += 1
        ids = array_ids(job_ids)
        for job in self._tasks(ids):
            if job.queued:
                self._end(job, f"CANCELLED by {os.getuid()}", "0:15" if job.state == RUNNING else "0:0", None)
        self._settle()
        return ids

    def set_dependency(self, job_ids: Sequence[str], dependency: str) -> list[str]:
        """``scontrol update Dependency=``: the pending tasks of the jobs wait on ``dependency`` instead;
        ClusterError when a job has no pending task left (scontrol refuses it)."""
        self.calls["scontrol"] += 1
        self._dependency_state(dependency)
        ids = array_ids(job_ids)
        for array_id in ids:
            pending = [j for j in self._tasks([array_id]) if j.state == PENDING]
            if not pending:
                raise ClusterError(f"scontrol update refused: job {array_id} is no longer pending")
            for job in pending:
                job.dependency = dependency
        self._settle()
        return ids

    def pending_reasons(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Return why each pending task of the jobs waits (``squeue -r -t PENDING -o %i|%r``)."""
        self.calls["squeue"] += 1
        return {j.job_id: j.reason for j in self._tasks(array_ids(job_ids)) if j.state == PENDING}

    # ---------------------------------------------------------------- the scheduler's own rules

    def _tasks(self, ids: Sequence[str]) -> list[MemoryJob]:
        """Return the jobs the ids name: an array's id all its tasks, a task's id that task."""
        wanted = set(ids)
        return [j for j in self.jobs.values() if j.array_id in wanted or j.job_id in wanted]

    def _check_fits(self, settings: Mapping[str, Any]) -> None:
        """ClusterError, in sbatch's words, when no node could ever run a job with these settings."""
        cpus = int(settings.get("cpus_per_task") or 1) * int(settings.get("ntasks_per_node") or 1)
        mem_mb = _mem_mb(settings)
        nodes = int(settings.get("nodes") or 1)
        if cpus > self.cpus_per_node or (mem_mb or 0) > self.mem_gb_per_node * 1024 or nodes > len(self.nodes):
            raise ClusterError("sbatch refused the submission: sbatch: error: Batch job submission failed: "
                               "Requested node configuration is not available")

    def _due(self, job: MemoryJob) -> float:
        """Return when the running job ends: its plan, or its time limit if that comes first."""
        limit = job.current.started + job.time_limit_s
        return min(limit, job.current.started + job.plan.after_s) if job.plan is not None else limit

    def _start(self, job: MemoryJob, excluded: set[str]) -> bool:
        """Start the job on the least busy nodes it may use; False when too few are left to it."""
        allowed = [n for n in self.nodes if n not in excluded]
        if len(allowed) < job.node_count:
            job.reason = "ReqNodeNotAvail"
            return False
        busy = Counter(n for j in self.jobs.values() if j.state == RUNNING for n in j.current.nodes)
        chosen = sorted(allowed, key=lambda n: (busy[n], self.nodes.index(n)))[: job.node_count]
        job.current.state, job.current.started, job.current.nodes = RUNNING, self.now, chosen
        job.reason = "None"
        return True

    def _start_eligible(self) -> None:
        """One scheduling pass: start, in submission order, every pending job that may run now."""
        for job in self.jobs.values():
            if job.state != PENDING or job.held:
                continue
            if job.dependency and self._dependency_state(job.dependency) != "met":
                continue  # its reason is kept by _settle
            running = [j for j in self.jobs.values() if j.state == RUNNING]
            if len([n for n in self.nodes if n not in job.excluded()]) < job.node_count:
                job.reason = "ReqNodeNotAvail"  # it waits for nodes it may use, whoever else runs
            elif job.array_limit is not None and sum(j.array_id == job.array_id for j in running) >= job.array_limit:
                job.reason = "JobArrayTaskLimit"
            elif self.max_running is not None and sum(j.user == job.user for j in running) >= self.max_running:
                job.reason = "QOSMaxJobsPerUserLimit"
            else:
                self._start(job, job.excluded())

    def _end(self, job: MemoryJob, state: str, exit_code: str | None, usage: Usage | None,
             requeue: bool = False) -> None:
        """End the current attempt now (usage figures given replace the planned ones); requeue: a new one waits."""
        attempt = job.current
        attempt.state, attempt.ended = state, self.now
        attempt.exit_code = exit_code or EXIT_CODES.get(state.split()[0], "0:0")
        if usage is not None:
            attempt.usage = usage
        elif job.plan is not None:
            attempt.usage = job.plan.usage
        job.plan = None
        if requeue:
            job.attempts.append(JobRun())
            job.reason = "BeginTime"

    def _settle(self) -> None:
        """Bring every pending job's dependency reason up to date; a dependency that can never be met ends the
        job CANCELLED when the cluster honours --kill-on-invalid-dep (one end may doom the next: repeated)."""
        changed = True
        while changed:
            changed = False
            for job in self.jobs.values():
                if job.state != PENDING or not job.dependency:
                    continue
                state = self._dependency_state(job.dependency)
                if state == "never" and self.kill_invalid_dep:
                    self._end(job, "CANCELLED", "0:0", None)
                    job.reason = NEVER_SATISFIED
                    changed = True
                elif state == "never":
                    job.reason = NEVER_SATISFIED
                elif state == "wait":
                    job.reason = "Dependency"
                elif job.reason in ("Dependency", NEVER_SATISFIED):
                    job.reason = "None"

    def _dependency_state(self, dependency: str) -> str:
        """Return ``met``, ``wait`` or ``never`` for SLURM's --dependency text; ClusterError for text sbatch
        refuses (an unknown kind, a job it does not know)."""
        any_of = "?" in dependency
        states = []
        for part in dependency.replace("?", ",").split(","):
            kind, _, refs = part.strip().partition(":")
            if kind not in DEPENDENCY_KINDS or not refs:
                raise ClusterError(f"sbatch: error: invalid dependency {part!r}",
                                   expected=f"KIND:JOB[:JOB...] with KIND one of {', '.join(DEPENDENCY_KINDS)}")
            for ref in refs.split(":"):
                tasks = self._tasks([ref.strip()])
                if not tasks:
                    raise ClusterError(f"sbatch: error: Batch job submission failed: Job dependency problem "
                                       f"(no job {ref})")
                states.extend(_satisfied(kind, t) for t in tasks)
        if any_of:
            return "met" if "met" in states else "never" if all(s == "never" for s in states) else "wait"
        return "never" if "never" in states else "met" if all(s == "met" for s in states) else "wait"


class MemoryExecutor(Executor):
    """The ``Executor`` over the in-memory cluster installed in this process (``MemoryCluster.installed``)."""

    kind = "memory"
    runs_here = False
    profile_keys = PROFILE_KEYS

    def __init__(self, profile: ClusterProfile, cluster: MemoryCluster | None = None) -> None:
        super().__init__(profile)
        self.cluster = cluster if cluster is not None else installed_cluster()

    def limits(self, fresh: bool = False) -> SubmitLimits:
        """Return the cluster's submit limits for this profile, the user's queued jobs counted (always fresh)."""
        return self.cluster.limits(self.profile.settings)

    def is_limit_refusal(self, message: str) -> bool:
        """True for the cluster's refusal in sbatch's words (``QOS_REFUSAL``)."""
        return "QOSMaxSubmitJobPerUserLimit" in message or "job submit limit" in message

    def queued_jobs(self, user: str) -> list[tuple[str, str, str]]:
        """Return the user's queued jobs on the cluster, array tasks one by one."""
        return self.cluster.queued_jobs(user)

    def check_time(self) -> None:
        """ClusterError when the stop signal would be due before a job could start anything (as on SLURM)."""
        check_time_room(self.profile)

    def check_resources(self, request: JobRequest, count: int, what: str) -> None:
        """ClusterError when no node of the cluster could run one such task (``sbatch --test-only``)."""
        self.cluster.check_resources(self.settings(request))

    def script(self, request: JobRequest, count: int) -> str | None:
        """Return what would be queued, one setting a line (there is no job script in memory)."""
        lines = [f"# in-memory cluster: {count} task(s) of {request.job_name}"]
        lines += [f"# {k}={v}" for k, v in sorted(self.settings(request).items()) if v is not None]
        return "\n".join(lines) + "\n"

    def settings(self, request: JobRequest) -> dict[str, Any]:
        """Return the settings a job of ``request`` runs with: the profile's, its exclusions added."""
        settings = dict(self.profile.settings)
        if request.exclude:
            settings["exclude"] = ",".join(n for n in (settings.get("exclude"), request.exclude) if n)
        return settings

    def submit(self, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]], request: JobRequest) -> list[Job]:
        """Queue ``len(argument_lists[0])`` tasks of ``fn`` as one array (one job for one task); nothing runs."""
        count = len(argument_lists[0]) if argument_lists else 0
        task_args = [tuple(a[n] for a in argument_lists) for n in range(count)]
        return [Job(job_id) for job_id in self.cluster.submit(fn, task_args, self.settings(request), request)]

    def query(self, job_ids: Sequence[str | None], since: str | None = None) -> SchedulerAnswer:
        """Return the one sacct call's answer about the jobs."""
        return self.cluster.answer(job_ids)

    def queue_states(self, job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
        """Return the state of each task still queued or running (as ``squeue -r`` does)."""
        return self.cluster.queued_states(job_ids)

    def still_queued(self, job_ids: Sequence[str]) -> set[str]:
        """Return the jobs still pending or running (as accounting.still_queued reads squeue)."""
        states = self.cluster.queued_states(job_ids)
        return {j for j in job_ids if j in states or j.split("_")[0] in states}

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        """Cancel the jobs (an array task's id cancels its whole array, as the SLURM executor's scancel does)."""
        return self.cluster.cancel(job_ids)

    def set_dependency(self, job_ids: Sequence[str], dependency: str) -> list[str]:
        """Make the pending tasks of the jobs wait on ``dependency`` instead."""
        return self.cluster.set_dependency(job_ids, dependency)

    def pending_reasons(self, job_ids: Sequence[str]) -> dict[str, str]:
        """Return why each pending task of the jobs waits."""
        return self.cluster.pending_reasons(job_ids)

    def job_logs(self, folder: Path) -> JobLogs:
        """A test writes a job's log where submitit puts it (``<id>_log.err``, ``<id>_log.out``), as on SLURM."""
        return JobLogs(folder, _log_files)


_INSTALLED: list[MemoryCluster] = []  # the clusters ``installed`` in this process, innermost last


def installed_cluster() -> MemoryCluster:
    """Return the in-memory cluster installed now; ClusterError when there is none."""
    if not _INSTALLED:
        raise ClusterError("executor: memory needs an in-memory cluster in this process, and none is installed",
                           expected="`with MemoryCluster().installed():` around the code that submits (tests only)")
    return _INSTALLED[-1]


def _check_final(state: str) -> None:
    if state.split()[0] not in FINAL_STATES:
        raise ValueError(f"{state!r} is not a state a job ends in (one of {', '.join(sorted(FINAL_STATES))})")


def _satisfied(kind: str, job: MemoryJob) -> str:
    """Return whether one task meets one dependency kind: ``met``, ``wait`` (not yet) or ``never``."""
    state = job.state.split()[0]
    if state not in FINAL_STATES:  # pending, running, or requeued: it may still end either way
        return "wait"
    if kind == "afterany":
        return "met"
    ok = state == DONE
    return "met" if ok == (kind == "afterok") else "never"


def _mem_mb(settings: Mapping[str, Any]) -> float | None:
    """Return the memory a job asks for per node in MB (``mem`` like 16G, else ``mem_gb``), None when neither."""
    if settings.get("mem") not in (None, ""):
        size = parse_size_bytes(str(settings["mem"]), default_unit="M")  # sbatch's --mem default unit
        return size / MB if size else None
    gb = settings.get("mem_gb")
    return float(gb) * 1024 if gb else None


def _log_files(folder: Path, job_id: str) -> list[Path]:
    """submitit's stderr and stdout files of ``job_id`` under ``folder``."""
    from submitit.core.utils import JobPaths

    paths = JobPaths(folder, job_id=job_id)
    return [paths.stderr, paths.stdout]


def _ours(state: str) -> JobState:
    """Return one of this cluster's state words (SLURM's) in our own words."""
    word = state.split()[0] if state.strip() else ""
    if word in OUR_STATES:
        return OUR_STATES[word]
    try:
        return JobState(word)
    except ValueError:
        return JobState.UNKNOWN
