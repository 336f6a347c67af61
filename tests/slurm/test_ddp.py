"""DDP on the real local SLURM with jobs/jade/train_ddp.sbatch: 2 srun tasks (gloo on CPU) train like one
process with the whole batch, and a USR2 to the batch shell stops every rank, requeues and resumes exactly.

The node has 2 CPUs and two fake GPUs (/dev/null devices): `--gres=gpu:2` sets CUDA_VISIBLE_DEVICES but
CUDA is unavailable, so the ranks must fall back to gloo on CPU (NCCL would fail to start).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from hpc_runner.engine.distributed import master_port
from hpc_runner.records.metrics_log import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
SCRIPT = ROOT / "jobs" / "jade" / "train_ddp.sbatch"
OWN_GROUP = Path(__file__).parent / "data" / "own_process_group"  # its multi_gpu_train.json starts the group
RANKS, RANK_BATCH, NUM_TRAIN, EPOCHS = 2, 2, 16, 4
STEPS = NUM_TRAIN // (RANKS * RANK_BATCH) * EPOCHS  # 16: global batch 4, 4 steps an epoch
RTOL = 1e-5  # float32 sums in another order (all-reduce of two half-batch gradients): measured <= 2e-7
WEIGHT_ATOL = 2e-5  # final weights without conv biases: measured 4e-6
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"})


def common_args(dataset_dir: Path) -> list[str]:
    """Tiny, and deterministic per sample: no shuffle, no random augmentation (DDP then equals one process)."""
    return ["--num_train", str(NUM_TRAIN), "--num_val", "1", "--image_size", "16", "--val_interval", "1",
            "--dataset_dir", str(dataset_dir), "--train_loader::shuffle", "false", "--augmentation", "[]",
            "--+network_def::bias", "false"]


def records(run_dir: Path, kind: str) -> list[dict]:
    """The records of one kind in metrics.jsonl (a line being written is skipped)."""
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("kind") == kind]


def job_state(cluster, job: str) -> str:
    """The controller's state of ``job`` (finished jobs stay listed MinJobAge seconds with -t all)."""
    return cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T").stdout.strip() or "GONE"


def wait_until(check, timeout: float, what: str, log: Path) -> None:
    """Poll ``check()``; fail with the job log after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen after {timeout} s; job log:\n{log.read_text() if log.exists() else ''}")
        time.sleep(0.1)


def submit_ddp(cluster, tmp: Path, out: Path, dataset_dir: Path | None, bundle: Path = BUNDLE,
               entry: str = "training", args: list[str] | None = None) -> tuple[str, Path]:
    """Submit jobs/jade/train_ddp.sbatch as 2 ranks x 1 CPU with both fake GPUs; return job id and log."""
    log = tmp / "ddp.out"
    env = {k: v for k, v in cluster.env.items() if not k.startswith(("HPCR__", "SLURM_JOB", "SLURM_ARRAY"))}
    if args is None:
        args = [*common_args(dataset_dir), "--batch_size", str(RANK_BATCH)]
    env.update(MODULES="", PYTHON=sys.executable, OUT=str(out), ENTRY=entry, EPOCHS=str(EPOCHS), BUNDLE=str(bundle),
               ARGS=" ".join(args))
    gpu = "gpu" if "gpu" in cluster.partitions else cluster.default_partition
    res = subprocess.run(
        ["sbatch", "--parsable", f"--chdir={ROOT}", "-o", str(log), "-p", gpu, "--nodes=1",
         f"--ntasks-per-node={RANKS}", f"--gres=gpu:{RANKS}", "--cpus-per-task=1", "--time=10", str(SCRIPT)],
        env=env, capture_output=True, text=True, timeout=30,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().split(";")[0], log


def wait_final(cluster, job: str, log: Path, timeout: float = 300) -> str:
    """Wait through any requeue until the job is in a final state; return it."""
    wait_until(lambda: job_state(cluster, job) in FINAL, timeout, f"a final state of job {job}", log)
    return job_state(cluster, job)


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory) -> Path:
    """This module's own volumes (synthetic_datalist lists every volume in its folder)."""
    return tmp_path_factory.mktemp("ddp-data")


@pytest.fixture(scope="module")
def single(slurm_cluster, dataset_dir, tmp_path_factory) -> Path:
    """One process with the whole global batch, outside SLURM."""
    out = tmp_path_factory.mktemp("ddp-single") / "run"
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith(("HPCR__", "SLURM_"))}
    env["OMP_NUM_THREADS"] = "1"
    res = subprocess.run(
        [sys.executable, "-m", "hpc_runner", "run", "training", "--bundle", str(BUNDLE), "--output_dir", str(out),
         "--max_epochs", str(EPOCHS), "--batch_size", str(RANKS * RANK_BATCH), *common_args(dataset_dir)],
        env=env, cwd=out.parent, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="module")
def ddp(slurm_cluster, single, dataset_dir, tmp_path_factory) -> tuple[str, Path, Path]:
    """The DDP job run straight through: (job id, run dir, job log)."""
    tmp = tmp_path_factory.mktemp("ddp-job")
    out = tmp / "run"
    job, log = submit_ddp(slurm_cluster, tmp, out, dataset_dir)
    assert wait_final(slurm_cluster, job, log) == "COMPLETED", log.read_text()
    return job, out, log


def test_each_srun_rank_takes_the_gpu_of_its_local_rank_and_meets_at_the_jobs_port(ddp):
    """srun without torchrun: SLURM's task ids give RANK/LOCAL_RANK; both fake GPUs are visible to each task."""
    job, _, log = ddp
    text = log.read_text()
    for rank in range(RANKS):
        # the Trainer's decision on a node where torch sees the two GPUs of CUDA_VISIBLE_DEVICES
        line = f"rank {rank} of {RANKS}, local rank {rank}: GPU device cuda:{rank} (CUDA_VISIBLE_DEVICES=0,1)"
        assert line in text, text
    ports = set(re.findall(r"; rendezvous (\S+):(\d+)", text))
    assert len(ports) == 1 and int(next(iter(ports))[1]) == master_port(job), (ports, text)


def test_two_srun_ranks_train_like_one_process_with_the_whole_batch(slurm_cluster, single, ddp):
    _, out, log = ddp

    text = log.read_text()
    record = yaml.safe_load((out / "run.yaml").read_text())
    assert record["status"] == "completed" and record["attempts"] == 1
    assert record["scheduler"]["name"] == "slurm"
    slurm = record["scheduler"]["variables"]
    assert slurm["SLURM_NTASKS"] == str(RANKS) and slurm["SLURM_PROCID"] == "0" and "SLURM_STEP_ID" in slurm
    # the job was given both fake GPUs; CUDA is unavailable, so only gloo could have started the group
    assert slurm.get("SLURM_JOB_GPUS", slurm.get("SLURM_STEP_GPUS")) == "0,1", slurm
    assert text.count("hpc-runner: done; results in") == RANKS, text  # every rank finished
    assert text.count("hpc-runner: trained") == 1, "only rank 0 reports (and writes)"

    a, b = records(single, "iter"), records(out, "iter")
    assert [r["step"] for r in b] == list(range(1, STEPS + 1)), "rank 0 alone writes each step once"
    assert [(r["epoch"], r["batch"]) for r in a] == [(r["epoch"], r["batch"]) for r in b]
    diffs = [(abs(x["loss"] - y["loss"]), abs(x["loss"] - y["loss"]) / abs(x["loss"])) for x, y in zip(a, b)]
    print(f"per-step loss, 2 ranks x batch {RANK_BATCH} vs 1 process x batch {RANKS * RANK_BATCH}: "
          f"max abs diff {max(d[0] for d in diffs):.3g}, max rel diff {max(d[1] for d in diffs):.3g}")
    for x, y in zip(a, b):
        assert math.isclose(x["loss"], y["loss"], rel_tol=RTOL), (x, y)
    va, vb = records(single, "val"), records(out, "val")
    assert len(va) == len(vb) == EPOCHS
    for x, y in zip(va, vb):
        assert math.isclose(x["val_dice"], y["val_dice"], rel_tol=RTOL, abs_tol=1e-6), (x, y)
    # and the weights. The runs have no conv bias: a bias before InstanceNorm has zero true gradient, so
    # Adam (which divides by sqrt(v)) turns its rounding noise into steps of ~lr; with biases the weights
    # differed by 4e-3, all of it in those biases, and every other tensor by < 1e-6.
    wa, wb = torch.load(single / "model.pt", weights_only=True), torch.load(out / "model.pt", weights_only=True)
    assert wa.keys() == wb.keys() and not [k for k in wa if k.endswith(".bias")], "no bias: bias false reached it"
    worst = max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa)
    print(f"final weights: max abs diff {worst:.3g}")
    assert worst < WEIGHT_ATOL, worst


def test_usr2_to_the_ddp_batch_shell_stops_every_rank_requeues_and_resumes_bit_identical(
    slurm_cluster, dataset_dir, ddp, tmp_path
):
    """The trap in train_ddp.sbatch forwards the B: signal to srun; the resumed job ends where the straight one did."""
    _, straight, _ = ddp
    out = tmp_path / "run"
    job, log = submit_ddp(slurm_cluster, tmp_path, out, dataset_dir)
    wait_until(lambda: len(records(out, "iter")) >= 2 or job_state(slurm_cluster, job) in FINAL, 180,
               "2 training steps", log)
    res = slurm_cluster.run("scancel", "--signal=USR2", "--batch", job)
    assert res.returncode == 0, res.stderr
    assert wait_final(slurm_cluster, job, log) == "COMPLETED", log.read_text()

    text = log.read_text()
    first, _, second = text.partition("(restart 1)")
    assert "got SIGUSR2, passing it to every rank" in first, text
    assert first.count("stopped by SIGUSR2; checkpoint written") == RANKS, text  # rank 0 and rank 1
    assert f"requeued job {job}" in first, text
    m = re.search(r"resuming from \S+ \(epoch \d+, step (\d+)\)", second)
    assert m and 0 < int(m.group(1)) < STEPS, f"the checkpoint must be taken mid-run:\n{text}"
    assert second.count("resuming from") == RANKS, "every rank loads the checkpoint"
    record = yaml.safe_load((out / "run.yaml").read_text())
    assert record["status"] == "completed" and record["attempts"] == 2
    assert [r["step"] for r in records(out, "iter")] == list(range(1, STEPS + 1))
    a = torch.load(straight / "model.pt", weights_only=True)
    b = torch.load(out / "model.pt", weights_only=True)
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ from the uninterrupted DDP job"


def test_a_zoo_style_bundle_that_starts_its_own_process_group_runs_under_srun(slurm_cluster, tmp_path):
    """Its multi_gpu_train.json reads LOCAL_RANK and calls init_process_group unguarded: a second group would fail."""
    out = tmp_path / "run"
    job, log = submit_ddp(slurm_cluster, tmp_path, out, None, bundle=OWN_GROUP, entry="run",
                          args=["--config_file", "configs/train.json,configs/multi_gpu_train.json"])
    assert wait_final(slurm_cluster, job, log) == "COMPLETED", log.read_text()
    text = log.read_text()
    assert text.count("the bundle starts torch.distributed itself") == RANKS, text
    for rank in range(RANKS):
        assert f"bundle process group: rank {rank} of {RANKS}, LOCAL_RANK {rank}" in text, text
    # 16 samples, DistributedSampler over 2 ranks, batch 2: 4 steps an epoch, written once by rank 0
    assert [r["step"] for r in records(out, "iter")] == list(range(1, 4 * EPOCHS + 1))
    assert yaml.safe_load((out / "run.yaml").read_text())["status"] == "completed"
