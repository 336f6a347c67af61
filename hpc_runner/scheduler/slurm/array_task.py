"""The name earlier versions' array scripts run (``python -m hpc_runner.scheduler.slurm.array_task FILE``):
tasks still queued when hpc-runner is upgraded start here; it is scheduler/job_call.py."""

from __future__ import annotations

import sys

from hpc_runner.scheduler.job_call import main

if __name__ == "__main__":
    sys.exit(main())
