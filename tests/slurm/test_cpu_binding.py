"""CPU binding on the real local SLURM: a 2-CPU job whose steps are bound to their cores (SLURM_CPU_BIND=cores,
as task/affinity or task/cgroup clusters do by default). Since SLURM 22.05 srun no longer takes --cpus-per-task
from sbatch, so a step started without it gets one of the job's CPUs; the job script hpc-runner writes passes
``srun --cpus-per-task`` and its run gets all of them (run.yaml's CPU count equals the request)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
AFFINITY = "import os; print(len(os.sched_getaffinity(0)))"
TINY = 'output_dir: .\nrun:\n  - "$print(\'bound run\', flush=True)"\n'


def test_a_bound_step_without_srun_cpus_per_task_gets_one_cpu_and_hpc_runner_s_run_gets_all(
        cli, slurm_cluster, tmp_path: Path) -> None:
    gap = tmp_path / "gap.sh"
    gap.write_text(f"#!/bin/bash\nsrun python3 -c '{AFFINITY}'\nsrun --cpus-per-task=2 python3 -c '{AFFINITY}'\n")
    sent = slurm_cluster.run("sbatch", "--parsable", "--cpus-per-task=2", "--ntasks=1", "--time=5",
                             f"--partition={slurm_cluster.default_partition}", f"--output={tmp_path}/gap.out",
                             "--export=ALL,SLURM_CPU_BIND=cores", str(gap))
    assert sent.returncode == 0, sent.stderr
    bundle = tmp_path / "tiny"
    (bundle / "configs").mkdir(parents=True)
    (bundle / "configs" / "train.yaml").write_text(TINY)
    metadata = ROOT / "bundles" / "synthetic_seg" / "configs" / "metadata.json"
    (bundle / "configs" / "metadata.json").write_text(metadata.read_text())
    cli.write_profile("bound", "extends: slurm\ncpus_per_task: 2\ntime: 10\nenv: {SLURM_CPU_BIND: cores}\n")
    res = cli("submit", "--bundle", str(bundle), "--cluster", "bound", "--output_dir", "r", "--wait")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    run = yaml.safe_load((cli.cwd / "r" / "run.yaml").read_text())
    assert run["status"] == "completed" and run["cpus"]["count"] == 2, run.get("cpus")
    slurm_cluster.wait_for_jobs([sent.stdout.strip().split(";")[0]], timeout=120)
    # the gap itself: bound to its cores, the bare srun sees 1 CPU of the job's 2
    assert (tmp_path / "gap.out").read_text().split() == ["1", "2"]
