"""No --cluster and no SLURM controller: refused at once naming --cluster local, before any config is read
(issue 34, "no cluster, no wait"). A plain subprocess: the time to answer includes the interpreter's start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"


def _bin(folder: Path, **scripts: str) -> Path:
    folder.mkdir()
    for name, body in scripts.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def _sweep(tmp_path: Path, path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_"))}
    env.update(PATH=str(path), XDG_CONFIG_HOME=str(tmp_path / "xdg"), OMP_NUM_THREADS="1")
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "hpc_runner", "sweep", "--bundle", str(BUNDLE), "--sweep",
                          "seed=1,2", "--output_dir", "sw", *extra], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    return res, time.monotonic() - start


@pytest.mark.parametrize("machine", ["no sbatch", "controller down", "controller silent"])
def test_without_cluster_and_without_a_controller_a_sweep_is_refused_at_once_naming_cluster_local(
        tmp_path: Path, machine: str) -> None:
    scripts = {"no sbatch": {},
               "controller down": {"sbatch": "exit 1", "scontrol": "echo 'slurm_load_ctl_conf error: Unable to "
                                   "contact slurm controller (connect failure)' >&2; exit 1"},
               "controller silent": {"sbatch": "exit 1", "scontrol": "exec /bin/sleep 30"}}[machine]
    res, seconds = _sweep(tmp_path, _bin(tmp_path / "bin", **scripts))
    assert res.returncode == 2, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ": error: " in ln]
    assert "no --cluster was given" in line and "--cluster local" in line and "nothing was run or queued" in line
    assert {"no sbatch": "sbatch is not on PATH", "controller down": "Unable to contact slurm controller",
            "controller silent": "within 2 s"}[machine] in line
    assert not (tmp_path / "sw").exists()
    # 2 s of waiting at most (the silent controller), plus the interpreter's start: well under the ~20 s of
    # imports and pre-flight it took before, on a loaded 2-core VM too
    assert seconds < 8, seconds


def test_a_dry_run_or_a_named_profile_asks_no_controller(tmp_path: Path) -> None:
    path = _bin(tmp_path / "bin", sbatch="exit 1", scontrol='echo "$@" >> scontrol.log; exit 1')
    res, _ = _sweep(tmp_path, path, "--dry-run", "--no-preflight")
    assert res.returncode == 0 and "# dry run: profile slurm" in res.stdout, res.stderr
    res, _ = _sweep(tmp_path, path, "--cluster", "local", "--dry-run", "--no-preflight")
    assert res.returncode == 0 and "profile local" in res.stdout, res.stderr
    asked = (tmp_path / "scontrol.log").read_text().splitlines() if (tmp_path / "scontrol.log").exists() else []
    assert "ping" not in asked, asked  # (a dry run asks `scontrol show config` for MaxArraySize, nothing more)
