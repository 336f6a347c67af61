"""A job (or job array) that runs a readable command: its arguments in one JSON file, one sbatch.

submitit runs a job from a pickle (``python -m submitit.core._submit FOLDER``): a script a user cannot read,
and for an array a pickle per task (then renamed after sbatch), most of a sweep's submission time at 2,000
tasks and 2,000 files (4,000 with the results) on a shared filesystem's metadata server. Here a job writes
``job-<id>.json`` (an array ``array-<id>.json``: the function by its module and name, each task's arguments)
and the script submitit renders runs ``python -u -m hpc_runner.scheduler.job_call FILE``
(scheduler/job_call.py, every backend's; ``task_arguments`` writes the file): a line a user can read, and the
arguments in plain text. The script is proven
as every script is (job_script.py), the logs are where submitit puts them, and the job ids are ``JOB`` and
``ARRAY_TASK`` as before. Used when every argument is plain JSON (it reads back equal) and the folder exists
before sbatch (no ``%j`` in it); otherwise submitit's ``submit``/``map_array``.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from hpc_runner.control_chars import printable
from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.command_output import CommandOutput, run_command
from hpc_runner.scheduler.executor import Job

ARRAY_PREFIX, JOB_PREFIX = "array-", "job-"
_SUBMITTED = re.compile(r"Submitted batch job ([0-9]+)")  # sbatch's answer (on a federation: "... on cluster X")
SHOWN_ID = "ID"  # the arguments file a dry run shows: array-ID.json (a submission names its own: 12 hex digits)


def usable_folder(folder: Path) -> bool:
    """Whether a job's log folder can hold its arguments file before sbatch (no job id in its name)."""
    return "%" not in str(folder)


def args_file_for(folder: Path, array: bool = True, shown: bool = False) -> Path:
    """A new arguments file's path in ``folder`` (``array-...`` or ``job-...``; ``shown``: the name a dry run
    prints)."""
    name = SHOWN_ID if shown else uuid.uuid4().hex[:12]
    return Path(folder).expanduser().absolute() / f"{ARRAY_PREFIX if array else JOB_PREFIX}{name}.json"


def submit_command_job(args_file: Path, script: str, text: str, count: int, array: bool) -> list[Job]:
    """Write the arguments file and the (proven) script beside it, sbatch it once; return a Job per task, or the
    one Job of a job that is no array (ClusterError with sbatch's message when it refuses; nothing is left
    behind then)."""
    folder = args_file.parent
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args_file, text)
    script_file = args_file.with_suffix(".sh")
    write_text_atomic(script_file, script)
    try:
        res = run_command(["sbatch", str(script_file)])  # as submitit calls it
    except OSError as exc:
        res = CommandOutput(("sbatch",), 127, "", str(exc))
    said = _SUBMITTED.search(res.stdout) if res.returncode == 0 else None
    job_id = said.group(1) if said else ""
    if not job_id:
        args_file.unlink(missing_ok=True)
        script_file.unlink(missing_ok=True)
        raise _refused(res) if res.returncode != 0 else _unreadable(res)
    script_file.replace(folder / f"{job_id}_submission.sh")  # where submitit keeps a job's script
    if not array:
        return [_task_job(folder, job_id)]
    return [_task_job(folder, f"{job_id}_{k}") for k in range(count)]


def _task_job(folder: Path, task_id: str) -> Job:
    """A job's (or task's) Job with its logs where submitit's JobPaths puts them (``<folder>/<JOB>_0_log.out``),
    named by plain string formatting: submitit's JobPaths parses each path again, a tenth of a second per
    2,000 tasks."""
    stem = f"{folder}/{task_id}_0_log"  # the folder has no %-tag here (usable_folder), so nothing is replaced
    logs = {"stdout": f"{stem}.out", "stderr": f"{stem}.err"}
    return Job(task_id, Path(logs["stdout"]), Path(logs["stderr"]), logs)


def sbatch_error(exc: BaseException) -> ClusterError:
    """Return the ClusterError for a failed sbatch call, with sbatch's own message."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    relevant = [ln for ln in lines if "error" in ln.lower()] or lines[:3]
    message = " ".join(relevant)[:600] or type(exc).__name__
    return ClusterError(
        f"sbatch refused the submission: {message}",
        hint="Check the partition, account, qos and limits in the cluster profile (or --slurm KEY=VALUE)",
    )


UNREADABLE = "sbatch's answer could not be read"  # how that error starts: no refusal (a job may be queued)


def _unreadable(res: CommandOutput) -> ClusterError:
    """sbatch exited 0 but said no job id in ASCII digits (``Submitted batch job ١``, nothing, another text)."""
    said = " ".join(res.stdout.split())[:200] or "nothing"
    return ClusterError(
        f"{UNREADABLE}: it exited 0 but printed no job id hpc-runner can use ({printable(said)!r}"
        "); nothing was recorded and the job's files were removed",
        expected="'Submitted batch job N' with N in digits 0-9, as sbatch prints it",
        hint="Check with squeue whether a job was queued all the same (and scancel it), and whether sbatch is "
        "wrapped by a script that changes its output",
    )


def _refused(res: CommandOutput) -> ClusterError:
    return sbatch_error(RuntimeError(f"{res.stderr}\n{res.stdout}".strip() or f"sbatch exited {res.returncode}"))
