"""The Grid Engine executor: a profile's ``gridengine:`` requests turned into a proven ``#$`` script, one
``qsub -terse`` per group of tasks (an array ``-t 1-N``), states from ``qstat -xml`` and ``qacct -j``, ``qdel``.

A group of tasks runs as every backend's does (scheduler/job_call.py): its arguments in one JSON file in the log
folder (``array-<hex>.json``, ``job-<hex>.json``: the function by its module and name, each task's arguments), and
a script that runs ``python -u -m hpc_runner job FILE`` (cli/job.py: ``hpc-runner job FILE`` by hand).
Only hpc-runner's job entries (``job_entry``) with plain JSON arguments can be submitted: there is no pickle
fallback. After qsub the script is kept beside the logs as ``<job>_submission.sh``; Grid Engine writes the logs
as ``<name>.o<job>[.<task>]`` and ``.e`` there.

Dependencies: a request's ``dependency`` (``afterok:12:13``, ``afterany:12``) becomes ``-hold_jid 12,13``. Grid
Engine 8.1.9 has no "after OK": the dependent job starts when its dependencies ENDED, whatever their exit; the
stage that starts must check its inputs (hpc-runner's pipeline stages do).
"""

from __future__ import annotations

import getpass
import re
import shlex
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.scheduler import job_arguments
from hpc_runner.scheduler.executor import (
    Executor,
    Job,
    JobRequest,
    Limit,
    SchedulerAnswer,
    SubmitLimits,
    job_entry_name,
)
from hpc_runner.scheduler.gridengine import commands
from hpc_runner.scheduler.gridengine.answers import Report, Submitted, is_limit_refusal, native_id
from hpc_runner.scheduler.gridengine.job_script import job_script, log_paths
from hpc_runner.scheduler.gridengine.settings import PROFILE_KEYS, GridEngineSettings
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_NOWHERE, FROM_QUEUE
from hpc_runner.scheduler.job_status import JobState, JobStatus, Usage
from hpc_runner.scheduler.profile import ClusterProfile

WORDS = {FROM_ACCOUNTING: "qacct", FROM_QUEUE: "qstat", FROM_NOWHERE: "nothing"}
_DEPENDENCY = re.compile(r"(after|afterok|afterany|afternotok|aftercorr):([0-9_]{1,40}(?::[0-9_]{1,40})*)")
SHOWN_ID = "ID"


def hold_ids(dependency: str | None) -> list[str]:
    """Grid Engine's ``-hold_jid`` ids for a request's dependency (``afterok:12:13_2,afterany:14`` -> 12, 13,
    14); ClusterError for one that is not written so."""
    if not dependency:
        return []
    ids: list[str] = []
    for part in dependency.replace("?", ",").split(","):
        m = _DEPENDENCY.fullmatch(part.strip())
        if m is None:
            raise ClusterError(f"dependency {dependency[:80]!r} cannot become -hold_jid",
                               expected="afterok:ID[:ID], afterany:ID (job ids, an array's id for all its tasks)")
        ids.extend(native_id(j)[0] for j in m.group(2).split(":"))
    return list(dict.fromkeys(ids))


class GridEngineExecutor(Executor):
    """Jobs submitted to Grid Engine with qsub: one array per group, qstat and qacct for states, qdel."""

    kind = "gridengine"
    runs_here = False
    answers_wait = True  # qconf, qstat and qacct wait on the qmaster or read the accounting file
    profile_keys = PROFILE_KEYS

    @classmethod
    def check_profile(cls, settings: Mapping[str, Any], where: str) -> None:
        """ClusterError for a ``gridengine:`` value qsub could not take."""
        if any(key in settings for key in PROFILE_KEYS):
            GridEngineSettings.from_profile(settings, where)

    def __init__(self, profile: ClusterProfile) -> None:
        super().__init__(profile)
        self.settings = GridEngineSettings.from_profile(
            profile.settings, profile.where,
            time_minutes=profile.time_minutes() if profile.get("time") is not None else None)

    def unreachable(self, timeout: float = 2.0) -> str | None:
        return commands.qmaster_problem(timeout)

    # ------------------------------------------------------------------------------------------- limits

    def limits(self, fresh: bool = False) -> SubmitLimits:
        """``max_u_jobs`` and ``max_jobs`` of the global configuration (Grid Engine counts an array as ONE job),
        ``max_aj_tasks`` as the largest array; the user's queued jobs from one qstat."""
        user = getpass.getuser()
        found = commands.global_limits()
        queued = commands.queued_statuses(user)
        jobs = sorted({j.split("_")[0] for j in queued})
        out = SubmitLimits(user=user, jobs=[(j, "", "") for j in jobs])
        if found.max_u_jobs:  # an array counts as ONE job (counts_arrays): the governor counts it so
            out.limits.append(Limit("max_u_jobs", "the global configuration (qconf -sconf)", found.max_u_jobs,
                                    queued=len(jobs), counts_arrays=True))
        if found.max_jobs:
            out.limits.append(Limit("max_jobs", "the global configuration (qconf -sconf), every user's jobs",
                                    found.max_jobs, queued=len(jobs), counts_arrays=True))
        if found.max_aj_tasks:
            out.max_array_size = found.max_aj_tasks + 1  # SLURM's MaxArraySize is one above the largest index
            out.max_array_source = "max_aj_tasks (qconf -sconf)"
        out.notes.append("Grid Engine counts an array as one job against max_u_jobs")
        if found.max_aj_instances:
            out.notes.append(f"at most {found.max_aj_instances} tasks of one array run at once (max_aj_instances)")
        return out

    def is_limit_refusal(self, message: str) -> bool:
        return is_limit_refusal(message)

    def check_time(self) -> None:
        """Nothing to check: the stop signal (-notify) comes the queue's ``notify`` seconds before a kill."""
        return None

    def check_resources(self, request: JobRequest, count: int, what: str) -> None:
        """``qsub -w v`` of the exact script: ClusterError with Grid Engine's words when no queue could ever run
        it (a PE with too few slots, more h_vmem than a host has, an unknown queue). Nothing is submitted, and
        nothing is written where the job will run: the probe script lives in a folder of its own (a sweep's or a
        pipeline stage's folder must stay empty until it is submitted)."""
        folder = Path(request.folder).expanduser().absolute()
        with tempfile.TemporaryDirectory(prefix="hpcr-qsub-check-") as probe_dir:
            probe = Path(probe_dir) / "check.sh"
            write_text_atomic(probe, self._script(request, count, folder / f"array-{SHOWN_ID}.json"))
            why = commands.verify(probe)
        if why is not None:
            raise ClusterError(f"Grid Engine could never start {what}: {why}",
                               hint="Check gridengine: queue, pe, slots, h_vmem and h_rt against qconf -sq QUEUE")

    # ------------------------------------------------------------------------------------------- submit

    def python_words(self) -> list[str]:
        command = self.profile.get("python")
        return shlex.split(command) if command else [sys.executable]

    def _script(self, request: JobRequest, count: int, args_file: Path, hold_jids: Sequence[str] = ()) -> str:
        folder = str(Path(request.folder).expanduser().absolute())
        parallelism = request.array_parallelism or self.profile.get("array_parallelism")
        return job_script(self.settings, job_name=request.job_name, log_folder=folder,
                          command=[*self.python_words(), *job_arguments.JOB_COMMAND, str(args_file)],
                          workdir=request.chdir, array_size=count if count > 1 else None,
                          max_running=int(parallelism) if parallelism else None,
                          hold_jids=[*hold_ids(request.dependency), *hold_jids], hold=request.hold,
                          setup=[str(s) for s in self.profile.get("setup") or []], describe=request.describe)

    def script(self, request: JobRequest, count: int) -> str | None:
        folder = Path(request.folder).expanduser().absolute()
        name = f"{'array' if count > 1 else 'job'}-{SHOWN_ID}.json"
        return self._script(request, count, folder / name)

    def submit(self, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]], request: JobRequest) -> list[Job]:
        """One qsub: the arguments file and the proven script written in the log folder, then ``qsub -terse``;
        a Job per task (ours ``<job>_<k>``, Grid Engine's task k+1), or the one Job of a single task."""
        count = len(argument_lists[0]) if argument_lists else 0
        text = job_arguments.task_arguments(fn, argument_lists) if count else None
        if text is None:
            raise ClusterError(f"the Grid Engine executor runs hpc-runner's job entries with plain JSON arguments "
                               f"only, not {job_entry_name(fn)}",
                               expected="a function marked @job_entry and listed in JOB_ENTRIES")
        folder = Path(request.folder).expanduser().absolute()
        folder.mkdir(parents=True, exist_ok=True)
        array = count > 1
        args_file = folder / f"{'array' if array else 'job'}-{uuid.uuid4().hex[:12]}.json"
        script = self._script(request, count, args_file)
        write_text_atomic(args_file, text)
        script_file = args_file.with_suffix(".sh")
        write_text_atomic(script_file, script)
        try:
            submitted = as_asked(commands.submit(script_file), count)
        except ClusterError:
            args_file.unlink(missing_ok=True)
            script_file.unlink(missing_ok=True)
            raise
        script_file.replace(folder / f"{submitted.job_id}_submission.sh")
        jobs = []
        for k, job_id in enumerate(submitted.our_ids()):
            out, err = log_paths(str(folder), request.job_name, submitted.job_id, k + 1 if array else None)
            jobs.append(Job(job_id, Path(out), Path(err), {"stdout": out, "stderr": err}))
        return jobs

    # ------------------------------------------------------------------------------------------- states

    def query(self, job_ids: Sequence[str | None], since: str | None = None) -> SchedulerAnswer:
        """One ``qacct -j`` per job (array) of ours, then one qstat of the user's jobs only when some task qacct
        has no final record of (a sweep that ended: one call). A task qstat lists is queued or running (a rerun
        after exit 99 too); one qacct knows has ended (its last record; earlier ones are requeues)."""
        wanted = [j for j in job_ids if j and native_id_or_none(j)]
        if not wanted:
            return SchedulerAnswer({}, FROM_NOWHERE, words=WORDS)
        calls = 0
        reports: dict[str, Report] = {}
        for number in dict.fromkeys(j.split("_")[0] for j in wanted):
            try:
                reports.update(commands.finished_reports(number))
            except ClusterError as exc:
                return SchedulerAnswer({}, FROM_NOWHERE, calls=calls + 1, error=exc.message, words=WORDS)
            calls += 1
        ended = {j: r for j, r in reports.items() if r.status.state.final}
        statuses: dict[str, JobStatus] = {}
        if any(j not in ended for j in wanted):
            try:
                queued = commands.queued_statuses(getpass.getuser())
            except ClusterError as exc:
                return SchedulerAnswer({}, FROM_NOWHERE, calls=calls + 1, error=exc.message, words=WORDS)
            calls += 1
            for job_id in wanted:
                number = job_id.split("_")[0]
                if job_id in queued:
                    statuses[job_id] = queued[job_id]
                elif "_" not in job_id:
                    statuses.update({k: v for k, v in queued.items() if k.split("_")[0] == number})
        usage: dict[str, Usage] = {}
        attempts: dict[str, list[Any]] = {}
        for job_id, report in reports.items():
            if job_id in statuses:  # queued again (a rerun): qstat's word is the newer
                continue
            statuses[job_id] = report.status
            usage[job_id] = report.usage
            if report.attempts:
                attempts[job_id] = list(report.attempts)
        source = FROM_ACCOUNTING if reports else FROM_QUEUE
        return SchedulerAnswer(statuses, source, calls=calls, usage=usage, attempts=attempts, words=WORDS)

    def queue_states(self, job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
        try:
            queued = commands.queued_statuses(getpass.getuser())
        except ClusterError:
            return None
        numbers = {j.split("_")[0] for j in job_ids}
        return {k: v.state.value for k, v in queued.items() if k.split("_")[0] in numbers}

    def still_queued(self, job_ids: Sequence[str]) -> set[str]:
        try:
            queued = commands.queued_statuses(getpass.getuser())
        except ClusterError:
            return set(job_ids)
        numbers = {k.split("_")[0] for k in queued}
        return {j for j in job_ids if j in queued or ("_" not in j and j in numbers)}

    def pending_reasons(self, job_ids: Sequence[str]) -> dict[str, str]:
        """qstat's state letters of each pending task (``hqw``: held or waiting on -hold_jid; ``Eqw``: error)."""
        try:
            queued = commands.queued_statuses(getpass.getuser())
        except ClusterError:
            return {}
        numbers = {j.split("_")[0] for j in job_ids}
        return {k: v.raw for k, v in queued.items()
                if k.split("_")[0] in numbers and v.state is not JobState.RUNNING}

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        """One qdel of the jobs among ``job_ids`` (an array task's id cancels that task only)."""
        ids = [j for j in dict.fromkeys(job_ids) if j and native_id_or_none(j)]
        if ids:
            commands.cancel(ids)
        return ids

    def set_dependency(self, job_ids: Sequence[str], dependency: str) -> list[str]:
        """``qalter -hold_jid`` of the queued jobs among ``job_ids``."""
        ids = [j for j in dict.fromkeys(job_ids) if j and native_id_or_none(j)]
        after = hold_ids(dependency)
        if ids and after:
            commands.hold_on(ids, after)
        return ids


def as_asked(submitted: Submitted, count: int) -> Submitted:
    """The job qsub answered, with the tasks the script asked for (``-t 1-COUNT``; none for one task). An answer
    that names the job only is given those tasks (a site's qsub wrapper may print the number alone); an answer whose
    tasks are not the ones asked, or an array for one task, is not trusted: the job it names is cancelled (its
    arguments file is removed by the caller, so a task that starts anyway ends at once) and ClusterError says why, so
    no point is recorded unsubmitted while a task of it runs, or submitted twice."""
    asked = range(1, count + 1) if count > 1 else range(0)
    if submitted.tasks == asked:
        return submitted
    if count > 1 and not submitted.array:
        return Submitted(submitted.job_id, asked)
    commands.cancel([submitted.job_id])
    shown = f"{submitted.tasks.start}-{submitted.tasks.stop - 1}" if submitted.array else "none"
    raise ClusterError(f"qsub answered job {submitted.job_id} with tasks {shown}, but the script asked for "
                       f"{f'tasks 1-{count}' if count > 1 else 'one job, no tasks'}; the job was cancelled (qdel) "
                       "and nothing is recorded as submitted",
                       expected="qsub -terse's answer for what was asked: 1234, or 1234.1-N:1 for an array of N")


def native_id_or_none(job_id: str) -> tuple[str, int | None] | None:
    """Grid Engine's id of ours, None for an id that is not a scheduler's (a local run's)."""
    try:
        return native_id(job_id)
    except ClusterError:
        return None
