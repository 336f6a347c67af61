"""`run` started again inside something (the `--safe` sandbox, a `--container` image): the run dir is chosen on
this side (the one resumed, or a new one whose default name is passed on as ``--output_dir`` so both sides agree),
the folders made for it are removed again when nothing ran, and a stop inside, where no SLURM command can be
reached, is followed by the job's requeue from here. Like every command module, it imports only the standard
library at import time (``hpc-runner --help`` stays light); what it needs is imported where it is used."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.records.rundir import check_folder_path, default_run_dir
from hpc_runner.scheduler.job_env import own_job_id, requeue_exit_code, requeue_job


@dataclass
class InnerRun:
    """The command line to start inside, the run dir it writes, and its config as loaded here."""

    argv: list[str]
    run_dir: str
    cfg: Any
    resumed: bool


def inner_run(args: argparse.Namespace, load_config: Callable[[argparse.Namespace], Any]) -> InnerRun:
    """Choose the run dir of ``args`` (a parsed `run`): bad input (not a run dir, a config that does not load, a
    folder that cannot be written) is refused here, before anything is made or started."""
    argv = list(getattr(args, "_argv", None) or sys.argv[1:])
    if args.resume:
        cfg = load_recorded_config(args.resume, parse_cli_overrides(args.override_tokens))[0]
        return InnerRun(argv, os.path.abspath(args.resume), cfg, resumed=True)
    cfg = load_config(args)
    output_dir = args.output_dir
    if output_dir is None:
        output_dir = str(default_run_dir(cfg.name))
        argv += ["--output_dir", os.path.abspath(output_dir)]
    check_folder_path(output_dir)
    return InnerRun(argv, os.path.abspath(output_dir), cfg, resumed=False)


def make_folders(folder: str) -> list[str]:
    """Make ``folder`` and its missing parents; return the ones made, outermost first."""
    missing = []
    path = Path(folder)
    while not path.exists() and path != path.parent:
        missing.append(str(path))
        path = path.parent
    os.makedirs(folder, exist_ok=True)
    return list(reversed(missing))


def remove_made(made: list[str]) -> None:
    """Remove the folders this side made (innermost first), only those the run left empty."""
    for path in reversed(made):
        try:
            os.rmdir(path)
        except OSError:
            continue


def requeue_after_stop(run_dir: str) -> int | None:
    """Ask the scheduler to requeue this job (the run inside checkpointed and stopped); say what happened. Return
    the exit status the job must end with for its scheduler to run it again (Grid Engine: 99), else None."""
    if not own_job_id():
        return None
    job = requeue_job()
    then = (f"requeued job {job}; it continues from the checkpoint" if job else
            f"the scheduler is ending job {own_job_id()} (cancelled or not requeueable); continue with: "
            f"hpc-runner run --resume {run_dir}")
    print(f"hpc-runner: {then}", file=sys.stderr, flush=True)
    return requeue_exit_code() if job else None
