"""Sweep throughput on a real SLURM: each point's training time in a sweep vs the same point alone, 1 CPU.

The example bundle (bundles/synthetic_seg) as a 4-point sweep (`--sweep learning_rate=...`) with the
built-in `slurm` profile (1 CPU per task), submitted as one array, so the node runs as many points at
once as it has CPUs. Each point's training time is its summary.json `wall_s` (the trainer's own clock:
epochs and validation; not process start-up, config loading or data generation).

The peer, measured in the same run, before the sweep: the same point alone with one CPU,
`hpc-runner run training --cpus 1 ...`, one point after another with nothing else of ours running.
Printed per point: alone, in the sweep and the ratio sweep/alone; goal <= 1.15 for the worst point
(before hpc-runner gave every job its CPU budget: 8.3x, 193.6 s in the sweep vs 23.4 s alone, because
each 1-CPU job ran one torch thread per core of the node). Also printed: each process's CPU time alone
(its rusage) and in the sweep (sacct TotalCPU) and their ratio, which other load on the machine does
not change (~1: a point does the same work in the sweep as alone), and how much of the CPUs other
processes used in each phase.

    eval "$(scripts/local-slurm.sh env)"
    .venv/bin/python bench/sweep_throughput.py            # bundle defaults (64^3, 10 epochs): ~4-5 min
    .venv/bin/python bench/sweep_throughput.py --quick    # 32^3, 2 epochs: a smoke run (~1 min)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench._common import Contention  # noqa: E402

BUNDLE = ROOT / "bundles" / "synthetic_seg"
GOAL_RATIO = 1.15
LEARNING_RATES = ("1e-3", "2e-3", "3e-3", "4e-3", "5e-3", "6e-3", "7e-3", "8e-3")
# thread settings of the calling shell would be "set by the user" for the runs: leave them out
DROPPED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "HPCR_CPUS")
FINAL = ("completed", "failed", "preempted", "interrupted")


def hpcr(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run the hpc-runner CLI in a fresh process; raise with its output if it fails."""
    res = subprocess.run([sys.executable, "-m", "hpc_runner", *args], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=timeout)
    if res.returncode != 0:
        raise SystemExit(f"hpc-runner {' '.join(args[:2])} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
    return res


def wall_s(run_dir: Path) -> float:
    """The trainer's training time of a finished run."""
    return float(json.loads((run_dir / "summary.json").read_text())["wall_s"])


def other_jobs(env: dict[str, str], ours: set[str]) -> set[str]:
    """Running jobs on the cluster that are not ours (they share the node's CPUs with the sweep)."""
    res = subprocess.run(["squeue", "-h", "-t", "R", "-o", "%i"], env=env, capture_output=True, text=True)
    return {j for j in res.stdout.split() if j.split("_")[0] not in ours}


def children_cpu() -> float:
    """CPU seconds (user + system) of the child processes that ended so far."""
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return c.ru_utime + c.ru_stime


def busy_seconds() -> float:
    """CPU seconds the whole machine spent busy since boot (/proc/stat, all CPUs)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(text: str) -> float:
    """sacct's TotalCPU ``[D-][HH:]MM:SS[.mmm]`` in seconds."""
    days, _, rest = text.strip().rpartition("-")
    parts = [float(x) for x in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def job_cpu_seconds(arrays: list[str], n: int, env: dict[str, str], timeout: float = 90) -> dict[str, float]:
    """CPU seconds each task of the arrays used (sacct TotalCPU, user + system), once sacct lists all n."""
    deadline = time.monotonic() + timeout
    while True:
        res = subprocess.run(["sacct", "-n", "-P", "-j", ",".join(arrays), "-o", "JobID,TotalCPU"], env=env,
                             capture_output=True, text=True)
        rows = [line.split("|", 1) for line in res.stdout.splitlines() if "|" in line]
        cpu = {job: cpu_seconds(t) for job, t in rows if "." not in job and t.strip()}  # not the steps
        if (len(cpu) >= n and all(v > 0 for v in cpu.values())) or time.monotonic() > deadline:
            return cpu
        time.sleep(2)


def wait_for_points(points: list[Path], arrays: list[str], env: dict[str, str], timeout: float) -> set[str]:
    """Poll the points' run.yaml until every one has ended; return the other jobs seen running meanwhile."""
    deadline, seen = time.monotonic() + timeout, set()
    while True:
        states = []
        for p in points:
            f = p / "run.yaml"
            states.append((yaml.safe_load(f.read_text()) or {}).get("status") if f.is_file() else None)
        seen |= other_jobs(env, set(arrays))
        if all(s in FINAL for s in states):
            # run.yaml says "completed" a moment before the job's own _finish writes the job fields
            return seen
        if time.monotonic() > deadline:
            subprocess.run(["scancel", *arrays], env=env, capture_output=True)
            raise SystemExit(f"sweep not finished after {timeout:.0f} s (cancelled {arrays}); states {states}")
        time.sleep(1.0)


def main() -> int:
    """Measure and print per-point times and ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=4, choices=range(2, len(LEARNING_RATES) + 1), metavar="N")
    p.add_argument("--quick", action="store_true", help="32^3 volumes, 2 epochs (smoke run)")
    p.add_argument("--workdir", type=Path, help="keep the runs here (default: a temp dir, removed)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds to wait for the sweep")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in DROPPED}
    env["PYTHONPATH"] = str(ROOT)
    ping = subprocess.run(["scontrol", "ping"], env=env, capture_output=True, text=True)
    if ping.returncode != 0:
        print(f"sweep_throughput: no SLURM answers ({(ping.stderr or ping.stdout).strip()}); "
              'run eval "$(scripts/local-slurm.sh env)" first', file=sys.stderr)
        return 2
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hpcr-bench-throughput-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    size = ["--image_size", "32", "--max_epochs", "2", "--val_interval", "2"] if args.quick else []
    common = ["--bundle", str(BUNDLE), "--dataset_dir", str(work / "data"), *size]
    lrs = LEARNING_RATES[: args.points]
    node_cpus = len(os.sched_getaffinity(0))
    print(f"sweep_throughput: {args.points}-point sweep of synthetic_seg{' (quick)' if args.quick else ''}, "
          f"profile slurm (1 CPU per task) on {node_cpus} CPUs vs each point alone with --cpus 1; "
          f"python {sys.version.split()[0]}")
    try:
        # the first run also writes the synthetic volumes (in initialize, outside wall_s)
        alone: list[float] = []
        alone_cpu: list[float] = []
        with Contention() as solo_load:
            for i, lr in enumerate(lrs):
                out = work / "alone" / str(i)
                before = children_cpu()
                hpcr(["run", "training", *common, "--cpus", "1", "--learning_rate", lr, "--output_dir", str(out)],
                     work, env)
                alone_cpu.append(children_cpu() - before)
                alone.append(wall_s(out))
                cpus = yaml.safe_load((out / "run.yaml").read_text())["cpus"]
                assert cpus["torch_threads"] == 1, cpus
        t0, busy0, own0 = time.perf_counter(), busy_seconds(), children_cpu()
        sub = hpcr(["sweep", "training", *common, "--cluster", "slurm", "--slurm", "time=30",
                    "--output_dir", str(work / "sweep"), "--sweep", f"learning_rate={','.join(lrs)}"], work, env)
        m = re.search(r"array\(s\): ([\d, ]+)", sub.stdout)
        arrays = [a.strip() for a in m.group(1).split(",")] if m else []
        points = [work / "sweep" / "points" / f"{i:04d}" for i in range(len(lrs))]  # written by each job
        others = wait_for_points(points, arrays, env, args.timeout)
        makespan, busy, own = time.perf_counter() - t0, busy_seconds() - busy0, children_cpu() - own0
        jobs_cpu = job_cpu_seconds(arrays, len(lrs), env)
        # what the CPUs did during the sweep besides our jobs and our own submission process
        others_share = max(0.0, (busy - sum(jobs_cpu.values()) - own) / (node_cpus * makespan))
        in_sweep, threads = [], set()
        for point, lr in zip(points, lrs):
            record = yaml.safe_load((point / "run.yaml").read_text())
            if record.get("status") != "completed":
                raise SystemExit(f"point {point.name} ended {record.get('status')}: see {point}/error.txt")
            assert float(record["sweep"]["overrides"]["learning_rate"]) == float(lr), record["sweep"]
            in_sweep.append(wall_s(point))
            c = record["cpus"]
            threads.add(f"count {c['count']} from {c['source']}, torch threads {c['torch_threads']}")
        ratios = [s / a for s, a in zip(in_sweep, alone)]
        # CPU seconds of each whole process (start-up included) on both sides: ~1 means no work was added
        # by threads fighting for cores, whatever the other load on the machine did to the wall times
        by_index = {int(job.rsplit("_", 1)[-1]): v for job, v in jobs_cpu.items() if "_" in job}
        sweep_cpu = [by_index.get(i, float("nan")) for i in range(len(lrs))]
        for lr, a, s, r, ac, sc in zip(lrs, alone, in_sweep, ratios, alone_cpu, sweep_cpu):
            print(f"point learning_rate={lr}: alone {a:.1f} s, in sweep {s:.1f} s, ratio sweep/alone={r:.2f}"
                  f" (process CPU time alone {ac:.1f} s, in sweep {sc:.1f} s)")
        worst = max(ratios)
        verdict = "meets" if worst <= GOAL_RATIO else "misses"
        print(f"sweep_throughput ratio sweep/alone: max={worst:.2f} mean={statistics.mean(ratios):.2f} "
              f"(goal <= {GOAL_RATIO}: {verdict} it)")
        print(f"# sweep: {makespan:.1f} s from sbatch to the last point's end (sum of the points alone: "
              f"{sum(alone):.1f} s); jobs ran with: {'; '.join(sorted(threads))}")
        cpu_ratios = [sc / ac for sc, ac in zip(sweep_cpu, alone_cpu)]
        print(f"sweep_throughput cpu-time ratio sweep/alone: max={max(cpu_ratios):.2f} "
              f"mean={statistics.mean(cpu_ratios):.2f}")
        print(solo_load.line().replace("# machine:", "# machine (runs alone):"))
        note = "  (busy machine: figures are not reliable)" if others_share > 0.10 else ""
        print(f"# machine (sweep): {node_cpus} CPUs; other processes used {others_share:.0%} of them{note}")
        print(f"# other jobs running on the cluster during the sweep: {', '.join(sorted(others)) or 'none'}"
              + ("  (figures are not reliable)" if others else ""))
        from bench.results import Figure, write_result

        write_result("sweep_throughput", [
            Figure(f"{args.points} points of the example on the local SLURM: a point's training time in the sweep, "
                   "worst", round(max(in_sweep), 1), "s", "the same point alone, `run --cpus 1`",
                   round(alone[ratios.index(worst)], 1), f"<= {GOAL_RATIO}x", worst <= GOAL_RATIO,
                   note=f"mean ratio {statistics.mean(ratios):.2f}"),
        ], measured_paths=["hpc_runner/resources", "hpc_runner/scheduler", "hpc_runner/engine",
                           "bench/sweep_throughput.py"], quick=args.quick)
        return 0 if worst <= GOAL_RATIO else 1
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
