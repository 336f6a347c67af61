"""An sbatch that fails half-way: the queued points keep their job ids, the rest are marked not-submitted.

sbatch is replaced by a script that accepts the first array and refuses the next one, as a QOS limit
on submitted jobs would; the rest of the path (submitit, records, status, resume) is the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


@pytest.mark.slow  # whole CLI runs (training, the pre-flight's MONAI import): the full suite runs it
def test_second_array_refused(offline_cli):
    sbatch = Path(offline_cli.env["PATH"].split(":")[0]) / "sbatch"
    count = offline_cli.cwd / "sbatch-count"
    sbatch.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--test-only*) exit 0;; esac\n'  # the pre-flight's question: the resources are possible
        f"echo sbatch >> {offline_cli.calls_file}\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        'if [ "$n" = 0 ]; then echo "Submitted batch job 4242"; exit 0; fi\n'
        "echo 'sbatch: error: QOSMaxSubmitJobPerUserLimit' >&2\n"
        "echo 'sbatch: error: Batch job submission failed: Job violates accounting/QOS policy' >&2\nexit 1\n"
    )
    out = offline_cli("sweep", "--bundle", BUNDLE, "--cluster", "slurm", "--output_dir", "sw",
                      "--sweep", "seed=range(7)")  # MaxArraySize 3: arrays of 3, 3 and 1
    assert out.returncode == 2
    assert "Job violates accounting/QOS policy" in out.stderr
    assert "3 points were queued (arrays 4242) and 4 were not" in out.stderr
    assert "hpc-runner resume" in out.stderr
    record = json.loads((offline_cli.cwd / "sw" / "sweep.yaml").read_text())
    assert record["state"] == "partially-submitted" and "QOS" in record["error"]["message"]
    assert [p["job_id"] for p in record["points"]] == ["4242_0", "4242_1", "4242_2", None, None, None, None]
    assert [p["submit"] for p in record["points"]][3:] == ["not-submitted"] * 4

    status = offline_cli("status", "sw")
    assert status.returncode == 0, status.stderr
    assert "NOT-SUBMITTED 4" in status.stdout and "UNKNOWN 3" in status.stdout
    # the fixture's sacct and squeue fail: the queued points' states come from the run records
    assert "the scheduler cannot be reached" in status.stdout, status.stdout
    # why a point has no job, in neutral words (jobs/states.py: no scheduler's command named above the backend)
    assert "not submitted (the scheduler refused its submission; `hpc-runner resume` sends it)" in status.stdout

    plan = offline_cli("resume", "sw", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert [ln.split()[3] for ln in plan.stdout.splitlines() if "would resubmit" in ln] == ["3", "4", "5", "6"]


def test_first_sbatch_refused_leaves_nothing(offline_cli):
    out = offline_cli("sweep", "--bundle", BUNDLE, "--cluster", "slurm", "--output_dir", "sw", "--sweep", "seed=1,2")
    assert out.returncode == 2 and "sbatch must not run" in out.stderr  # the fixture's sbatch always fails
    assert not (offline_cli.cwd / "sw").exists()
    out = offline_cli("submit", "--bundle", BUNDLE, "--cluster", "slurm", "--output_dir", "r1")
    assert out.returncode == 2 and not (offline_cli.cwd / "r1").exists()


def test_status_falls_back_to_squeue_when_sacct_does_not_answer(offline_cli):
    """sacct fails (no accounting); one squeue call gives the states, array ranges expanded."""
    bin_dir = Path(offline_cli.env["PATH"].split(":")[0])
    calls = offline_cli.calls_file
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho sbatch >> {calls}\necho 'Submitted batch job 77'\n")
    (bin_dir / "squeue").write_text(
        f"#!/bin/sh\necho squeue >> {offline_cli.calls_file}\necho '77_0|RUNNING'\necho '77_[1-2%4]|PENDING'\n"
    )
    assert offline_cli("sweep", "--bundle", BUNDLE, "--cluster", "slurm", "--output_dir", "sw",
                       "--sweep", "learning_rate=1e-3,2e-3,3e-3").returncode == 0
    offline_cli.reset()
    status = offline_cli("status", "sw")
    assert "states from squeue" in status.stdout and "PENDING 2  RUNNING 1" in status.stdout, status.stdout
    assert "sacct must not run" in status.stdout  # the reason sacct was not used is shown
    assert offline_cli.calls() == {"sbatch": 0, "sacct": 1, "squeue": 1, "scancel": 0}
