"""A run that was given GPUs must see them: an error, not a silent run on the CPU.

The slot runner of ``--pack-parallel`` sets ``HPCR_ASSIGNED_GPUS`` to the ids it put in the point's
CUDA_VISIBLE_DEVICES. When torch then sees no GPU (ids the CUDA driver does not know here: global
ids under cgroup device limits, a typo), the point would train on the CPU for hours without a word.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from hpc_runner.errors import ClusterError
from hpc_runner.records.environment import switch

ASSIGNED_ENV = "HPCR_ASSIGNED_GPUS"


def assigned_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """Return the GPU ids this process was given (``HPCR_ASSIGNED_GPUS``), empty when it was given none."""
    environ = os.environ if environ is None else environ
    return [g.strip() for g in environ.get(ASSIGNED_ENV, "").split(",") if g.strip()]


def assigned_gpu_problem(environ: Mapping[str, str], cuda_devices: int) -> str | None:
    """Return why a process given GPUs that sees ``cuda_devices`` of them cannot run, or None when it can."""
    given = assigned_gpus(environ)
    if not given or cuda_devices > 0:
        return None
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    return (f"this run was given GPU {','.join(given)} ({ASSIGNED_ENV}) but torch sees no GPU "
            f"(CUDA_VISIBLE_DEVICES={visible!r}); it would train on the CPU instead")


FAKE_GPUS_ENV = "HPCR_FAKE_GPUS"  # the cluster's GPUs are stand-ins (the local test cluster): CPU runs are meant


def check_assigned_gpus(environ: Mapping[str, str] | None = None) -> None:
    """Raise ClusterError when this process was given GPUs and ``torch.cuda.device_count()`` is 0."""
    environ = os.environ if environ is None else environ
    if not assigned_gpus(environ) or switch(FAKE_GPUS_ENV, default=False, environ=environ):
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    problem = assigned_gpu_problem(environ, count)
    if problem is not None and torch.version.cuda is None:
        problem += " (this torch is a CPU-only build: install the CUDA build of torch in the job's environment)"
    if problem is not None:
        raise ClusterError(
            problem,
            expected="GPU ids as this process numbers them: under cgroup device limits a child counts from 0 "
            "within the job's GPUs, not by the node's global ids (SLURM_JOB_GPUS)",
            hint="check the slot's CUDA_VISIBLE_DEVICES, or run without --pack-parallel",
        )
