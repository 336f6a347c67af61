"""SLURM's own part of ``cluster check`` on a compute node: what the job's record in slurmctld says about it.

Asked from inside the check job (scheduler/site_check.py calls ``JobEnvironment.site_probes``): whether the job may
be requeued (``Requeue=1``; sbatch --requeue, or the site's JobRequeue) and the stop signal it was given
(``--signal``). The neutral probes run beside these; the login side asks sacct (scheduler/cluster_check.py, through
the executor).
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

from hpc_runner.records.command_output import run_command

_FIELD = re.compile(r"\b(Requeue|BatchFlag|TimeLimit)=(\S{1,64})")


def job_fields(job_id: str, timeout: float = 30) -> dict[str, str] | None:
    """``scontrol show job -o JOB``'s Requeue, BatchFlag and TimeLimit fields, None without an answer."""
    try:
        res = run_command(["scontrol", "show", "job", "-o", job_id], timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:
        return None
    return dict(_FIELD.findall(res.stdout))


def requeue_setting(fields: dict[str, str] | None) -> dict[str, Any]:
    """The job's requeue flag as a finding: ``Requeue=1`` ok, ``Requeue=0`` refused, no answer unknown."""
    if fields is None or "Requeue" not in fields:
        return {"ok": None, "detail": "scontrol did not say whether the job may be requeued"}
    if fields["Requeue"] == "1":
        return {"ok": True, "detail": "the job may be requeued (Requeue=1)", "flag": 1}
    return {"ok": False, "detail": "the job may not be requeued (Requeue=0: JobRequeue=0 or --no-requeue)", "flag": 0}


def slurm_site_probes(job_id: str | None) -> dict[str, dict[str, Any]]:
    """The SLURM probes of the check job ``job_id``."""
    if not job_id:
        return {}
    return {"requeue_flag": requeue_setting(job_fields(job_id))}
