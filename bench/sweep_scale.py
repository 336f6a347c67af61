"""A 10,000-point sweep on the real local SLURM, under a MaxSubmitJobs limit: submit, status, collect.

Each step runs in its own fresh process (imports before the clock, as in bench/sweep_submit.py):

  check      `hpc-runner sweep --dry-run`: load the bundle, expand the grid, check every point.
  sweep      `hpc-runner sweep`: the same, plus write the sweep dir and submit. The QOS
             `hpcr-limited` of the local cluster is set to MaxSubmitJobsPerUser=LIMIT for the run, so
             the governor submits LIMIT tasks (arrays split at MaxArraySize 1001) and leaves the rest
             waiting in the sweep dir. Jobs are held (--hold) and cancelled after timing. Timed twice:
             after the dry run, as the README runs it (sacctmgr's limits kept from the dry run a moment
             before: scheduler/slurm/limits_cache.py), and cold (nothing kept: sacctmgr asked inside
             the clock, ~0.2-0.3 s on slurmdbd here).
  submitit   submitit's bare `map_array` of a trivial function for the same array sizes the sweep
             submitted (the peer: what the same sbatch work costs without any checking or records).
  status     `hpc-runner status DIR` once sacct lists every task (in-process, and as a new process).
  collect    `hpc-runner collect DIR` after every point was given a completed run dir (run.yaml and
             summary.json copied from a template of realistic size) and its line in the sweep's results file,
             appended as its job appends it (jobs/results.py): collect reads that one file. The anchor, in
             the same run: the same sweep with results.jsonl moved aside, so that collect reads every
             point's run.yaml and summary.json (a sweep of an earlier version; before issue 45, always).

  point     a point's start-up in its job, before its run: read its own line of the ledger (under the
             sweep's lock), write its run dir (the base config plus its overrides), the names tracking
             gives it: `point start N ms`, at N points and, for comparison, in a 1-point sweep.

Each child reports its peak RSS. Goals (issues 11, 22 and 45): sweep within 1.5x of submitit for the same
arrays, status <= 1 s with one sacct call, collect <= 1 s, point start <= 50 ms, memory <= 200 MB.

    source /tmp/hpcr-slurm/env.sh
    .venv/bin/python bench/sweep_scale.py                  # 10,000 points, limit 2,000
    .venv/bin/python bench/sweep_scale.py --points 1000 --limit 300   # a quicker look
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_submit import (
    BUNDLE,
    ROOT,
    _calls,
    _peak_mb,
    _trivial,
    cancel,
    grid,
    make_room,
    make_shims,
    run_command,
    wait_for_sacct,
)

QOS = "hpcr-limited"
GOALS = {"ratio": 1.5, "status_s": 1.0, "collect_s": 1.0, "peak_mb": 200.0, "point_ms": 50.0}
BEFORE_45 = (1.46, "7a77b56")  # collect of the same 10,000 points before the results file (s, commit), this VM


def _sweep_argv(folder: Path, n: int) -> list[str]:
    argv = ["training", "--bundle", str(BUNDLE), "--cluster", "slurm", "--slurm", "time=5",
            "--slurm", f"qos={QOS}", "--hold", "--output_dir", str(folder)]
    for s in grid(n):
        argv += ["--sweep", s]
    return argv


def _warm(name: str, argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            contextlib.suppress(SystemExit):
        run_command(name, argv)


def child_check(n: int, folder: Path) -> dict:
    """Time `hpc-runner sweep --dry-run` of n points: load, expand, check (nothing written)."""
    _warm("sweep", [*_sweep_argv(folder, 1), "--dry-run"])
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = run_command("sweep", [*_sweep_argv(folder, n), "--dry-run"])
    return {"seconds": time.perf_counter() - t0, "rc": rc, "peak_mb": _peak_mb()}


def child_sweep(n: int, folder: Path, cold: bool = False) -> dict:
    """Time `hpc-runner sweep` of n points under the QOS limit; return time, arrays, waiting points (``cold``:
    no limits kept from the dry run before it)."""
    from hpc_runner.jobs.ledger import WAITING, SweepRecord
    from hpc_runner.scheduler.slurm import cluster_info

    _warm("sweep", [*_sweep_argv(folder, 1), "--dry-run"])
    cluster_info._CACHE.clear()  # scontrol is asked again inside the clock
    if cold:
        from hpc_runner.records.user_cache import user_cache_dir

        shutil.rmtree(user_cache_dir() / "slurm-limits", ignore_errors=True)
    _forget_calls()
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = run_command("sweep", _sweep_argv(folder, n))
    seconds = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"hpc-runner sweep exited {rc}:\n{out.getvalue()}")
    record = SweepRecord.load(folder)
    arrays = [a for s in record.submissions() for a in s["arrays"]]
    return {
        "seconds": seconds,
        "arrays": [a["job_id"] for a in arrays],
        "sizes": [a["size"] for a in arrays],
        "waiting": sum(1 for p in record.points if p.get("submit") == WAITING),
        "points": len(record.points),
        "peak_mb": _peak_mb(),
        "said": [ln for ln in out.getvalue().splitlines() if ln.strip()][-3:],
    }


def child_submitit(sizes: list[int], folder: Path) -> dict:
    """Time bare map_array calls of the given array sizes (trivial function, held jobs)."""
    import submitit

    ex = submitit.SlurmExecutor(folder=folder / "%j")
    ex.update_parameters(time=5, cpus_per_task=1, qos=QOS, additional_parameters={"hold": True})
    t0 = time.perf_counter()
    arrays = [ex.map_array(_trivial, range(size))[0].job_id.split("_")[0] for size in sizes]
    return {"seconds": time.perf_counter() - t0, "arrays": arrays, "peak_mb": _peak_mb()}


def child_point(folder: Path, rounds: int = 5) -> dict:
    """Time a point's start-up in its job (jobs/task.py, jobs/job.py), imports before the clock: its own
    record, its run dir written from the base config, its tracking name. The median of ``rounds`` points."""
    import statistics

    from hpc_runner.jobs.job import materialize_point
    from hpc_runner.jobs.ledger import SweepRecord
    from hpc_runner.jobs.task import _read_points
    from hpc_runner.tracking.settings import point_overrides

    record = SweepRecord.load(folder)
    n = len(record.points)
    picks = [(n * k) // (rounds + 1) for k in range(1, rounds + 1)] if n > rounds else list(range(n))
    times = []
    for i in picks:
        t0 = time.perf_counter()
        point = _read_points(str(folder), [i])[i]
        overrides = {**point.get("params", {}), **point.get("extra", {})}
        materialize_point(str(folder), folder / point["dir"], overrides, record.data.get("entry"))
        point_overrides(folder / point["dir"])
        times.append(time.perf_counter() - t0)
    return {"ms": 1000 * statistics.median(times), "points": n, "peak_mb": _peak_mb()}


def _forget_calls() -> None:
    """Drop the scheduler calls counted so far in this child (the warm-up's)."""
    Path(os.environ["HPCR_BENCH_CALLS"]).unlink(missing_ok=True)


def child_command(name: str, folder: Path, rounds: int = 1) -> dict:
    """Time `hpc-runner status|collect DIR` in-process (warmed up on the same dir first): the fastest of ``rounds``
    calls (collect: 3, on this shared 2-CPU VM whose load comes and goes; it writes the same tables each time),
    with every call's time and CPU time."""
    if name == "collect":
        _warm("status", [str(folder), "--json"])  # imports the tracking side without writing results
    else:
        _warm(name, [str(folder)])
    _forget_calls()
    runs, cpu = [], []
    for _ in range(rounds):
        out = io.StringIO()
        t0, c0 = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(out):
            rc = run_command(name, [str(folder)])
        runs.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    lines = out.getvalue().splitlines()
    return {"seconds": min(runs), "runs": runs, "cpu": cpu, "rc": rc, "head": lines[:3], "peak_mb": _peak_mb()}


def run_child(args: list[str], env: dict[str, str], calls: Path) -> dict:
    """Run one measurement in a fresh process; add the counted scheduler calls."""
    calls.unlink(missing_ok=True)
    res = subprocess.run([sys.executable, __file__, "--child", *args], env={**env, "HPCR_BENCH_CALLS": str(calls)},
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"child {args[0]} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    data["calls"] = _calls(calls)
    return data


def set_qos_limit(limit: int | None, env: dict[str, str]) -> None:
    """Set (or clear, with None) MaxSubmitJobsPerUser of the local cluster's limited QOS."""
    value = str(limit) if limit is not None else "-1"
    res = subprocess.run(["sacctmgr", "-i", "modify", "qos", QOS, "set", f"MaxSubmitJobsPerUser={value}"],
                         env=env, capture_output=True, text=True)
    if res.returncode != 0 and "Nothing modified" not in res.stdout + res.stderr:
        raise SystemExit(f"sacctmgr could not set the QOS limit (is the local cluster's QOS there?): {res.stderr}")


def _wait_for_empty_qos(env: dict[str, str], timeout: float = 120) -> None:
    """Wait until no job of the limited QOS is queued (cancelled tasks leave the queue within seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = subprocess.run(["squeue", "-h", "-r", "-q", QOS, "-o", "%i"], env=env, capture_output=True, text=True)
        if not res.stdout.split():
            return
        time.sleep(1)


def complete_every_point(folder: Path) -> None:
    """Give every point a completed run dir: run.yaml and summary.json of realistic size, and its line in the
    sweep's results file, appended as its job appends it when the point ends (jobs/task.py)."""
    from hpc_runner.jobs import ledger as sr
    from hpc_runner.jobs.ledger import SweepRecord
    from hpc_runner.jobs.results import handoff_of, record_point_result
    from hpc_runner.records.rundir import dump_yaml

    with sr.locked(folder) as led:  # as if the governor had sent the waiting ones: nothing tops up either
        first = next(p["job_id"] for p in led.points if p.get("job_id")).split("_")[0]
        for i in led.waiting():
            led.submit(i, f"{first}_{i}")
    record = SweepRecord.load(folder)
    for p in record.points:
        d = folder / p["dir"]
        d.mkdir(parents=True, exist_ok=True)
        run = {"status": "completed", "entry": "training", "bundle": {"name": "synthetic_seg"},
               "started": "2026-11-23T10:00:00", "ended": "2026-11-23T10:00:24",
               "sweep": {"dir": str(folder), "index": p["index"], "overrides": p["params"]},
               "job": {"id": p.get("job_id") or "0_0", "cluster": "slurm"},
               "environment": {"python": sys.version.split()[0], "torch": "2.13.0", "monai": "1.6.1"}}
        (d / "run.yaml").write_text(dump_yaml(run))
        summary = {"epochs": 2, "steps": 16, "final_loss": 0.1 + p["index"] * 1e-6, "metric_name": "dice",
                   "final_metric": 0.9, "best_metric": 0.91, "best_epoch": 2, "wall_s": 24.0,
                   "data_wait_s": 1.0, "compute_s": 22.0, "per_epoch": [{"loss": 0.2, "dice": 0.8}] * 2}
        (d / "summary.json").write_text(json.dumps(summary, indent=1))
        if record_point_result(folder, p["index"], handoff_of(p), d) is None:
            raise SystemExit(f"point {p['index']}: no line appended to the sweep's results file")


def _each(step: dict) -> str:
    """``3 (1.02, 0.98, 1.10 s; CPU 0.61, 0.60, 0.62 s)``: each call of a repeated step."""
    return (f"{len(step['runs'])} ({', '.join(f'{r:.2f}' for r in step['runs'])} s; CPU "
            f"{', '.join(f'{c:.2f}' for c in step['cpu'])} s)")


def _verdict(value: float, goal: float) -> str:
    return f"goal <= {goal:g}: {'met' if value <= goal else 'NOT met'}"


def main() -> int:
    """Run the benchmark and print one line per step with its goal."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=10_000, help="sweep size (a multiple of 100)")
    p.add_argument("--limit", type=int, default=2_000, help=f"MaxSubmitJobsPerUser of QOS {QOS} during the run")
    p.add_argument("--workdir", type=Path, help="where the sweep dir goes (default: a temp dir, removed)")
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        kind, *rest = args.child
        if kind == "check":
            data = child_check(int(rest[0]), Path(rest[1]))
        elif kind == "sweep":
            data = child_sweep(int(rest[0]), Path(rest[1]), cold=rest[2:] == ["cold"])
        elif kind == "submitit":
            data = child_submitit([int(s) for s in rest[0].split(",")], Path(rest[1]))
        elif kind == "point":
            data = child_point(Path(rest[0]))
        else:
            data = child_command(kind, Path(rest[0]), int(rest[1]) if rest[1:] else 1)
        print(json.dumps(data))
        return 0
    work = Path(args.workdir or tempfile.mkdtemp(prefix="hpcr-scale-"))
    shims = make_shims(work / "bin")
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
           "XDG_CACHE_HOME": str(work / "cache"), "HPCR_LIMITS_CACHE_S": "300"}  # the caches: their own, as shipped
    calls = work / "calls.txt"
    from hpc_runner.scheduler.slurm import cluster_info

    config = cluster_info.scheduler_config()
    max_jobs = int(config.get("MaxJobCount", "10000").split()[0])
    min_age = int(config.get("MinJobAge", "300 sec").split()[0])
    n, folder = args.points, work / "sweep"
    print(f"sweep_scale: {n} points, QOS {QOS} MaxSubmitJobsPerUser={args.limit}, MaxArraySize "
          f"{config.get('MaxArraySize')}; held jobs, cancelled after timing; {os.cpu_count()} CPUs")
    make_room(2 * args.limit, env, max_jobs, min_age)
    set_qos_limit(args.limit, env)
    submitted: list[str] = []
    try:
        check = run_child(["check", str(n), str(work / "dry")], env, calls)
        os.sync()
        sweep = run_child(["sweep", str(n), str(folder)], env, calls)
        submitted += sweep["arrays"]
        wait_for_sacct(sweep["arrays"], sum(sweep["sizes"]), env)
        status = run_child(["status", str(folder)], env, calls)
        point = run_child(["point", str(folder)], env, calls)
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "hpc_runner", "status", str(folder)], env=env,
                             capture_output=True, text=True)
        status_cli = time.perf_counter() - t0 if res.returncode == 0 else float("nan")
        cancel(sweep["arrays"], env)  # the peer needs the same free slots of the QOS
        _wait_for_empty_qos(env)
        os.sync()
        peer = run_child(["submitit", ",".join(map(str, sweep["sizes"])), str(work / "submitit")], env, calls)
        submitted += peer["arrays"]
        cancel(peer["arrays"], env)
        _wait_for_empty_qos(env)
        os.sync()
        cold = run_child(["sweep", str(n), str(work / "sweep-cold"), "cold"], env, calls)
        submitted += cold["arrays"]
    finally:
        cancel(submitted, env)
        set_qos_limit(None, env)
    complete_every_point(folder)
    os.sync()
    collect = run_child(["collect", str(folder), "3"], env, calls)
    from hpc_runner.jobs.results import RESULTS_FILE

    lines = folder / RESULTS_FILE
    lines.rename(folder / f"{RESULTS_FILE}.aside")  # the anchor: every point's run dir read
    try:
        collect_dirs = run_child(["collect", str(folder), "3"], env, calls)
    finally:
        (folder / f"{RESULTS_FILE}.aside").rename(lines)
    ratio = sweep["seconds"] / peer["seconds"]
    cold_ratio = cold["seconds"] / peer["seconds"]
    peak = max(d["peak_mb"] for d in (check, sweep, status, collect))
    print(f"check     {check['seconds']:.2f} s  (expand + check {n} points, --dry-run)")
    print(f"sweep     {sweep['seconds']:.2f} s  submitted {sum(sweep['sizes'])} in {len(sweep['sizes'])} array(s), "
          f"{sweep['waiting']} waiting; sbatch calls {sweep['calls']['sbatch']}; peak RSS {sweep['peak_mb']:.0f} MB")
    print(f"submitit  {peer['seconds']:.2f} s  map_array x{len(peer['arrays'])} of the same sizes; "
          f"sbatch calls {peer['calls']['sbatch']}")
    print(f"          ratio sweep / submitit {ratio:.2f}x ({_verdict(ratio, GOALS['ratio'])})")
    print(f"cold      {cold['seconds']:.2f} s  the same sweep with no limits kept (sacctmgr calls "
          f"{cold['calls']['sacctmgr']}, against {sweep['calls']['sacctmgr']} after the dry run): "
          f"{cold_ratio:.2f}x submitit ({_verdict(cold_ratio, GOALS['ratio'])})")
    print(f"status    {status['seconds']:.3f} s in-process ({status_cli:.2f} s as a new process), sacct calls "
          f"{status['calls']['sacct']}, squeue calls {status['calls']['squeue']} "
          f"({_verdict(status['seconds'], GOALS['status_s'])}); {status['head'][1:2]}")
    print(f"collect   {collect['seconds']:.3f} s  ({_verdict(collect['seconds'], GOALS['collect_s'])}), best of "
          f"{_each(collect)}; sacct calls {collect['calls']['sacct'] // 3} a call")
    print(f"          {collect_dirs['seconds']:.3f} s without {RESULTS_FILE} (every run dir read), best of "
          f"{_each(collect_dirs)}")
    print(f"point start {point['ms']:.0f} ms at {point['points']} points: its own ledger line, its run dir, its "
          f"tracking name ({_verdict(point['ms'], GOALS['point_ms'])})")
    print(f"memory    peak RSS {peak:.0f} MB over the steps ({_verdict(peak, GOALS['peak_mb'])})")
    ok = (max(ratio, cold_ratio) <= GOALS["ratio"] and status["seconds"] <= GOALS["status_s"]
          and point["ms"] <= GOALS["point_ms"] and collect["seconds"] <= GOALS["collect_s"]
          and peak <= GOALS["peak_mb"])
    print(f"sweep_scale: {n} points: submit {ratio:.2f}x submitit ({cold_ratio:.2f}x cold), status "
          f"{status['seconds']:.2f} s, collect {collect['seconds']:.2f} s, peak {peak:.0f} MB -> goals "
          f"{'met' if ok else 'NOT met'}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    from bench.results import Figure, write_result

    sub = "submitit `map_array` of the same arrays"
    write_result("sweep_scale", [
        Figure(f"{n:,} points: expand + check (`--dry-run`)", round(check["seconds"], 2), "s"),
        Figure(f"{n:,} points: sweep after the dry run (limits kept)", round(sweep["seconds"], 2), "s", sub,
               round(peer["seconds"], 2), f"<= {GOALS['ratio']}x", ratio <= GOALS["ratio"],
               note=f"sbatch calls {sweep['calls']['sbatch']}, sacctmgr calls {sweep['calls']['sacctmgr']}"),
        Figure(f"{n:,} points: sweep, cold (no limits kept)", round(cold["seconds"], 2), "s", sub,
               round(peer["seconds"], 2), f"<= {GOALS['ratio']}x", cold_ratio <= GOALS["ratio"],
               note=f"sacctmgr calls {cold['calls']['sacctmgr']}"),
        Figure(f"{n:,} points: `status`, in-process", round(status["seconds"], 3), "s",
               goal=f"<= {GOALS['status_s']:g} s", goal_met=status["seconds"] <= GOALS["status_s"],
               note=f"sacct calls {status['calls']['sacct']}"),
        Figure(f"{n:,} points: `collect` (the sweep's results file, one line per point)", round(collect["seconds"], 2),
               "s", f"the same sweep without {RESULTS_FILE}: every point's run.yaml and summary.json read",
               round(collect_dirs["seconds"], 2), f"<= {GOALS['collect_s']:g} s",
               collect["seconds"] <= GOALS["collect_s"],
               note=f"best of 3 calls in one process, each with its sacct call (CPU "
                    f"{min(collect['cpu']):.2f} s, without the file {min(collect_dirs['cpu']):.2f} s); before the "
                    f"results file (issue 45): {BEFORE_45[0]} s on {BEFORE_45[1]}, one call"),
        Figure(f"{n:,} points: peak RSS over the steps", round(peak), "MB", goal=f"<= {GOALS['peak_mb']:g} MB",
               goal_met=peak <= GOALS["peak_mb"]),
    ], measured_paths=["hpc_runner/sweep", "hpc_runner/scheduler", "hpc_runner/cli", "hpc_runner/records",
                       "bench/sweep_scale.py"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
