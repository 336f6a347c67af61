"""The ``--cpus N`` option of run, submit and sweep (argparse only: no heavy imports)."""

from __future__ import annotations

import argparse
from typing import Any

from hpc_runner.cli.slurm_options import positive_int
from hpc_runner.errors import UserError
from hpc_runner.resources.cpus import CLI_FLAG, ENV_CPUS, decide_cpus, set_explicit_cpus
from hpc_runner.scheduler.select import executor_for

LOCAL_ORIGIN = "cpus_per_task of the local profile"


def add_cpus_argument(parser: argparse.ArgumentParser, *, submits: bool) -> None:
    """Add ``--cpus N``: the CPUs of the run (submit/sweep: of each job, as cpus_per_task)."""
    where = ("each job's CPUs: sets cpus_per_task of the profile (sbatch --cpus-per-task); with --cluster "
             "local, the CPUs of the runs here" if submits else "the CPUs this run uses")
    parser.add_argument(
        CLI_FLAG, type=positive_int, metavar="N",
        help=f"{where}; torch threads, OMP/MKL/OpenBLAS variables and data workers follow "
        f"(default: ${ENV_CPUS}, else SLURM_CPUS_PER_TASK, else the affinity mask)",
    )


def apply_run_cpus(args: argparse.Namespace) -> None:
    """``run --cpus N``: make N the explicit setting of this process (a bad $HPCR_CPUS fails here, before the run)."""
    if getattr(args, "cpus", None):
        set_explicit_cpus(args.cpus, CLI_FLAG)
    decide_cpus()


def cpus_into_profile_settings(args: argparse.Namespace) -> None:
    """``submit/sweep --cpus N``: pass N to the profile as ``--slurm cpus_per_task=N`` (before it is loaded)."""
    decide_cpus()  # a bad $HPCR_CPUS would reach every job through sbatch --export=ALL: refuse it now
    if getattr(args, "cpus", None):
        said = [s for s in getattr(args, "slurm", None) or [] if s.replace("-", "_").startswith("cpus_per_task=")]
        if said and said[-1].split("=", 1)[1].strip() != str(args.cpus):
            raise UserError(f"--cpus {args.cpus} and --scheduler-option {said[-1]} ask for different CPUs per task; "
                            "nothing was submitted", expected="one of them")
        args.slurm = [*(getattr(args, "slurm", None) or []), f"cpus_per_task={args.cpus}"]


def apply_local_profile_cpus(profile: Any, args: argparse.Namespace | None = None) -> None:
    """A local profile runs its jobs in this process: its cpus_per_task (if any) becomes their explicit setting."""
    if executor_for(profile).runs_here and profile.get("cpus_per_task"):
        origin = CLI_FLAG if getattr(args, "cpus", None) else LOCAL_ORIGIN
        set_explicit_cpus(int(profile.get("cpus_per_task")), origin)
