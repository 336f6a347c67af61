"""Preemption on the real local SLURM: a stop signal checkpoints mid-run, SLURM requeues, the job resumes.

The reference is the same tiny training run straight through outside SLURM; the requeued job must
end with bit-identical weights and a metrics file that holds every step once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from warm_python import WARM

pytestmark = [pytest.mark.slow]
slurm = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
STEPS_PER_EPOCH, EPOCHS = 8, 4  # batch 1: 32 steps of ~0.1 s, long enough to be caught mid-run
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"})

# `exec`: python replaces the batch shell, so a signal for the batch shell (`--signal=B:USR2@N`,
# `scancel --signal=USR2 --batch`) reaches the runner. Without exec the shell would die of the USR2
# (its default action) and SLURM would kill python with it, before any checkpoint.
JOB_SCRIPT = """\
#!/bin/bash
#SBATCH --job-name=hpcr-preempt-test
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --cpus-per-task=1
set -euo pipefail
echo "attempt $((${{SLURM_RESTART_COUNT:-0}} + 1)) of job $SLURM_JOB_ID"
export OMP_NUM_THREADS=1
exec {python} -m hpc_runner run training --bundle {bundle} --output_dir {out} {args}
"""


def tiny_args(dataset_dir: Path, epochs: int = EPOCHS, augment: bool = True) -> list[str]:
    """Overrides for a run of ``epochs`` x 8 steps on 16^3 volumes that takes a few seconds on one core.

    Shuffled and, unless ``augment`` is False, with the bundle's random flips/rotations: the trainer
    re-seeds MONAI's random transforms each epoch, so a resume reproduces them.
    """
    return ["--num_train", str(STEPS_PER_EPOCH), "--num_val", "1", "--image_size", "16", "--batch_size", "1",
            "--max_epochs", str(epochs), "--val_interval", "1", "--dataset_dir", str(dataset_dir),
            *([] if augment else ["--augmentation", "[]"])]


def job_env(cluster) -> dict[str, str]:
    """The submitting environment without overrides or job variables that would leak into the job."""
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("HPCR__", "SLURM_JOB", "SLURM_ARRAY"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def iter_steps(run_dir: Path) -> list[int]:
    """The step of every iteration record in metrics.jsonl, in file order."""
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return []
    steps = []
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if rec.get("kind") == "iter":
            steps.append(rec["step"])
    return steps


def job_state(cluster, job: str) -> str:
    """The controller's state of ``job`` (finished jobs stay listed MinJobAge seconds with -t all)."""
    res = cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T")
    return res.stdout.strip() or "GONE"


def wait_until(check, timeout: float, what: str, log: Path | None = None) -> None:
    """Poll ``check()`` until it is true; fail with ``what`` and the job log after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            text = log.read_text() if log is not None and log.exists() else "(no job log)"
            pytest.fail(f"{what} not seen after {timeout} s; job log:\n{text}")
        time.sleep(0.1)


def submit(cluster, tmp: Path, out: Path, args: list[str], *sbatch_args: str) -> tuple[str, Path]:
    """Write the exec job script for a run in ``out`` and submit it; return the job id and its log."""
    script = tmp / "job.sh"
    script.write_text(JOB_SCRIPT.format(python=sys.executable, bundle=BUNDLE, out=out, args=" ".join(args)))
    log = tmp / "job.out"
    res = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={tmp}", "-o", str(log), *sbatch_args, str(script)],
        env=job_env(cluster), capture_output=True, text=True, timeout=30,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0], log


def wait_final(cluster, job: str, log: Path, timeout: float = 240) -> str:
    """Wait until the job is in a final state (through any requeue) and return that state."""
    wait_until(lambda: job_state(cluster, job) in FINAL, timeout, f"a final state of job {job}", log)
    return job_state(cluster, job)


def cancel_for_good(cluster, job: str) -> None:
    """Cancel ``job`` for the clean-up of a test, whatever state it is in: Requeue=0 first, so even a
    runner that is requeueing the job after a stop signal at this moment cannot bring it back.

    (A plain scancel is not undone by the runner: test_scancel_of_a_running_job_is_not_undone_by_a_requeue
    checks that. `scancel -s KILL` is no help here: SLURM turns it into a cancel, SIGTERM first.)
    """
    cluster.run("scontrol", "update", f"JobId={job}", "Requeue=0")
    cluster.run("scancel", job)


def sacct_history(cluster, job: str, timeout: float = 30) -> list[str]:
    """Every state sacct records for ``job``, requeued attempts included (-D), once the last is final."""
    deadline = time.monotonic() + timeout
    while True:
        res = cluster.run("sacct", "-D", "-X", "-n", "-P", "-j", job, "-o", "State")
        states = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
        if (states and states[-1] in FINAL) or time.monotonic() > deadline:
            return states
        time.sleep(0.5)  # sacct lags the controller by a few seconds


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The final weights a run saved."""
    return torch.load(run_dir / "model.pt", weights_only=True)


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    """Same keys, and every tensor equal bit for bit."""
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ, e.g. {differ[:3]}"


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory) -> Path:
    """This module's own volumes: synthetic_datalist lists every volume in the folder."""
    return tmp_path_factory.mktemp("preempt-data")


def run_here(out: Path, args: list[str]) -> subprocess.CompletedProcess:
    """``hpc-runner run training`` in this machine's shell (no SLURM variables), one thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR__", "SLURM_"))}
    env["OMP_NUM_THREADS"] = "1"
    return WARM.run("hpc_runner", ["run", "training", "--bundle", str(BUNDLE), "--output_dir", str(out), *args],
                    env=env, cwd=out.parent, timeout=300)


@pytest.fixture(scope="module")
def reference(dataset_dir, tmp_path_factory) -> Path:
    """The same training straight through, outside SLURM: the weights a preempted job must end with."""
    out = tmp_path_factory.mktemp("preempt-ref") / "straight"
    res = run_here(out, tiny_args(dataset_dir))
    assert res.returncode == 0, res.stderr
    assert iter_steps(out) == list(range(1, STEPS_PER_EPOCH * EPOCHS + 1))
    return out


def check_resumed_run(cluster, job: str, log: Path, out: Path, reference: Path, signal_name: str) -> None:
    """What every preempted-and-requeued job must show once it finished."""
    assert wait_final(cluster, job, log) == "COMPLETED", log.read_text()
    text = log.read_text()
    assert f"stopped by {signal_name}; checkpoint written" in text, text
    assert "attempt 2 of job" in text and "DUE TO JOB REQUEUE" in text, text
    m = re.search(r"resuming from (\S+ckpt_(\d+)\.pt) \(epoch (\d+), step (\d+)\)", text)
    assert m, text
    total = STEPS_PER_EPOCH * EPOCHS
    assert 0 < int(m.group(4)) < total, f"the checkpoint must be taken mid-run: {m.group(0)}"

    record = yaml.safe_load((out / "run.yaml").read_text())
    assert record["status"] == "completed" and record["attempts"] == 2
    sched = record["scheduler"]
    assert sched["name"] == "slurm" and sched["job_id"] == job and sched["restarts"] == 1
    assert sched["variables"]["SLURM_JOB_ID"] == job and sched["variables"]["SLURM_RESTART_COUNT"] == "1"
    shown = cluster.run("scontrol", "show", "job", job).stdout
    assert "Restarts=1" in shown, shown
    # each step once, as if the run had never stopped (the resumed attempt drops nothing, redoes nothing)
    assert iter_steps(out) == list(range(1, total + 1))
    assert json.loads((out / "summary.json").read_text())["resumed_from"] == m.group(1)
    assert_bit_identical(weights(reference), weights(out))
    history = sacct_history(cluster, job)
    assert history[:1] == ["REQUEUED"] and history[-1:] == ["COMPLETED"], history


@slurm
def test_usr2_to_the_batch_shell_checkpoints_requeues_and_resumes_bit_identical(
    slurm_cluster, dataset_dir, reference, tmp_path
):
    """`scancel --signal=USR2 --batch` is what `--signal=B:USR2@N` sends before the time limit."""
    out = tmp_path / "run"
    job, log = submit(slurm_cluster, tmp_path, out, tiny_args(dataset_dir))
    wait_until(lambda: len(iter_steps(out)) >= 3 or job_state(slurm_cluster, job) in FINAL, 180,
               "3 training steps", log)
    res = slurm_cluster.run("scancel", "--signal=USR2", "--batch", job)
    assert res.returncode == 0, res.stderr
    check_resumed_run(slurm_cluster, job, log, out, reference, "SIGUSR2")
    # the runner itself asked SLURM for the requeue, after its checkpoint
    assert f"requeued job {job}" in log.read_text()


@slurm
def test_scontrol_requeue_sends_sigterm_and_the_job_resumes_bit_identical(
    slurm_cluster, dataset_dir, reference, tmp_path
):
    """An admin's `scontrol requeue` (and preemption with PreemptMode=REQUEUE): SIGTERM, KillWait, requeue."""
    out = tmp_path / "run"
    job, log = submit(slurm_cluster, tmp_path, out, tiny_args(dataset_dir))
    wait_until(lambda: len(iter_steps(out)) >= 3 or job_state(slurm_cluster, job) in FINAL, 180,
               "3 training steps", log)
    res = slurm_cluster.run("scontrol", "requeue", job)
    assert res.returncode == 0, res.stderr
    # SLURM requeues the job itself; the checkpoint must be written within KillWait (5 s here)
    check_resumed_run(slurm_cluster, job, log, out, reference, "SIGTERM")


@slurm
def test_scancel_of_a_running_job_is_not_undone_by_a_requeue(slurm_cluster, dataset_dir, tmp_path):
    """scancel sends SIGTERM: the runner may checkpoint, but must not bring back a job the user cancelled."""
    out = tmp_path / "run"
    job, log = submit(slurm_cluster, tmp_path, out, tiny_args(dataset_dir))
    try:
        wait_until(lambda: len(iter_steps(out)) >= 3 or job_state(slurm_cluster, job) in FINAL, 180,
                   "3 training steps", log)
        assert slurm_cluster.run("scancel", job).returncode == 0
        wait_until(lambda: job_state(slurm_cluster, job) in {*FINAL, "PENDING"}, 60, "the end of the job", log)
        state = job_state(slurm_cluster, job)
    finally:
        cancel_for_good(slurm_cluster, job)
    assert "stopped by SIGTERM; checkpoint written" in log.read_text()
    assert state == "CANCELLED", f"the job came back ({state}) after scancel:\n{log.read_text()}"


def test_resume_after_the_first_epoch_with_monai_random_transforms_is_bit_identical(dataset_dir, tmp_path):
    """A run that continues from its end-of-epoch-1 checkpoint must end where the straight run ended.

    No signal needed: run 2 epochs, keep the weights, delete the epoch-2 checkpoint and model.pt,
    and run the same command again, as a job requeued right after epoch 1 would.
    """
    out = tmp_path / "run"
    args = tiny_args(dataset_dir, epochs=2, augment=True)
    assert (res := run_here(out, args)).returncode == 0, res.stderr
    straight = weights(out)
    (out / "model.pt").unlink()
    (out / "checkpoints" / f"ckpt_{2 * STEPS_PER_EPOCH:08d}.pt").unlink()
    res = run_here(out, args)
    assert res.returncode == 0, res.stderr
    assert f"ckpt_{STEPS_PER_EPOCH:08d}.pt (epoch 2, step {STEPS_PER_EPOCH})" in res.stdout, res.stdout
    assert iter_steps(out) == list(range(1, 2 * STEPS_PER_EPOCH + 1))
    assert_bit_identical(straight, weights(out))
