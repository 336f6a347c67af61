"""A 16-point grid against `hpc-runner tune` with ASHA, over the same space, on the real local SLURM.

The example bundle (synthetic data) is searched over learning_rate (4 log-spaced values) x
network_def::channels (4 UNet widths). The grid (`hpc-runner sweep`) trains every point for all its
epochs; `tune` samples the same ranges (loguniform, choice) with TPE and stops hopeless trials at
ASHA's rungs. Per arm: the best validation Dice reached (each run's last validation, the value tune
tells Optuna) and the epochs trained in all (each run's metrics.jsonl), and the ratios against the
grid of the same run. Goal (issue 14): within 0.005 of the grid's best Dice with <= 40% of its epochs.
Wall times are indicative: both arms share one 2-CPU node.

    source /tmp/hpcr-slurm/env.sh
    .venv/bin/python bench/tune_vs_grid.py                 # 3 tune seeds
    .venv/bin/python bench/tune_vs_grid.py --seeds 0 --epochs 6   # a quicker look
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
RATES = [1e-4, 1e-3, 1e-2, 1e-1]
CHANNELS = ["[4,8,16,32]", "[8,16,32,64]", "[12,24,48,96]", "[16,32,64,128]"]
GOAL_DICE, GOAL_EPOCHS = 0.005, 0.40


def hpcr(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run one hpc-runner command in a new process; fail loudly when it fails."""
    res = subprocess.run([sys.executable, "-m", "hpc_runner", *argv], capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        sys.exit(f"hpc-runner {argv[0]} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}")
    return res


def data_args(data: Path, epochs: int) -> list[str]:
    """Overrides shared by both arms: a small synthetic set, a validation every epoch."""
    return ["--num_train", "8", "--num_val", "4", "--image_size", "32", "--batch_size", "2",
            "--max_epochs", str(epochs), "--val_interval", "1", "--dataset_dir", str(data)]


def job_ids(sweep: Path) -> list[str]:
    """Every array job id the sweep or tune dir recorded."""
    import yaml

    record = yaml.safe_load((sweep / "sweep.yaml").read_text())
    return [a["job_id"] for s in record.get("submissions") or [] for a in s.get("arrays") or []]


def wait_idle(sweep: Path, timeout: float) -> float:
    """Wait until no job of the dir is queued or running; return the seconds since the call."""
    t0 = time.monotonic()
    while True:
        ids = job_ids(sweep)
        out = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(ids), "-o", "%i"], capture_output=True,
                             text=True).stdout.strip() if ids else ""
        if not out:
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            sys.exit(f"{sweep}: jobs still queued after {timeout} s: {out.split()}")
        time.sleep(2)


def run_results(sweep: Path) -> list[tuple[float | None, int]]:
    """(last val_dice, epochs trained) of every point dir."""
    out = []
    for point in sorted((sweep / "points").iterdir()):
        metrics = point / "metrics.jsonl"
        text = metrics.read_text() if metrics.exists() else ""
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        vals = [r["val_dice"] for r in rows if r.get("kind") == "val" and "val_dice" in r]
        epochs = len({r["epoch"] for r in rows if r.get("kind") == "epoch"})
        out.append((vals[-1] if vals else None, epochs))
    return out


def summarize(name: str, sweep: Path, wall: float) -> dict:
    """Best Dice, epochs, points and wall time of one arm."""
    res = run_results(sweep)
    values = [v for v, _ in res if v is not None]
    return {"arm": name, "best": max(values) if values else float("nan"), "epochs": sum(e for _, e in res),
            "runs": len(res), "wall_s": wall}


def grid_arm(folder: Path, data: list[str], cluster: list[str], timeout: float) -> dict:
    """The 16-point grid: every point trains all its epochs."""
    out = folder / "grid"
    t0 = time.monotonic()
    hpcr("sweep", "--bundle", str(BUNDLE), "--sweep", "learning_rate=" + ",".join(map(str, RATES)),
         "--sweep", "network_def::channels=" + ",".join(CHANNELS), "--output_dir", str(out), *cluster, *data)
    wait_idle(out, timeout)
    return summarize("grid 4x4", out, time.monotonic() - t0)


def tune_arm(folder: Path, seed: int, data: list[str], cluster: list[str], args: argparse.Namespace) -> dict:
    """`hpc-runner tune` with TPE and ASHA over the same ranges."""
    out = folder / f"tune-{seed}"
    t0 = time.monotonic()
    hpcr("tune", "--bundle", str(BUNDLE), "--space", f"learning_rate=loguniform({RATES[0]},{RATES[-1]})",
         "--space", "network_def::channels=choice(" + ",".join(CHANNELS) + ")", "--trials", str(args.trials),
         "--parallel", str(args.parallel), "--metric", "val_dice", "--pruner", "asha",
         "--pruner-option", "min_resource=1", "--pruner-option", f"reduction_factor={args.reduction_factor}",
         "--sampler", args.sampler, *[a for o in args.sampler_option for a in ("--sampler-option", o)],
         "--sampler-seed", str(seed), "--output_dir", str(out), *cluster, *data)
    wait_idle(out, args.timeout)
    return summarize(f"tune seed {seed}", out, time.monotonic() - t0)


def main() -> int:
    """Measure the grid, then tune once per seed; print the table and the ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=9, help="max_epochs of every run (default 9)")
    p.add_argument("--trials", type=int, default=16)
    p.add_argument("--parallel", type=int, default=2, help="tune workers (the local node runs 2 one-CPU jobs)")
    p.add_argument("--reduction-factor", type=int, default=3)
    p.add_argument("--sampler", default="tpe")
    p.add_argument("--sampler-option", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to tune (e.g. n_startup_trials=4); repeatable")
    p.add_argument("--cluster", default="slurm")
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--keep", metavar="DIR", help="write the sweep and tune dirs here (default: a temp dir)")
    args = p.parse_args()
    if "SLURM_CONF" not in os.environ:
        sys.exit("no SLURM_CONF: start the local cluster (scripts/local-slurm.sh start; source /tmp/hpcr-slurm/env.sh)")
    folder = Path(args.keep or tempfile.mkdtemp(prefix="tune-vs-grid-"))
    folder.mkdir(parents=True, exist_ok=True)
    data = data_args(folder / "data", args.epochs)
    cluster = ["--cluster", args.cluster, "--slurm", "time=60", "--cpus", "1"]
    rows = [grid_arm(folder, data, cluster, args.timeout)]
    rows += [tune_arm(folder, s, data, cluster, args) for s in args.seeds]
    grid = rows[0]
    print(f"\n{'arm':<12} {'runs':>4} {'best val_dice':>13} {'gap':>8} {'epochs':>6} {'x grid':>7} {'wall s':>7}")
    met = []
    for r in rows:
        gap, ratio = r["best"] - grid["best"], r["epochs"] / grid["epochs"]
        print(f"{r['arm']:<12} {r['runs']:>4} {r['best']:>13.4f} {gap:>+8.4f} {r['epochs']:>6} {ratio:>7.2f} "
              f"{r['wall_s']:>7.0f}")
        if r is not grid:
            met.append(gap >= -GOAL_DICE and ratio <= GOAL_EPOCHS)
    print(f"\ngoal: best within {GOAL_DICE} of the grid's with <= {GOAL_EPOCHS:.0%} of its epochs: "
          f"met by {sum(met)} of {len(met)} seed(s); dirs in {folder}")
    sys.path.insert(0, str(ROOT))
    from bench.results import Figure, write_result

    write_result("tune_vs_grid", [
        Figure(f"`tune` seed {seed}: best val Dice", round(r["best"], 4), "", "the 16-point grid",
               round(grid["best"], 4),
               f"within {GOAL_DICE} with <= {GOAL_EPOCHS:.0%} of the epochs", ok,
               note=f"{r['epochs']} epochs against {grid['epochs']}")
        for seed, r, ok in zip(args.seeds, rows[1:], met)
    ], measured_paths=["hpc_runner/tune", "bench/tune_vs_grid.py"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
