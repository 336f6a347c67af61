"""A rank that refuses once the process group exists stops every rank within seconds, with the refusal said.

Two real processes meet over gloo on the CPU (launched torchrun-style, as in test_distributed.py). Before
issue 32 the other rank went on into its next collective and waited there up to the backend's timeout
(gloo and NCCL: 30 minutes, a GPU allocation held idle); now every rank votes right after the checks that
may refuse (engine/distributed.py start_together) and each one exits 2 with the refusal.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(bundle: Path, out: Path, cwd: Path, extra: dict[int, dict[str, str]]) -> list[subprocess.Popen]:
    """Two ranks of one run, as torchrun starts them; ``extra[rank]`` adds variables to that rank only."""
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_"))}
        env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", RANK=str(rank), LOCAL_RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   **extra.get(rank, {}))
        procs.append(subprocess.Popen([sys.executable, "-m", "hpc_runner", "run", "--bundle", str(bundle),
                                       "--output_dir", str(out), "--trust"], cwd=cwd, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs: list[subprocess.Popen]) -> tuple[list[tuple[int, str]], float]:
    """Wait for both ranks; return (exit code, stderr) per rank and the seconds from the later rank's rendezvous
    line (printed just before it waits for the other) to the later exit."""
    outs: list[list[str]] = [[] for _ in procs]
    errs: list[list[str]] = [[] for _ in procs]
    readers = []
    for p, out, err in zip(procs, outs, errs, strict=True):
        for stream, into in ((p.stdout, out), (p.stderr, err)):
            readers.append(threading.Thread(target=lambda s=stream, i=into: i.extend(s), daemon=True))
    for reader in readers:
        reader.start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(
                any("rendezvous" in line for line in out) or p.poll() is not None for p, out in zip(procs, outs,
                                                                                                    strict=True)):
            time.sleep(0.05)
        t0 = time.monotonic()
        for p in procs:
            p.wait(timeout=120)
        took = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for reader in readers:
        reader.join(timeout=10)
    return [(p.returncode, "".join(err)) for p, err in zip(procs, errs, strict=True)], took


@pytest.mark.slow
def test_a_gpu_check_refusing_on_rank_1_stops_rank_0_at_once(tiny_bundle, tmp_path):
    out = tmp_path / "run"
    given_a_gpu_it_cannot_see = {"HPCR_ASSIGNED_GPUS": "0"}  # CUDA_VISIBLE_DEVICES='': torch sees none
    results, took = finish(launch(tiny_bundle, out, tmp_path, {1: given_a_gpu_it_cannot_see}))
    (code0, err0), (code1, err1) = results
    assert (code0, code1) == (2, 2), f"rank 0:\n{err0[-2000:]}\nrank 1:\n{err1[-2000:]}"
    assert took < 20, f"the ranks took {took:.1f} s to stop"
    assert "this run was given GPU 0 (HPCR_ASSIGNED_GPUS) but torch sees no GPU" in err1.strip().splitlines()[-1]
    said = err0.strip().splitlines()[-1]
    assert "error: rank 1 refused: this run was given GPU 0 (HPCR_ASSIGNED_GPUS)" in said, err0[-2000:]
    assert "Traceback" not in err0 + err1
    record = yaml.safe_load((out / "run.yaml").read_text())  # rank 0 owns the record: the run failed, and why
    assert record["status"] == "failed" and "rank 1 refused" in record["error"]["message"]


@pytest.mark.slow
def test_rank_0_refusing_its_run_dir_stops_rank_1_at_once(tiny_bundle, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("another: run\n")  # rank 0 refuses it after the group exists
    results, took = finish(launch(tiny_bundle, out, tmp_path, {}))
    (code0, err0), (code1, err1) = results
    assert (code0, code1) == (2, 2), f"rank 0:\n{err0[-2000:]}\nrank 1:\n{err1[-2000:]}"
    assert took < 20, f"the ranks took {took:.1f} s to stop"
    assert "the run dir already holds a run of a different config" in err0.strip().splitlines()[-1]
    said = err1.strip().splitlines()[-1]
    assert "error: rank 0 refused:" in said and "the run dir already holds a run of a different config" in said
    assert "Traceback" not in err0 + err1
    assert (out / "config.yaml").read_text() == "another: run\n" and not (out / "error.txt").exists()
