"""What a job of ``hpc-runner submit NAME ...`` runs: the same command function as ``hpc-runner NAME ...``.

submitit pickles ``run_monai_command`` by reference (module + name), so the job's Python imports
hpc_runner and re-parses the argv it was given: the job does exactly what the command does here.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from hpc_runner.config.monai_bridge import silence_monai_code_warning
from hpc_runner.errors import UserError
from hpc_runner.monai_cli.commands import parse_argv, run_parsed
from hpc_runner.progress_bars import no_bars_without_a_terminal
from hpc_runner.quick_exit import freeze_at_exit
from hpc_runner.resources.threads import use_cpu_budget
from hpc_runner.scheduler.executor import job_entry


class CommandFailed(RuntimeError):
    """The command refused its input inside the job (the pre-flight missed it); the message is the paragraph."""


@job_entry
def run_monai_command(name: str, argv: Sequence[str]) -> dict[str, Any]:
    """Run MONAI bundle command ``name`` with ``argv`` (as after ``hpc-runner NAME``); raise unless it succeeds."""
    freeze_at_exit()
    no_bars_without_a_terminal()
    use_cpu_budget()
    silence_monai_code_warning()  # shown once, when it was submitted; not again in the job
    print(f"hpc-runner: job runs {name} {shlex.join(argv)}", flush=True)
    try:
        result = run_parsed(name, parse_argv(name, argv))
    except UserError as exc:
        raise CommandFailed(f"hpc-runner {name}: {exc.paragraph()}") from None
    print(f"hpc-runner: {name} done", flush=True)
    return {"command": name, "status": "completed", "result": None if result is None else str(result)}
