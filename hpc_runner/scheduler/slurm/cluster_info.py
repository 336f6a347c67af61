"""What the scheduler says about itself: MaxArraySize from ``scontrol show config``, and whether its controller
answers at all (``scontrol ping``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from hpc_runner.records.command_output import run_command
from hpc_runner.records.numbers import outside_int

DEFAULT_MAX_ARRAY_SIZE = 1001  # SLURM's own default
NO_CONTROLLER = "no SLURM controller answers"  # how a verdict that no controller answers starts (no limit refusal)
_CACHE: dict[str, dict[str, str]] = {}


def scheduler_config(timeout: float = 20) -> dict[str, str]:
    """Return ``scontrol show config`` as a dict (empty when scontrol is missing or fails); answers are cached."""
    key = os.environ.get("SLURM_CONF", "")
    if key in _CACHE:
        return _CACHE[key]
    try:
        res = run_command(["scontrol", "show", "config"], timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return {}
    if res.returncode != 0:
        return {}
    config = {}
    for line in res.stdout.splitlines():
        m = re.fullmatch(r"(\w+)\s*=\s*(.*)", line)
        if m:
            config[m.group(1)] = m.group(2).strip()
    _CACHE[key] = config
    return config


def max_array_size(fallback: int | None = None) -> tuple[int, str]:
    """Return the largest array a job may have (indices 0..MaxArraySize-1) and where the number came from."""
    value = outside_int(scheduler_config().get("MaxArraySize", ""), low=1)
    if value is not None:
        return value, "scontrol show config"
    if fallback:
        return int(fallback), "the profile's max_array_size"
    return DEFAULT_MAX_ARRAY_SIZE, "SLURM's default (scontrol did not answer)"


def controller_problem(timeout: float = 2.0) -> str | None:
    """Why no job can be submitted from this machine, in one clause (None: the controller answers): no SLURM
    client (sbatch not on PATH), or ``scontrol ping`` failing, saying DOWN or silent for ``timeout`` seconds."""
    if shutil.which("sbatch") is None:
        return "there is no SLURM here (sbatch is not on PATH)"
    try:
        res = run_command(["scontrol", "ping"], timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"no SLURM controller answered `scontrol ping` within {timeout:g} s"
    except OSError as exc:
        return f"`scontrol ping` could not run ({exc.strerror or exc})"
    said = " ".join((res.stdout + " " + res.stderr).split())[:300]
    if res.returncode != 0 or ("DOWN" in said and "UP" not in said):
        return f"{NO_CONTROLLER} (`scontrol ping`: {said or f'exit {res.returncode}'})"
    return None
