"""The SLURM executor: a cluster profile turned into submitit's SlurmExecutor and the exact sbatch script it
submits (proven first, scheduler/slurm/job_script.py); sacct/squeue for states; scancel."""

from __future__ import annotations

import math
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import run_command
from hpc_runner.scheduler.executor import Executor, Job, JobRequest, SchedulerAnswer, SubmitLimits
from hpc_runner.scheduler.job_arguments import task_arguments
from hpc_runner.scheduler.job_environment import REQUEUE_ENV
from hpc_runner.scheduler.job_environment import RESUBMIT as RESUBMIT_WORD
from hpc_runner.scheduler.job_logs import JobLogs
from hpc_runner.scheduler.profile import ClusterProfile, check_time_room
from hpc_runner.scheduler.site_findings import NO_ACCOUNTING, RESUBMIT, uses_workaround
from hpc_runner.scheduler.slurm.accounting import (
    array_ids,
    job_state,
    query_scheduler,
    queued_states,
    scancel,
    still_queued,
)
from hpc_runner.scheduler.slurm.accounts import account_note
from hpc_runner.scheduler.slurm.cluster_info import controller_problem
from hpc_runner.scheduler.slurm.command_job import (
    args_file_for,
    sbatch_error,
    submit_command_job,
    usable_folder,
)
from hpc_runner.scheduler.slurm.follow import follow_job
from hpc_runner.scheduler.slurm.job_logs import slurm_job_logs
from hpc_runner.scheduler.slurm.job_script import (
    check_field,
    check_parameters,
    check_path,
    check_python_command,
    check_text,
    checked_script,
    safe_job_name,
)
from hpc_runner.scheduler.slurm.limits import forget_kept_limits, is_limit_refusal, queued_jobs, read_limits
from hpc_runner.scheduler.slurm.partition_choice import partition_for
from hpc_runner.scheduler.slurm.profile_init import read_cluster
from hpc_runner.scheduler.slurm.resource_check import check_resources, unanswered
from hpc_runner.scheduler.slurm.settings import PROFILE_KEYS
from hpc_runner.scheduler.units import slurm_time

EXPORT_BASES = ("ALL", "NONE", "NIL")
# the profile keys the SLURM executor understands, besides profiles.COMMON_KEYS: key -> (accepted types, what to
# say when the value is wrong)
# the SLURM executor's own profile keys: the fields of slurm/settings.py SlurmSettings

# profile key -> submitit SlurmExecutor parameter (same meaning, passed through when set)
_PASS_THROUGH = {
    "partition": "partition",
    "nodes": "nodes",
    "ntasks_per_node": "ntasks_per_node",
    "cpus_per_task": "cpus_per_task",
    "cpus_per_gpu": "cpus_per_gpu",
    "gpus_per_node": "gpus_per_node",
    "gpus_per_task": "gpus_per_task",
    "gres": "gres",
    "mem": "mem",
    "mem_per_gpu": "mem_per_gpu",
    "account": "account",
    "qos": "qos",
    "constraint": "constraint",
    "exclude": "exclude",
    "setup": "setup",
    "signal_delay_s": "signal_delay_s",
    "srun_args": "srun_args",
}


def check_profile_values(settings: Mapping[str, Any], where: str) -> None:
    """ClusterError for a value of a SLURM key that sbatch could not take (the types are checked already), and for
    any value that must not reach a job script (slurm/job_script.py), named by its key."""
    if "export" in settings and str(settings["export"]).upper() not in EXPORT_BASES:
        raise ClusterError(
            f"export: {settings['export']!r} is not an export base",
            where=where,
            expected=f"one of {', '.join(EXPORT_BASES)} (variables go under env:)",
        )
    for name, value in (settings.get("env") or {}).items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)) or "," in str(value):
            raise ClusterError(
                f"env: {name}={value!r} cannot be passed with sbatch --export",
                where=where,
                expected="NAME: value with a valid variable name and no comma in the value",
            )
    _check_script_values(settings, where)
    gres, gpus = str(settings.get("gres") or ""), settings.get("gpus_per_node")
    if "gpu" in gres and gpus:  # sbatch would get --gres=gpu:2 and --gpus-per-node=1: which one is meant?
        raise ClusterError(f"gres {gres!r} and gpus_per_node {gpus} both ask for GPUs", where=where,
                           expected=f"one of them: --slurm gpus_per_node=null to keep gres {gres!r}, or drop gres "
                           "and set gpus_per_node")
    for key in ("setup", "srun_args", "partitions"):
        if key in settings and not all(isinstance(x, str) for x in settings[key]):
            raise ClusterError(f"{key}: every item must be a string", where=where, expected=PROFILE_KEYS[key][1])
    for key in ("nodes", "signal_delay_s", "array_parallelism", "max_array_size", "max_submit_jobs", "gpus_per_node"):
        if isinstance(settings.get(key), int) and settings[key] < (0 if key == "gpus_per_node" else 1):
            raise ClusterError(f"{key}: {settings[key]} is too small", where=where, expected=PROFILE_KEYS[key][1])
    mem_gb = settings.get("mem_gb")
    if isinstance(mem_gb, float) and not math.isfinite(mem_gb):
        raise ClusterError(f"mem_gb: {mem_gb} is not a finite number", where=where, expected=PROFILE_KEYS["mem_gb"][1])
    if isinstance(mem_gb, int | float) and mem_gb <= 0:
        raise ClusterError(f"mem_gb: {mem_gb} is not positive", where=where, expected=PROFILE_KEYS["mem_gb"][1])


def _check_script_values(settings: Mapping[str, Any], where: str) -> None:
    """ClusterError for a value that must not reach a job script (slurm/job_script.py), named by its key."""
    for key, value in settings.items():
        if key == "python" and value is not None:
            check_python_command(value, where)
        elif key in ("setup", "srun_args", "partitions"):
            for item in value:
                check_text(item, f"{key} item", where)
        elif key in ("env", "sbatch"):
            for name, item in value.items():
                check_text(name, f"{key} name", where)
                check_text(item, f"{key}: {name}", where)
        elif key in ("description", "job_name", "extends"):
            check_text(value, key, where)
        elif isinstance(value, str):
            check_field(key, value, where)


def export_option(profile: ClusterProfile) -> str:
    """Return the value of ``sbatch --export`` (``ALL`` plus the profile's variables)."""
    base = str(profile.get("export", "ALL")).upper()
    env = dict(profile.get("env") or {})
    if uses_workaround(profile.settings, RESUBMIT, profile.get("partition")):  # cluster check: requeue refused
        env.setdefault(REQUEUE_ENV, RESUBMIT_WORD)
    return ",".join([base, *(f"{k}={v}" for k, v in env.items())])


def _mem(mem_gb: float) -> str:
    return f"{int(mem_gb)}GB" if mem_gb == int(mem_gb) else f"{int(mem_gb * 1024)}MB"


def slurm_parameters(
    profile: ClusterProfile,
    *,
    job_name: str,
    hold: bool = False,
    array_parallelism: int | None = None,
    chdir: str | None = None,
    exclude: str | None = None,
    dependency: str | None = None,
    describe: str | None = None,
) -> dict[str, Any]:
    """Return the SlurmExecutor parameters that the profile describes (``chdir``: the jobs' working dir;
    ``exclude``: nodes to avoid besides the profile's own ``exclude``; ``dependency``: SLURM's --dependency,
    with --kill-on-invalid-dep=yes so that a job whose dependency can never be met is ended by SLURM, not left
    pending with reason DependencyNeverSatisfied)."""
    # a bundle's name is free text: only [A-Za-z0-9_.+-] reaches the script (slurm/job_script.py)
    minutes = profile.time_minutes()
    # no --wckey unless the profile names one (submitit writes --wckey=submitit, refused where WCKeys are enforced)
    params: dict[str, Any] = {"job_name": safe_job_name(profile.get("job_name") or job_name),
                              "time": minutes, "wckey": profile.get("wckey")}
    for key, name in _PASS_THROUGH.items():
        value = profile.get(key)
        if value is not None and value != []:
            params[name] = value
    if exclude:
        params["exclude"] = ",".join(n for n in (params.get("exclude"), exclude) if n)
    if profile.get("mem_gb") is not None and "mem" not in params:
        params["mem"] = _mem(float(profile.get("mem_gb")))
    if describe:  # a comment line first: the script says what runs, though its body starts a pickle
        params["setup"] = [f"# {describe}", *(params.get("setup") or [])]
    cpus = profile.get("cpus_per_task")
    srun_args = [str(a) for a in params.get("srun_args") or []]
    if cpus and not any(a.startswith(("--cpus-per-task", "-c")) for a in srun_args):
        # since SLURM 22.05 srun does not inherit --cpus-per-task from sbatch: with task binding the step would
        # get one CPU of the job's N
        params["srun_args"] = [*srun_args, f"--cpus-per-task={int(cpus)}"]
    parallelism = array_parallelism or profile.get("array_parallelism")
    if parallelism:
        params["array_parallelism"] = int(parallelism)
    extra: dict[str, Any] = {"export": export_option(profile), "time": slurm_time(minutes)}
    extra.update({str(k).replace("_", "-"): v for k, v in (profile.get("sbatch") or {}).items()})
    if not extra.get("no-requeue"):  # the job requeues itself after a stop signal: where JobRequeue=0 it needs this
        extra.setdefault("requeue", True)
    if hold:
        extra["hold"] = True
    if chdir:
        extra.setdefault("chdir", chdir)
    if dependency:
        params["dependency"] = dependency
        extra["kill-on-invalid-dep"] = "yes"
    params["additional_parameters"] = extra
    check_parameters(params, profile.where)
    return params


def python_command(profile: ClusterProfile) -> str:
    """Return the command that starts python in the job (the profile's, else this interpreter)."""
    command = profile.get("python") or shlex.quote(sys.executable)
    check_python_command(command, profile.where)
    return command


def sbatch_script(
    profile: ClusterProfile, folder: Path, parameters: dict[str, Any], map_count: int | None = None,
    args_file: Path | None = None, describe: str | None = None,
) -> str:
    """Return the sbatch script submitit writes for these parameters (what ``--dry-run`` prints), proven; with
    ``args_file``, the command job's (scheduler/slurm/command_job.py); ``describe``: its first comment line."""
    try:
        return checked_script(parameters, folder, python_command(profile), map_count, profile.where, args_file,
                              describe)
    except (TypeError, ValueError) as exc:
        raise ClusterError(f"the cluster profile gives submitit a bad parameter ({exc})", where=profile.where) from None


def make_executor(profile: ClusterProfile, folder: Path, parameters: dict[str, Any]) -> Any:
    """Return a submitit SlurmExecutor writing into ``folder`` (which may hold ``%j``)."""
    from submitit import SlurmExecutor as SubmititExecutor

    check_path(Path(folder).expanduser().absolute(), "the job's log folder", profile.where)
    try:
        executor = SubmititExecutor(folder=folder, python=python_command(profile))
    except RuntimeError as exc:  # no srun on PATH
        raise ClusterError(
            f"cannot submit to SLURM from here ({exc})",
            expected="a machine with the SLURM client commands (sbatch, srun) or --cluster local",
        ) from None
    try:
        executor.update_parameters(**parameters)
    except ValueError as exc:
        raise ClusterError(f"submitit refused a parameter of the profile ({exc})", where=profile.where) from None
    return executor


def submit_array(executor: Any, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]]) -> list[Any]:
    """Submit one array through ``executor.map_array``; raise ClusterError with sbatch's message on failure."""
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    count = len(argument_lists[0]) if argument_lists else 0
    _prove(executor, count if count > 1 else None)
    try:
        return executor.map_array(fn, *argument_lists)
    except (FailedJobError, FailedSubmissionError, OSError) as exc:
        raise sbatch_error(exc) from None


def submit_one(executor: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """Submit one job through ``executor.submit``; raise ClusterError with sbatch's message on failure."""
    from submitit.core.utils import FailedJobError, FailedSubmissionError

    _prove(executor, None)
    try:
        return executor.submit(fn, *args)
    except (FailedJobError, FailedSubmissionError, OSError) as exc:
        raise sbatch_error(exc) from None


def _prove(executor: Any, map_count: int | None) -> None:
    """Prove the script the executor is about to hand sbatch (submitit writes it from these same values)."""
    checked_script(executor.parameters, executor.folder, executor.python, map_count)


class SlurmExecutor(Executor):
    """Jobs submitted to SLURM through submitit: one sbatch per group (an array), sacct for states."""

    kind = "slurm"
    runs_here = False
    answers_wait = True  # sacctmgr and sacct wait on slurmdbd, squeue on slurmctld (~0.2-0.3 s each)
    profile_keys = PROFILE_KEYS

    def no_gpu_hint(self) -> str | None:
        """How to ask SLURM for a GPU when the profile asks for none (gpus_per_node, gpus_per_task, gres gpu)."""
        settings = self.profile.settings
        if settings.get("gpus_per_node") or settings.get("gpus_per_task") or "gpu" in str(settings.get("gres") or ""):
            return None
        return "--slurm gpus_per_node=1 (or gres=gpu:TYPE:1; `hpc-runner cluster show` lists the GPU types)"

    def requested_gpus(self) -> int:
        """The GPUs a task asks for on its node: gpus_per_node, else gpus_per_task x tasks per node, else gres gpu:N."""
        settings = self.profile.settings
        if settings.get("gpus_per_node"):
            return int(settings["gpus_per_node"])
        if settings.get("gpus_per_task"):
            return int(settings["gpus_per_task"]) * int(settings.get("ntasks_per_node") or 1)
        found = re.search(r"(?:^|,)gpu(?::[^:,]+)?:([0-9]{1,4})(?:,|$)", str(settings.get("gres") or ""))
        return int(found.group(1)) if found else (1 if re.search(r"(?:^|,)gpu(?:,|$)", str(settings.get("gres") or ""))
                                                  else 0)

    def __init__(self, profile: ClusterProfile) -> None:
        super().__init__(profile)
        self._partition_choice: tuple[str | None, str] | None = None  # asked of sinfo once, when first needed

    @classmethod
    def check_profile(cls, settings: Mapping[str, Any], where: str) -> None:
        """ClusterError for a value sbatch could not take, or that must not reach a job script."""
        check_profile_values(settings, where)

    def unreachable(self, timeout: float = 2.0) -> str | None:
        """Why no job can be submitted from here: no sbatch on PATH, or no controller answers ``scontrol ping``."""
        return controller_problem(timeout)

    def describe_cluster(self, partition: str | None = None) -> list[tuple[str, Any, str]]:
        """Return a profile's lines from sinfo, sacctmgr and scontrol (scheduler/slurm/profile_init.py)."""
        return read_cluster(partition)

    def submission_notes(self, settings: Mapping[str, Any] | None = None) -> list[str]:
        """The dry run's note when the jobs name no account and this SLURM needs one they leave open
        (scheduler/slurm/accounts.py)."""

        note = account_note(self.profile.settings if settings is None else settings)
        return [note] if note else []

    def limits(self, fresh: bool = False) -> SubmitLimits:
        """Return the user's submit limits and queued jobs (sacctmgr, kept a few minutes unless ``fresh``;
        squeue; scontrol)."""
        return read_limits(self.profile.settings, fresh=fresh)

    def is_limit_refusal(self, message: str) -> bool:
        """True when sbatch's message names a submit limit (QOSMaxSubmitJobPerUserLimit...) or a busy controller."""
        return is_limit_refusal(message)

    def queued_jobs(self, user: str) -> list[tuple[str, str, str]]:
        """One squeue call: the user's queued jobs, array tasks one by one."""
        return queued_jobs(user)

    def check_time(self) -> None:
        """ClusterError when the stop signal would be due before a job could start anything."""
        check_time_room(self.profile)

    def parameters(self, request: JobRequest) -> dict[str, Any]:
        """Return submitit's parameters for ``request`` under this profile (every value checked); a profile that
        names no partition gets the one that fits the request (said once, on stderr)."""
        params = slurm_parameters(self.profile, job_name=request.job_name, hold=request.hold,
                                  array_parallelism=request.array_parallelism, chdir=request.chdir,
                                  exclude=request.exclude, dependency=request.dependency)
        if "partition" not in params and (chosen := self._fitting_partition()):
            params["partition"] = chosen
        return params

    def _fitting_partition(self) -> str | None:
        if self._partition_choice is None:
            self._partition_choice = partition_for(self.profile)
            if self._partition_choice[0]:
                print(f"hpc-runner: {self._partition_choice[1]}", file=sys.stderr, flush=True)
        return self._partition_choice[0]

    def check_resources(self, request: JobRequest, count: int, what: str) -> None:
        """``sbatch --test-only`` with the exact script of the largest group: refused resources exit 2."""
        parameters = self.parameters(request)
        check_resources(self.profile, self._script(request, count, parameters), parameters, what=what)

    def script(self, request: JobRequest, count: int) -> str | None:
        """Return the proven sbatch script of a group of ``count`` tasks (its command job's, with the name its
        arguments file is shown by, where the log folder can hold that file)."""
        return self._script(request, count, self.parameters(request))

    def _script(self, request: JobRequest, count: int, parameters: dict[str, Any]) -> str:
        shown = args_file_for(request.folder, array=count > 1, shown=True) if usable_folder(request.folder) else None
        return sbatch_script(self.profile, request.folder, parameters, map_count=count if count > 1 else None,
                             args_file=shown, describe=request.describe)

    def submit(self, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]], request: JobRequest) -> list[Job]:
        """One sbatch: a command job (an array for several tasks) when the arguments are plain JSON, else
        submitit's ``submit``/``map_array``; the script is proven first."""
        try:
            return self._submit(fn, argument_lists, request)
        except ClusterError as exc:
            silent = unanswered(self.profile)  # sbatch's DNS and socket lines: the controller is not there
            if silent is not None:
                raise silent from None
            if is_limit_refusal(exc.message):  # the limits we counted with were not the scheduler's
                forget_kept_limits()
            raise

    def _submit(self, fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]],
                request: JobRequest) -> list[Job]:
        count = len(argument_lists[0]) if argument_lists else 0
        parameters = self.parameters(request)
        text = task_arguments(fn, argument_lists) if count and usable_folder(request.folder) else None
        if text is not None:
            array = count > 1
            args_file = args_file_for(request.folder, array=array)
            script = sbatch_script(self.profile, request.folder, parameters, count if array else None, args_file,
                                   describe=request.describe)
            return submit_command_job(args_file, script, text, count, array)
        if request.describe:  # submitit renders this script itself: what runs is the first setup line
            parameters["setup"] = [f"# {' '.join(request.describe.split())}", *(parameters.get("setup") or [])]
        executor = make_executor(self.profile, request.folder, parameters)
        if count == 1:
            jobs = [submit_one(executor, fn, *(a[0] for a in argument_lists))]
        else:
            jobs = submit_array(executor, fn, argument_lists)
        out = []
        for j in jobs:
            logs = {"stdout": str(j.paths.stdout), "stderr": str(j.paths.stderr)}
            out.append(Job(j.job_id, j.paths.stdout, j.paths.stderr, logs))
        return out

    def query(self, job_ids: Sequence[str | None], since: str | None = None) -> SchedulerAnswer:
        """One sacct call (squeue when sacct does not answer)."""
        settings = self.profile.settings
        accounting = not uses_workaround(settings, NO_ACCOUNTING, settings.get("partition"))
        return query_scheduler(job_ids, since=since, accounting=accounting)

    def queue_states(self, job_ids: Sequence[str], timeout: float = 30) -> dict[str, str] | None:
        """One ``squeue -r`` of the jobs: the state of each task still queued or running, in our words (JobState
        values); None without an answer."""
        states = queued_states(job_ids, timeout)
        return None if states is None else {j: job_state(s).value for j, s in states.items()}

    def job_logs(self, folder: Path) -> JobLogs:
        """submitit's log files of each job (``<id>_log.err``, ``<id>_log.out``) and slurmstepd's verdicts."""
        return slurm_job_logs(folder)

    def still_queued(self, job_ids: Sequence[str]) -> set[str]:
        """The jobs squeue still lists."""
        return still_queued(job_ids)

    def cancel(self, job_ids: Sequence[str]) -> list[str]:
        """One scancel of the scheduler's jobs among ``job_ids``."""
        ids = array_ids(job_ids)
        if ids:
            scancel(ids)
        return ids

    def set_dependency(self, job_ids: Sequence[str], dependency: str) -> list[str]:
        """One ``scontrol update JobId=... Dependency=...`` for the pending jobs among ``job_ids``."""
        check_field("dependency", dependency)
        ids = array_ids(job_ids)
        if ids:
            _scontrol(["update", f"JobId={','.join(ids)}", f"Dependency={dependency}"])
        return ids

    def pending_reasons(self, job_ids: Sequence[str]) -> dict[str, str]:
        """One squeue call: the reason of each pending job (array tasks one by one)."""
        ids = array_ids(job_ids)
        if not ids:
            return {}
        try:
            res = run_command(["squeue", "-h", "-r", "-t", "PENDING", "-j", ",".join(ids), "-o", "%i|%r"],
                                 timeout=60)
        except (OSError, subprocess.SubprocessError):
            return {}
        if res.returncode != 0:
            return {}
        return dict(line.split("|", 1) for line in res.stdout.split() if "|" in line)

    def follow(self, job_id: str, stdout: Path, stderr: Path, *, since: str | None = None) -> str:
        """Print the job's log files as they grow, asking sacct now and then, until the job is final."""
        return follow_job(job_id, stdout, stderr, since=since)


def _scontrol(args: list[str], timeout: float = 60) -> None:
    """Run ``scontrol ARGS``; ClusterError with its message when it refuses."""
    try:
        res = run_command(["scontrol", *args], timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"scontrol {args[0]} failed: {exc}") from None
    if res.returncode != 0:
        raise ClusterError(f"scontrol {args[0]} refused: {(res.stderr or res.stdout).strip()[:500]}")
