#!/usr/bin/env python3
"""Record what the local SLURM prints for the commands hpc-runner parses, as golden files for the tests.

Usage (with the local cluster up: ``scripts/local-slurm.sh start; eval "$(scripts/local-slurm.sh env)"``)::

    python scripts/record_slurm_goldens.py [tests/scheduler/golden]

It queues a handful of tiny jobs (about 30 s): an array whose tasks complete, fail (exit 3) and are
cancelled while running, a job requeued while running (``scontrol requeue``) that then completes, and a
job held on a dependency that can never be met. Then it writes, with the exact options hpc-runner uses:

- ``sacct.txt``: ``sacct -D --parsable2 -o <SACCT_FIELDS> -j IDS`` (scheduler/slurm/accounting.py);
- ``squeue_states.txt``: ``squeue -h -r -j IDS -o %i|%T`` while the held job waits;
- ``squeue_reasons.txt``: ``squeue -h -j ID -o %i|%r`` of the held job (pending reasons);
- ``scontrol_show_job.txt``: ``scontrol show job -o ID`` of a running job (job_clock's EndTime);
- ``scontrol_show_config.txt``: ``scontrol show config`` (cluster_info: MaxArraySize and friends);
- ``sinfo.txt``: ``sinfo -h -o "%P %a %T"``;
- ``jobs.json``: which job id is which case, for the tests.

tests/scheduler/test_golden_outputs.py reads them through our parsers, and checks that the in-memory
cluster's sacct text has the recorded header, so the two schedulers the tests use keep one contract.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hpc_runner.scheduler.slurm.accounting import SACCT_FIELDS  # noqa: E402

FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


def run(*args: str, check: bool = True) -> str:
    """Run a SLURM command; return its stdout."""
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {res.stderr.strip()}")
    return res.stdout


def sbatch(*args: str) -> str:
    """Submit a job; return its id."""
    return run("sbatch", "--parsable", "-o", "/dev/null", "--time=5", *args).strip().split(";")[0]


def state(job: str) -> str:
    """The controller's state of one job or task."""
    return run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T", check=False).strip() or "GONE"


def wait(check, what: str, timeout: float = 120) -> None:
    """Poll ``check()`` until it is true, or stop after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} not seen after {timeout} s")
        time.sleep(0.5)


def main(argv: list[str]) -> int:
    """Queue the cases, wait for them and write the golden files."""
    out = Path(argv[0]) if argv else ROOT / "tests" / "scheduler" / "golden"
    out.mkdir(parents=True, exist_ok=True)
    array = sbatch("--array=0-2", "--wrap",
                   'case $SLURM_ARRAY_TASK_ID in 0) true;; 1) exit 3;; 2) sleep 300;; esac')
    requeued = sbatch("--requeue", "--open-mode=append", "--wrap",
                      '[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] || sleep 300')
    wait(lambda: state(f"{array}_2") == "RUNNING" and state(requeued) == "RUNNING", "the sleepers running")
    show_job = run("scontrol", "show", "job", "-o", requeued)
    held = sbatch("--dependency", f"afterok:{array}_1", "--kill-on-invalid-dep=no", "--wrap", "true")
    wait(lambda: "DependencyNeverSatisfied" in run("squeue", "-h", "-j", held, "-o", "%i|%r", check=False),
         "the held job's reason", timeout=90)
    squeue_states = run("squeue", "-h", "-r", "-j", ",".join([array, requeued, held]), "-o", "%i|%T")
    squeue_reasons = run("squeue", "-h", "-j", held, "-o", "%i|%r")
    run("scancel", f"{array}_2")
    run("scontrol", "requeue", requeued)
    run("scancel", held)
    ids = [array, requeued, held]
    wait(lambda: all(state(j) in (*FINAL, "GONE") for j in (f"{array}_2", requeued, held)), "every job ended",
         timeout=180)

    def sacct() -> str:
        return run("sacct", "-D", "--parsable2", "-o", SACCT_FIELDS, "-j", ",".join(ids))

    # sacct lags the controller: wait until every record has its final state
    wait(lambda: all(x in sacct() for x in (f"{array}_2|CANCELLED", f"{requeued}|COMPLETED", f"{held}|CANCELLED")),
         "sacct's final states", timeout=60)
    files = {
        "sacct.txt": sacct(),
        "squeue_states.txt": squeue_states,
        "squeue_reasons.txt": squeue_reasons,
        "scontrol_show_job.txt": show_job,
        "scontrol_show_config.txt": run("scontrol", "show", "config"),
        "sinfo.txt": run("sinfo", "-h", "-o", "%P %a %T"),
        "jobs.json": json.dumps({"array": array, "requeued": requeued, "held": held}, indent=1) + "\n",
    }
    for name, text in files.items():
        (out / name).write_text(text)
    print(f"wrote {len(files)} files to {out} (jobs {', '.join(ids)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
