"""Packing on a real SLURM: N points of a ~0.5 s bundle unpacked (one job each) against `--pack K`.

The bundle (written to the work dir) runs ``sleep 0.5`` between two time marks that it writes into its
run dir: ``first_step.txt`` (the point's first step) and ``end.txt``. Each job writes its start time
(``date +%s.%N`` in the sbatch script, through the profile's ``setup``) into ``job_starts.txt``. Per-point
overhead is the time a point waits before its first step: from its job's start for the first point of a
job, from the previous point's end for the next points of a packed task. Also printed: the wall time from
the `hpc-runner sweep` call to the last point's end, and the sbatch calls (a PATH shim counts them,
those the jobs make when they top up too). The peer, measured in the same run, is the unpacked sweep.
Goal: packed overhead per point <= 10% of unpacked.

    eval "$(scripts/local-slurm.sh env)"
    .venv/bin/python bench/sweep_pack.py --points 100     # ~3-4 min on 2 cores (the unpacked half)
    .venv/bin/python bench/sweep_pack.py                  # 1000 points: ~30 min unpacked
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench._common import Contention  # noqa: E402

GOAL = 0.10
FINAL = ("completed", "failed", "preempted", "interrupted")
DROPPED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "HPCR_CPUS")
TRAIN_YAML = """\
x: 0
sleep_s: 0.5
output_dir: .
clock: "$__import__('time').time"
sleep: "$__import__('time').sleep"
path: "$__import__('pathlib').Path"
run:
  - "$@path(@output_dir).joinpath('first_step.txt').write_text(repr(@clock()))"
  - "$@sleep(@sleep_s)"
  - "$@path(@output_dir).joinpath('end.txt').write_text(repr(@clock()))"
"""
PROFILE = """\
extends: slurm
cpus_per_task: 1
time: 30
setup:
  - J=${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}
  - echo "${J:-$SLURM_JOB_ID} $(date +%s.%N)" >> STARTS
"""


def write_bundle(folder: Path) -> Path:
    """The ~0.5 s bundle, with the example bundle's metadata."""
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    (folder / "configs" / "train.yaml").write_text(TRAIN_YAML)
    shutil.copy(ROOT / "bundles/synthetic_seg/configs/metadata.json", folder / "configs" / "metadata.json")
    return folder


def shims(folder: Path, calls: Path) -> Path:
    """An sbatch wrapper that logs each call, then runs the real one."""
    folder.mkdir(parents=True, exist_ok=True)
    real = shutil.which("sbatch")
    if real is None:
        raise SystemExit("sweep_pack: no sbatch on PATH")
    (folder / "sbatch").write_text(f'#!/bin/sh\necho sbatch >> {calls}\nexec {real} "$@"\n')
    (folder / "sbatch").chmod(0o755)
    return folder


def wait_points(sweep: Path, n: int, timeout: float) -> None:
    """Poll the points' run.yaml until every point has a final status."""
    import yaml

    deadline = time.monotonic() + timeout
    done: set[int] = set()
    while len(done) < n:
        for i in range(n):
            if i in done:
                continue
            path = sweep / "points" / f"{i:0{max(4, len(str(n - 1)))}d}" / "run.yaml"
            try:
                status = (yaml.safe_load(path.read_text()) or {}).get("status")
            except (OSError, yaml.YAMLError):
                status = None
            if status in FINAL:
                done.add(i)
        if len(done) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"sweep_pack: {n - len(done)} of {n} points not done after {timeout:.0f} s")
            time.sleep(1.0)


def measure(work: Path, name: str, n: int, pack: int, env: dict[str, str], timeout: float) -> dict[str, float]:
    """Run one sweep; return its wall time, sbatch calls and per-point overhead figures."""
    calls = work / f"{name}-sbatch-calls.txt"
    starts = work / f"{name}-job_starts.txt"
    clusters = work / f"{name}-clusters"
    clusters.mkdir()
    (clusters / "benchpack.yaml").write_text(PROFILE.replace("STARTS", str(starts)))
    run_env = {**env, "HPCR_CLUSTER_PATH": str(clusters),
               "PATH": f"{shims(work / f'{name}-shims', calls)}{os.pathsep}{env.get('PATH', '')}"}
    args = [sys.executable, "-m", "hpc_runner", "sweep", "--bundle", str(work / "bundle"), "--cluster", "benchpack",
            "--output_dir", name, "--sweep", f"x=range({n})"]
    if pack > 1:
        args += ["--pack", str(pack)]
    t0 = time.time()
    res = subprocess.run(args, cwd=work, env=run_env, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"sweep_pack: hpc-runner sweep failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    sweep = work / name
    wait_points(sweep, n, timeout)
    record = json.loads((sweep / "sweep.yaml").read_text())
    job_start: dict[str, float] = {}
    for line in starts.read_text().splitlines():
        job, _, stamp = line.partition(" ")
        job_start.setdefault(job, float(stamp))  # a requeued task keeps its first start
    marks = {}
    for p in record["points"]:
        d = sweep / p["dir"]
        marks[p["index"]] = (p["job_id"], float((d / "first_step.txt").read_text()), float((d / "end.txt").read_text()))
    overheads, firsts, last_end = [], [], 0.0
    by_job: dict[str, list[tuple[float, float]]] = {}
    for job, first, end in marks.values():
        by_job.setdefault(job, []).append((first, end))
    for job, items in by_job.items():
        previous = job_start[job]
        firsts.append(min(items)[0] - previous)
        for first, end in sorted(items):
            overheads.append(first - previous)  # waiting for its first step: job start-up, or the pack's gap
            previous = end
            last_end = max(last_end, end)
    lines = calls.read_text().split() if calls.exists() else []
    return {"wall": last_end - t0, "sbatch": float(lines.count("sbatch")), "jobs": float(len(by_job)),
            "overhead": statistics.mean(overheads), "overhead_max": max(overheads),
            "first_in_job": statistics.mean(firsts)}


def main() -> int:
    """Measure the unpacked and the packed sweep; print figures and ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=1000, metavar="N")
    p.add_argument("--pack", type=int, default=50, metavar="K")
    p.add_argument("--workdir", type=Path, help="keep the sweeps here (default: a temp dir, removed)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for each sweep")
    args = p.parse_args()
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        print(f"sweep_pack: no SLURM answers ({(ping.stderr or ping.stdout).strip()}); "
              "start one with scripts/local-slurm.sh start")
        return 1
    env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith("HPCR_")}
    work = args.workdir or Path(tempfile.mkdtemp(prefix="hpcr-sweep-pack-"))
    work.mkdir(parents=True, exist_ok=True)
    write_bundle(work / "bundle")
    print(f"sweep_pack: {args.points} points of a 0.5 s bundle, unpacked vs --pack {args.pack}, in {work}")
    try:
        with Contention() as load_u:
            unpacked = measure(work, "unpacked", args.points, 1, env, args.timeout)
        with Contention() as load_p:
            packed = measure(work, "packed", args.points, args.pack, env, args.timeout)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    for name, r in (("unpacked", unpacked), (f"pack {args.pack}", packed)):
        print(f"{name}: wall {r['wall']:.1f} s, {r['sbatch']:.0f} sbatch call(s), {r['jobs']:.0f} job(s), "
              f"overhead per point {r['overhead']:.3f} s (max {r['overhead_max']:.2f} s; "
              f"job start to a job's first point {r['first_in_job']:.2f} s)")
    ratio = packed["overhead"] / unpacked["overhead"]
    print(f"sweep_pack ratio packed/unpacked: overhead per point={ratio:.3f} (goal <= {GOAL:.2f}: "
          f"{'met' if ratio <= GOAL else 'NOT met'}), wall={packed['wall'] / unpacked['wall']:.3f}, "
          f"sbatch calls={packed['sbatch'] / max(1.0, unpacked['sbatch']):.3f}")
    # the sweep's own jobs are not children of this process: they count as "other processes" here
    print(load_u.line().replace("# machine:", "# machine (unpacked; its own jobs count as others):"))
    print(load_p.line().replace("# machine:", "# machine (packed; its own jobs count as others):"))
    from bench.results import Figure, write_result

    write_result("sweep_pack", [
        Figure(f"{args.points} points of a ~0.5 s bundle, `--pack {args.pack}`: overhead per point",
               round(packed["overhead"], 2), "s", "unpacked", round(unpacked["overhead"], 2), f"<= {GOAL:.2f}x",
               ratio <= GOAL, note=f"{packed['jobs']:.0f} jobs against {unpacked['jobs']:.0f}"),
        Figure(f"the same: wall, `--pack {args.pack}`", round(packed["wall"], 1), "s", "unpacked",
               round(unpacked["wall"], 1)),
    ], measured_paths=["hpc_runner/sweep", "hpc_runner/scheduler", "hpc_runner/engine", "bench/sweep_pack.py"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
