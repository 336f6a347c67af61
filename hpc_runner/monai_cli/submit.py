"""``hpc-runner submit NAME ARGS...`` for MONAI's bundle commands: pre-flight here, then one job running NAME.

The job folder (``--job-dir``, default ``runs/<NAME>/<time>``) gets ``command.yaml`` (the command, the
working dir, the cluster profile, the job id and its log files) and the job's logs in ``jobs/``. The job
runs in the submitting working dir, so relative paths mean what they mean here. Before anything is
queued the command is checked as far as it can be without doing its work (configs load, files and
checkpoints exist, the output folder is writable, the network builds, the workflow class imports and
has the properties its ``--workflow_type`` needs) and the scheduler accepts the resources (the executor's
``check_resources``: SLURM's ``sbatch --test-only``).
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs.governor import outside_the_job
from hpc_runner.jobs.ledger import JOB_FOLDER
from hpc_runner.monai_cli.arguments import quiet_summary
from hpc_runner.monai_cli.commands import parse_argv, prepare_parsed
from hpc_runner.monai_cli.job import run_monai_command
from hpc_runner.monai_cli.workflow import WorkflowPlan
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.rundir import check_folder_path, default_run_dir, dump_yaml, now_iso
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.select import executor_for

COMMAND_FILE = "command.yaml"


@dataclass
class CommandSubmission:
    """What was submitted: the job folder, the job id and its log files (``ran_here``: the local executor
    ran it in this process, ``failed`` says how that went)."""

    folder: Path
    job_id: str
    stdout: str = ""
    stderr: str = ""
    failed: bool = False
    ran_here: bool = False


def default_job_dir(name: str, root: Path = Path("runs")) -> Path:
    """Return ``runs/<name>/<timestamp>``, made unique."""
    return default_run_dir(name, root)


def preflight(name: str, argv: Sequence[str]) -> None:
    """Check command ``name`` with ``argv`` as far as possible without doing its work; raise UserError if bad."""
    with quiet_summary():  # the job prints it
        plan = prepare_parsed(name, parse_argv(name, argv))
    if isinstance(plan, WorkflowPlan) and plan.problems:
        raise UserError(
            f"pre-flight: the {plan.workflow_type} workflow lacks properties that check_properties() expects: "
            f"{'; '.join(plan.problems)}; nothing was submitted",
            hint="Add them to the config, drop --workflow_type, or pass --no-preflight to queue it anyway",
        )


def _record(folder: Path, name: str, argv: Sequence[str], profile: Any, job: dict[str, Any]) -> None:
    record = {"command": name, "argv": list(argv), "shell": shlex.join(["hpc-runner", name, *argv]),
              "cwd": os.getcwd(), "submitted": now_iso(), "cluster": profile.to_record(), "job": job}
    write_text_atomic(folder / COMMAND_FILE, dump_yaml(record))


def submit_command(
    name: str,
    argv: Sequence[str],
    profile: Any,
    folder: Path | None = None,
    *,
    hold: bool = False,
    dry_run: bool = False,
    run_preflight: bool = True,
) -> CommandSubmission | str:
    """Pre-flight, then submit one job running ``hpc-runner NAME ARGV`` through the profile's executor (the
    local one runs it here). Return the submission, or with ``dry_run`` the script (nothing written or queued).
    """
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    if run_preflight:
        preflight(name, argv)
    folder = Path(folder) if folder else default_job_dir(name)
    check_folder_path(folder, "the job folder")
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"the job folder {folder} already exists and is not empty", expected="a new --job-dir")
    request = JobRequest(job_name=f"hpcr-{name}", folder=folder / JOB_FOLDER, chdir=os.getcwd(), hold=hold)
    if dry_run:
        script = executor.script(request, 1)
        if script is None:
            return f"# profile '{profile.name}' runs `hpc-runner {name} {shlex.join(argv)}` here (no job script)"
        return script
    if run_preflight:
        executor.check_resources(request, 1, "the job")
    folder.mkdir(parents=True, exist_ok=True)
    with outside_the_job():
        job = executor.submit(run_monai_command, [[name], [list(argv)]], request)[0]
    _record(folder, name, argv, profile, {"id": job.job_id, **job.logs})
    if executor.runs_here:
        failed = executor.run_pending(lambda line: print(line, file=sys.stderr))
        return CommandSubmission(folder, job.job_id, failed=bool(failed), ran_here=True)
    return CommandSubmission(folder, job.job_id, job.logs.get("stdout", ""), job.logs.get("stderr", ""))


def command_argv(args: Any, submit_only: set[str]) -> list[str]:
    """Rebuild the command's own argv from ``submit``'s parsed arguments: its positionals, the options that
    submit's parser took but belong to the command (``--config_file``, ``--meta_file``, ...), the overrides."""
    argv = list(getattr(args, "command_args", None) or [])
    for dest, value in vars(args).items():
        if dest in submit_only or dest in ("command", "entry", "command_args", "override_tokens") or value is None \
                or dest.startswith("_"):  # the CLI's own notes on the namespace (the argv it was given), not options
            continue
        if value is False:
            continue
        flag = {"monai_short_n": "-n", "monai_short_p": "-p"}.get(dest, f"--{dest}")
        if value is True:
            argv.append(flag)
        elif isinstance(value, list):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv + list(getattr(args, "override_tokens", None) or [])
