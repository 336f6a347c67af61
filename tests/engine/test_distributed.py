"""Two processes launched torchrun-style (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT), without SLURM.

With shuffle off and no random augmentation, 2 ranks x batch 2 give the per-step losses and the
validation metric of 1 process x batch 4; a stop signal to one rank stops both after the same step,
and running the same commands again resumes to bit-identical weights.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from hpc_runner.records.metrics_log import read_metrics

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
RANKS, RANK_BATCH, NUM_TRAIN, EPOCHS = 2, 2, 16, 4
STEPS = NUM_TRAIN // (RANKS * RANK_BATCH) * EPOCHS
RTOL = 1e-5  # float32 sums in another order: measured max rel diff ~1e-7
# final weights, runs without conv biases (measured 4e-6): a bias before InstanceNorm has zero true gradient,
# so Adam turns its rounding noise into steps of ~lr (4e-3 apart with biases, all of it in the biases)
WEIGHT_ATOL = 2e-5


def run_args(dataset_dir: Path, out: Path, batch_size: int) -> list[str]:
    """A tiny synthetic_seg run, deterministic per sample (no shuffle, no random augmentation)."""
    return ["run", "training", "--bundle", str(BUNDLE), "--output_dir", str(out), "--num_train", str(NUM_TRAIN),
            "--num_val", "1", "--image_size", "16", "--max_epochs", str(EPOCHS), "--val_interval", "1",
            "--batch_size", str(batch_size), "--dataset_dir", str(dataset_dir),
            "--train_loader::shuffle", "false", "--augmentation", "[]", "--+network_def::bias", "false"]


def free_port() -> int:
    """A TCP port nobody listens on right now (the rendezvous of rank 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env() -> dict[str, str]:
    """The environment of the `cli` fixture, without any SLURM variable: the rank comes from RANK only; no GPU,
    so the ranks meet over gloo on the CPU as on a machine without one (on a one-GPU machine NCCL would refuse
    two ranks on that GPU, as hpc-runner now says before it starts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR__", "SLURM_"))}
    env["OMP_NUM_THREADS"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def launch(args: list[str], cwd: Path, ranks: int = RANKS, port: int | None = None) -> list[subprocess.Popen]:
    """Start ``ranks`` processes as torchrun would: one command, RANK/LOCAL_RANK/WORLD_SIZE/MASTER_* apart.

    ``ranks=1`` starts one plain process (no torch.distributed).
    """
    port = port or free_port()
    procs = []
    for rank in range(ranks):
        env = base_env()
        if ranks > 1:
            env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-m", "hpc_runner", *args], cwd=cwd, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 240) -> list[tuple[int, str, str]]:
    """Wait for every rank; return (exit code, stdout, stderr) per rank (all killed on a timeout)."""
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


def records(run_dir: Path, kind: str) -> list[dict]:
    """The records of one kind in metrics.jsonl (a line being written is skipped)."""
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if r.get("kind") == kind]


def iter_steps(run_dir: Path) -> list[int]:
    """The step of each iteration record, in file order."""
    return [r["step"] for r in records(run_dir, "iter")]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The final weights of a run."""
    return torch.load(run_dir / "model.pt", weights_only=True)


def assert_ok(results: list[tuple[int, str, str]]) -> None:
    """Every rank exited 0."""
    for rank, (code, _, err) in enumerate(results):
        assert code == 0, f"rank {rank} exited {code}:\n{err[-3000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(dataset dir, 1 process x batch 4, 2 ranks x batch 2), each run straight through, side by side."""
    tmp = tmp_path_factory.mktemp("distributed")
    data, single, ddp = tmp / "data", tmp / "single", tmp / "ddp"
    # the three processes write the same volumes, each file atomically: no need to make them first
    procs = launch(run_args(data, single, RANKS * RANK_BATCH), tmp, ranks=1)
    procs += launch(run_args(data, ddp, RANK_BATCH), tmp)
    assert_ok(finish(procs))
    return data, single, ddp


@pytest.mark.slow
def test_two_ranks_train_like_one_process_with_the_whole_batch(runs):
    _, single, ddp = runs
    a, b = records(single, "iter"), records(ddp, "iter")
    assert [r["step"] for r in b] == list(range(1, STEPS + 1)), "rank 0 alone writes each step once"
    assert [(r["epoch"], r["batch"]) for r in a] == [(r["epoch"], r["batch"]) for r in b]
    abs_diff = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    rel_diff = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
    print(f"per-step loss, {RANKS} ranks x {RANK_BATCH} vs 1 x {RANKS * RANK_BATCH}: "
          f"max abs diff {abs_diff:.3g}, max rel diff {rel_diff:.3g}")
    for x, y in zip(a, b):
        assert math.isclose(x["loss"], y["loss"], rel_tol=RTOL), (x, y)
    va, vb = records(single, "val"), records(ddp, "val")
    assert len(va) == len(vb) == EPOCHS
    for x, y in zip(va, vb):
        assert math.isclose(x["val_dice"], y["val_dice"], rel_tol=RTOL, abs_tol=1e-6), (x, y)
    record = yaml.safe_load((ddp / "run.yaml").read_text())
    assert record["status"] == "completed" and record["attempts"] == 1
    wa, wb = weights(single), weights(ddp)
    assert wa.keys() == wb.keys() and not [k for k in wa if k.endswith(".bias")], "no bias: bias false reached it"
    worst = max((wa[k].double() - wb[k].double()).abs().max().item() for k in wa)
    print(f"final weights: max abs diff {worst:.3g}")
    assert worst < WEIGHT_ATOL, worst


@pytest.mark.slow
def test_a_stop_signal_to_one_rank_stops_both_and_the_rerun_resumes_bit_identical(runs, tmp_path):
    data, _, straight = runs
    out = tmp_path / "ddp"
    args = run_args(data, out, RANK_BATCH)
    procs = launch(args, tmp_path)
    deadline = time.monotonic() + 180
    while len(iter_steps(out)) < 2 and all(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGUSR2)  # rank 1 only: rank 0 learns of it in the per-step all-reduce
    results = finish(procs)
    for rank, (code, _, err) in enumerate(results):
        assert code == 3, f"rank {rank} exited {code}:\n{err[-3000:]}"
    assert "stopped by SIGUSR2" in results[1][2]
    assert "stopped by a stop request on another rank" in results[0][2]
    ckpts = sorted((out / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts, "rank 0 writes the checkpoint"
    stopped_at = torch.load(ckpts[-1], weights_only=True)["step"]
    assert 0 < stopped_at < STEPS and iter_steps(out) == list(range(1, stopped_at + 1))
    assert yaml.safe_load((out / "run.yaml").read_text())["status"] == "preempted"

    results = finish(launch(args, tmp_path))  # the same commands again, as a requeued job would run them
    assert_ok(results)
    assert all(f"resuming from {ckpts[-1]}" in stdout for _, stdout, _ in results), "every rank resumes"
    assert iter_steps(out) == list(range(1, STEPS + 1))
    assert yaml.safe_load((out / "run.yaml").read_text())["attempts"] == 2
    a, b = weights(straight), weights(out)
    assert a.keys() == b.keys()
    differ = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differ, f"{len(differ)} of {len(a)} tensors differ from the uninterrupted 2-rank run"
