"""Submitting a sweep to a real SLURM: `hpc-runner sweep` vs submitit's bare `map_array` of the same N.

For each N (1,000 and 5,000 by default) and each round, two child processes run in turn (the order
rotates each round, and `sync` runs before each, so the writeback of one does not land on the other):

  submitit   SlurmExecutor.map_array(trivial function, range(N)): one pickle and folder per task.
             MaxArraySize caps an array, and bare map_array does not split (submitit issue #1624),
             so N > MaxArraySize is given as ceil(N / MaxArraySize) map_array calls.
  hpc-runner `hpc-runner sweep` (its CLI module, in-process): load the bundle config, expand the grid,
             check every point, write the sweep dir (base config, sweep.yaml), split into arrays of
             at most MaxArraySize and submit them through map_array.

Both submit held jobs (sbatch --hold) to the cluster's default partition and everything is cancelled
right after it is timed, so nothing runs. Imports happen before the clock starts on both sides (the
hpc-runner child warms up with a --dry-run); scontrol is asked inside the clock, sacctmgr's limits are
kept from the dry run (scheduler/slurm/limits_cache.py), as after a user's `sweep --dry-run`.
sbatch, sacct and squeue are counted by wrappers put first on PATH. Then `hpc-runner status` of the
sweep is timed (in-process and as a fresh process) once sacct lists every task. Each child reports its
peak RSS (ru_maxrss). The median of the rounds is printed with the ratio hpc-runner / submitit.

    source /tmp/hpcr-slurm/env.sh
    .venv/bin/python bench/sweep_submit.py            # N = 1000 and 5000, 3 rounds
    .venv/bin/python bench/sweep_submit.py --quick    # N = 200, 1 round (smoke run)
"""

from __future__ import annotations

import argparse
import contextlib
import io
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
from bench.results import Figure, write_result  # noqa: E402  (stdlib only: the children's clocks are not touched)

BUNDLE = ROOT / "bundles" / "synthetic_seg"
COUNTED = ("sbatch", "sacct", "squeue", "sacctmgr")
GOAL_RATIO = 1.5
GOAL_STATUS_S = 0.5


def _trivial(x: int) -> int:
    return x


def grid(n: int) -> list[str]:
    """--sweep options giving n points: learning_rate x seed x batch_size (n a multiple of 100)."""
    if n % 100 == 0 and n >= 100:
        return [f"learning_rate=logspace(-5,-2,{n // 100})", "seed=range(10)", "batch_size=range(1,11)"]
    return [f"seed=range({n})"]


def make_shims(folder: Path) -> Path:
    """Write sbatch/sacct/squeue wrappers that log each call to $HPCR_BENCH_CALLS and exec the real one."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in COUNTED:
        real = shutil.which(name)
        if real is None:
            raise SystemExit(f"{name} not found: start the cluster (scripts/local-slurm.sh start), source its env.sh")
        shim = folder / name
        shim.write_text(f'#!/bin/sh\necho {name} >> "$HPCR_BENCH_CALLS"\nexec {real} "$@"\n')
        shim.chmod(0o755)
    return folder


def _calls(path: Path) -> dict[str, int]:
    lines = path.read_text().split() if path.exists() else []
    return {name: lines.count(name) for name in COUNTED}


def _peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- children (one measurement each)


def run_command(name: str, argv: list[str]) -> int:
    """Parse and run one hpc-runner command as hpc_runner.cli.main does, loading only that command's module."""
    import importlib

    from hpc_runner.config.argv import split_overrides

    module = importlib.import_module(f"hpc_runner.cli.{name}")
    parser = argparse.ArgumentParser(prog=f"hpc-runner {name}")
    parser.add_argument("--debug", action="store_true")
    module.add_arguments(parser)
    rest, overrides = split_overrides(parser, argv) if getattr(module, "ACCEPTS_OVERRIDES", False) else (argv, [])
    args = parser.parse_args(rest)
    args.override_tokens = overrides
    return int(module.main(args) or 0)


def child_submitit(n: int, folder: Path) -> dict:
    """Time bare map_array of n trivial tasks (split at MaxArraySize); return time, job ids, peak memory."""
    import submitit

    from hpc_runner.scheduler.slurm.cluster_info import max_array_size

    limit, _ = max_array_size()
    ex = submitit.SlurmExecutor(folder=folder / "%j")
    ex.update_parameters(time=5, cpus_per_task=1, additional_parameters={"hold": True})
    t0 = time.perf_counter()
    arrays = []
    for start in range(0, n, limit):
        jobs = ex.map_array(_trivial, range(start, min(n, start + limit)))
        arrays.append(jobs[0].job_id.split("_")[0])
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "arrays": arrays, "peak_mb": _peak_mb()}


def child_sweep(n: int, folder: Path, per_task_folders: bool = False) -> dict:
    """Time `hpc-runner sweep` of n points (in-process CLI); return time, array ids, peak memory.

    ``per_task_folders``: submitit's default layout (one folder per task, ``%j``) instead of ours (``%A``).
    """
    import jsonschema  # noqa: F401  (the metadata check imports it lazily)
    import submitit  # noqa: F401

    import hpc_runner.cli.sweep  # noqa: F401  (imported before the clock, like submitit)
    from hpc_runner.config import bundle_config  # noqa: F401
    from hpc_runner.jobs import job, submission  # noqa: F401
    from hpc_runner.jobs import ledger as sweep_record
    from hpc_runner.jobs.ledger import SweepRecord
    from hpc_runner.scheduler.slurm import cluster_info, executor  # noqa: F401

    if per_task_folders:
        sweep_record.JOB_FOLDER = "jobs/%j"
    argv = ["training", "--bundle", str(BUNDLE), "--cluster", "slurm", "--slurm", "time=5", "--hold",
            "--output_dir", str(folder)]
    with contextlib.redirect_stdout(io.StringIO()):  # warm-up: every lazy import happens before the clock
        run_command("sweep", [*argv, "--dry-run", "--sweep", "seed=1"])
    cluster_info._CACHE.clear()  # but scontrol is asked again inside the clock
    for s in grid(n):
        argv += ["--sweep", s]
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = run_command("sweep", argv)
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"hpc-runner sweep exited {rc}:\n{out.getvalue()}")
    record = SweepRecord.load(folder)
    arrays = [a["job_id"] for s in record.submissions() for a in s["arrays"]]
    return {"seconds": seconds, "arrays": arrays, "peak_mb": _peak_mb(), "points": len(record.points)}


def child_status(folder: Path) -> dict:
    """Time `hpc-runner status DIR` in-process; return time and the state counts."""
    import submitit.slurm.slurm  # noqa: F401

    import hpc_runner.cli.status  # noqa: F401
    from hpc_runner.config import values  # noqa: F401
    from hpc_runner.jobs import states, targets  # noqa: F401
    from hpc_runner.sweep import spec  # noqa: F401

    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = run_command("status", [str(folder)])
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rc": rc, "head": out.getvalue().splitlines()[:2], "peak_mb": _peak_mb()}


def child_sweep_per_task(n: int, folder: Path) -> dict:
    """child_sweep with submitit's one-folder-per-task layout, to compare like with like."""
    return child_sweep(n, folder, per_task_folders=True)


CHILDREN = {"submitit": child_submitit, "sweep": child_sweep, "sweep-%j": child_sweep_per_task}


def run_child(kind: str, n: int, folder: Path, env: dict[str, str], calls: Path) -> dict:
    """Run one measurement in a fresh process; add the counted scheduler calls."""
    calls.unlink(missing_ok=True)
    args = [sys.executable, __file__, "--child", kind, "--n", str(n), "--folder", str(folder)]
    res = subprocess.run(args, env={**env, "HPCR_BENCH_CALLS": str(calls)}, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"{kind} child failed:\n{res.stdout}\n{res.stderr}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    data["calls"] = _calls(calls)
    return data


def cancel(array_ids: list[str], env: dict[str, str]) -> None:
    """Cancel what a measurement submitted (held jobs never ran)."""
    if array_ids:
        subprocess.run(["scancel", *array_ids], env=env, capture_output=True, text=True)


def job_records(env: dict[str, str]) -> int:
    """How many job records the controller holds (each task of a cancelled array is one)."""
    res = subprocess.run(["squeue", "-h", "-t", "all", "-r", "-o", "%i"], env=env, capture_output=True, text=True)
    return len(res.stdout.split())


def make_room(n: int, env: dict[str, str], max_jobs: int, min_age: int) -> float:
    """Wait until n more job records fit well under MaxJobCount; return the seconds waited.

    Cancelled tasks stay in the controller for MinJobAge seconds, and at MaxJobCount every sbatch on the
    cluster (other people's too) blocks and retries: the bench must never get there.
    """
    t0 = time.monotonic()
    while (held := job_records(env)) + n > 0.8 * max_jobs:
        print(f"  (waiting for SLURM to purge old job records: {held} held, MaxJobCount {max_jobs}, "
              f"MinJobAge {min_age} s)", flush=True)
        time.sleep(15)
    return time.monotonic() - t0


def wait_for_sacct(array_ids: list[str], n: int, env: dict[str, str], timeout: float = 60) -> float:
    """Poll sacct (uncounted) until it lists n tasks of the arrays; return how long that took."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        res = subprocess.run(["sacct", "-X", "--parsable2", "-o", "JobID,State", "-j", ",".join(array_ids)],
                             env=env, capture_output=True, text=True)
        info = SlurmInfoWatcher().read_info(res.stdout)
        if sum(1 for k in info if "_" in k or k in array_ids) >= n:
            break
        time.sleep(0.5)
    return time.monotonic() - t0


def main() -> int:
    """Run the benchmark and print one line per measurement and the ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="N=200, one round")
    p.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    p.add_argument("--rounds", type=int, default=3, help="rounds per size (each leaves N job records for MinJobAge)")
    p.add_argument("--per-task-folders", action="store_true",
                   help="also time hpc-runner with submitit's one-folder-per-task layout (%%j)")
    p.add_argument("--workdir", type=Path, help="where the job folders go (default: a temp dir, removed)")
    p.add_argument("--child", choices=[*sorted(CHILDREN), "status"], help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        data = child_status(args.folder) if args.child == "status" else CHILDREN[args.child](args.n, args.folder)
        print(json.dumps(data))
        return 0
    sizes, rounds = ([200], 1) if args.quick else (args.sizes, args.rounds)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hpcr-bench-"))
    shims = make_shims(work / "bin")
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "XDG_CACHE_HOME": str(work / "cache"), "HPCR_LIMITS_CACHE_S": "300"}  # the caches: their own, as shipped
    calls = work / "calls.txt"
    from hpc_runner.scheduler.slurm import cluster_info
    from hpc_runner.scheduler.slurm.cluster_info import max_array_size

    limit, source = max_array_size()
    config = cluster_info.scheduler_config()
    max_jobs = int(config.get("MaxJobCount", "10000").split()[0])
    min_age = int(config.get("MinJobAge", "300 sec").split()[0])
    print(f"sweep_submit: MaxArraySize={limit} ({source}); held jobs on the default partition, cancelled after "
          f"timing; {rounds} round(s), median; {os.cpu_count()} CPUs; python {sys.version.split()[0]}")
    summary = []
    figures = []
    for n in sizes:
        kinds = ["submitit", "sweep", *(["sweep-%j"] if args.per_task_folders else [])]
        results: dict[str, list[dict]] = {k: [] for k in [*kinds, "status"]}
        status_cli: list[float] = []
        for r in range(rounds):
            # rotate the order each round, and flush dirty pages before each child, so that neither the
            # writeback of the previous child's files nor drift in machine load favours one side
            for kind in kinds[r % len(kinds):] + kinds[: r % len(kinds)]:
                folder = work / f"{kind}-{n}-{r}"
                make_room(n, env, max_jobs, min_age)
                os.sync()
                data = run_child(kind, n, folder, env, calls)
                if kind == "sweep":
                    wait_for_sacct(data["arrays"], n, env)
                    st = run_child("status", n, folder, env, calls)
                    t0 = time.perf_counter()
                    res = subprocess.run([sys.executable, "-m", "hpc_runner", "status", str(folder)], env=env,
                                         capture_output=True, text=True)
                    status_cli.append(time.perf_counter() - t0 if res.returncode == 0 else float("nan"))
                    results["status"].append(st)
                cancel(data["arrays"], env)
                results[kind].append(data)
        for r in range(rounds):  # removed only now: deleting 5,000 folders loads the disk for a while
            for kind in kinds:
                shutil.rmtree(work / f"{kind}-{n}-{r}", ignore_errors=True)
        med = {k: statistics.median(d["seconds"] for d in v) for k, v in results.items()}
        last = {k: v[-1] for k, v in results.items()}
        ratio = med["sweep"] / med["submitit"]
        arrays = len(last["sweep"]["arrays"])
        print(f"N={n:<5} submitit map_array x{len(last['submitit']['arrays'])}: {med['submitit']:.2f} s, "
              f"sbatch calls {last['submitit']['calls']['sbatch']}, peak RSS {last['submitit']['peak_mb']:.0f} MB")
        print(f"N={n:<5} hpc-runner sweep:          {med['sweep']:.2f} s, arrays {arrays}, "
              f"sbatch calls {last['sweep']['calls']['sbatch']}, peak RSS {last['sweep']['peak_mb']:.0f} MB, "
              f"ratio {ratio:.2f}x (goal <= {GOAL_RATIO}x: {'met' if ratio <= GOAL_RATIO else 'NOT met'})")
        print(f"N={n:<5} hpc-runner status:         {med['status']:.3f} s in-process "
              f"({statistics.median(status_cli):.2f} s as a new process), sacct calls "
              f"{last['status']['calls']['sacct']}, squeue calls {last['status']['calls']['squeue']}, peak RSS "
              f"{last['status']['peak_mb']:.0f} MB (goal <= {GOAL_STATUS_S} s: "
              f"{'met' if med['status'] <= GOAL_STATUS_S else 'NOT met'}); {last['status']['head'][-1].strip()}")
        if "sweep-%j" in med:
            r2 = med["sweep-%j"] / med["submitit"]
            print(f"N={n:<5} hpc-runner sweep, %j:      {med['sweep-%j']:.2f} s (one folder per task, as submitit), "
                  f"sbatch calls {last['sweep-%j']['calls']['sbatch']}, ratio {r2:.2f}x")
        summary.append((n, ratio, med["status"]))
        figures += [
            Figure(f"sweep of {n:,} points: expand, check, pre-flight, write, submit", round(med["sweep"], 2), "s",
                   f"submitit `map_array` x{len(last['submitit']['arrays'])}", round(med["submitit"], 2),
                   f"<= {GOAL_RATIO}x", ratio <= GOAL_RATIO),
            Figure(f"sweep of {n:,} points: sbatch calls", last["sweep"]["calls"]["sbatch"], "",
                   "submitit `map_array`", last["submitit"]["calls"]["sbatch"]),
            Figure(f"`status` of {n:,} points, in-process", round(med["status"], 3), "s", goal=f"<= {GOAL_STATUS_S} s",
                   goal_met=med["status"] <= GOAL_STATUS_S, note=f"sacct calls {last['status']['calls']['sacct']}"),
        ]
        sys.stdout.flush()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    ok = all(r <= GOAL_RATIO and s <= GOAL_STATUS_S for _, r, s in summary)
    print("sweep_submit: " + ", ".join(f"N={n}: {r:.2f}x, status {s:.3f} s" for n, r, s in summary)
          + f" -> goals {'met' if ok else 'NOT met'}")
    write_result("sweep_submit", figures, measured_paths=["hpc_runner/sweep", "hpc_runner/scheduler", "hpc_runner/cli",
                                                         "bench/sweep_submit.py"], quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
