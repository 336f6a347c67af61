"""A job array whose tasks read their arguments from one JSON file: one file and one sbatch per array.

submitit's ``map_array`` writes a pickle per task (then renames each after sbatch): at 2,000 tasks that is
most of a sweep's submission time and 2,000 files (4,000 with the results) in the sweep's folder, a cost on a
shared filesystem's metadata server. Here the array writes ``array-<id>.json`` (the function by its module and
name, each task's arguments) and the script submitit renders runs ``python -m hpc_runner.scheduler.slurm.array_task
FILE`` (scheduler/slurm/array_task.py): a line a user can read, and the task's arguments in plain text. The
script is proven as every script is (job_script.py), the logs are where submitit puts them, and the job ids
are ``ARRAY_TASK`` as before. Used when every argument is plain JSON (it reads back equal) and the folder
exists before sbatch (no ``%j`` in it); otherwise ``map_array``.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import ClusterError
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.scheduler.executor import ARRAY_ENTRY, Job

ARGS_PREFIX = "array-"
_SUBMITTED = re.compile(r"Submitted batch job (\d+)")  # sbatch's answer (on a federation: "... on cluster X")
# the arguments file a dry run shows (a submission names its own: array-<12 hex digits>.json)
SHOWN_ARGS = f"{ARGS_PREFIX}ID.json"


def task_arguments(fn: Callable[..., Any], argument_lists: Sequence[Sequence[Any]]) -> str | None:
    """Return the JSON text of an array's tasks (``{"function": "module:name", "tasks": [args...]}``), or None when
    ``fn`` is not one of our array entries (scheduler/executor.py ``array_entry``) or an argument would not read
    back equal (a tuple, an object)."""
    module, name = getattr(fn, "__module__", ""), getattr(fn, "__qualname__", "")
    if not module.startswith("hpc_runner.") or not name.isidentifier() or not getattr(fn, ARRAY_ENTRY, False):
        return None
    tasks = [list(args) for args in zip(*argument_lists, strict=True)]
    data = {"function": f"{module}:{name}", "tasks": tasks}
    try:
        text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None
    return text if json.loads(text) == data else None


def usable_folder(folder: Path) -> bool:
    """Whether an array's log folder can hold its arguments file before sbatch (no job id in its name)."""
    return "%" not in str(folder)


def args_file_for(folder: Path, shown: bool = False) -> Path:
    """A new arguments file's path in ``folder`` (``shown``: the name a dry run prints)."""
    name = SHOWN_ARGS if shown else f"{ARGS_PREFIX}{uuid.uuid4().hex[:12]}.json"
    return Path(folder).expanduser().absolute() / name


def submit_command_array(args_file: Path, script: str, text: str, count: int) -> list[Job]:
    """Write the arguments file and the (proven) script beside it, sbatch it once; return a Job per task
    (ClusterError with sbatch's message when it refuses; nothing is left behind then)."""
    from submitit.core.utils import JobPaths

    folder = args_file.parent
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args_file, text)
    script_file = args_file.with_suffix(".sh")
    write_text_atomic(script_file, script)
    try:
        res = subprocess.run(["sbatch", str(script_file)], capture_output=True, text=True)  # as submitit calls it
    except OSError as exc:
        res = subprocess.CompletedProcess(["sbatch"], 127, "", str(exc))
    said = _SUBMITTED.search(res.stdout) if res.returncode == 0 else None
    job_id = said.group(1) if said else ""
    if not job_id:
        args_file.unlink(missing_ok=True)
        script_file.unlink(missing_ok=True)
        raise _refused(res)
    script_file.replace(folder / f"{job_id}_submission.sh")  # where submitit keeps a job's script
    jobs = []
    for k in range(count):
        paths = JobPaths(folder, job_id=f"{job_id}_{k}", task_id=0)
        logs = {"stdout": str(paths.stdout), "stderr": str(paths.stderr)}
        jobs.append(Job(f"{job_id}_{k}", paths.stdout, paths.stderr, logs))
    return jobs


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


def _refused(res: subprocess.CompletedProcess[str]) -> ClusterError:
    return sbatch_error(RuntimeError(f"{res.stderr}\n{res.stdout}".strip() or f"sbatch exited {res.returncode}"))
