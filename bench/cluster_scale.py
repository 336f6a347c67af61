"""A 1,000-point sweep of tiny points over every node of the local SLURM, under a QOS submit limit, beside
submitit's ``map_array`` of the same work on the same cluster (issue 23's scale by emulation).

Start the cluster with as many emulated nodes as you want to spread over (each is a slurmd of its own):

    LOCAL_SLURM_NODES=16 scripts/local-slurm.sh start && eval "$(scripts/local-slurm.sh env)"
    .venv/bin/python bench/cluster_scale.py                         # 1,000 points, --pack 25, limit 20
    .venv/bin/python bench/cluster_scale.py --points 200 --pack 10  # a quicker look
    scripts/local-slurm.sh start                                    # back to the 2 nodes the tests use

hpc-runner:  ``hpc-runner sweep --sweep x=range(N) --pack K`` of a bundle whose point writes two time
             marks (no training: the figure is the scheduling and start-up cost), with the profile's QOS
             ``hpcr-limited`` set to MaxSubmitJobsPerUser=LIMIT for the run: the governor queues at most
             LIMIT tasks and the ending tasks top up the rest.
submitit:    ``map_array`` of a function doing the same two marks, N tasks in one array (split at
             MaxArraySize), under the default QOS: submitit has no governor, so under the limit its
             map_array would be refused outright (the bench says so if it is).

Printed per tool: points per minute (first sbatch to the last point's end), the most jobs (array tasks)
queued or running at once (squeue every second), sbatch calls per point (a PATH shim counts them, the
tasks' top-ups too), and how many nodes ran points (sacct's NodeList). Then the ratios hpc-runner/submitit.
Not part of CI: it takes minutes and wants the cluster to itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench._common import Contention  # noqa: E402
from bench.sweep_pack import shims as sbatch_shim  # noqa: E402
from bench.sweep_scale import set_qos_limit  # noqa: E402

QOS = "hpcr-limited"
DROPPED = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
           "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "HPCR_CPUS")
TRAIN_YAML = """\
x: 0
output_dir: .
clock: "$__import__('time').time"
path: "$__import__('pathlib').Path"
run:
  - "$@path(@output_dir).joinpath('first_step.txt').write_text(repr(@clock()))"
  - "$@path(@output_dir).joinpath('end.txt').write_text(repr(@clock()))"
"""
PROFILE = f"""\
extends: slurm
cpus_per_task: 1
time: 30
qos: {QOS}
"""


def _point(folder: str, x: int) -> float:
    """submitit's task: the same two marks a point writes; return the end time."""
    out = Path(folder) / f"{x:05d}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "first_step.txt").write_text(repr(time.time()))
    end = time.time()
    (out / "end.txt").write_text(repr(end))
    return end


class QueueWatch:
    """Count the user's jobs (array tasks one by one) in squeue every second; keep the most seen."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env, self.most, self._stop = env, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        user = os.environ.get("USER") or subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
        while not self._stop.is_set():
            res = subprocess.run(["squeue", "-h", "-r", "-u", user, "-o", "%i"], env=self.env,
                                 capture_output=True, text=True)
            if res.returncode == 0:
                self.most = max(self.most, len(res.stdout.split()))
            self._stop.wait(1.0)

    def __enter__(self) -> QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def wait_for_marks(folder: Path, n: int, timeout: float, what: str) -> float:
    """Wait until n ``end.txt`` marks exist under ``folder``; return the latest end time."""
    deadline = time.monotonic() + timeout
    while True:
        ends = list(folder.glob("*/end.txt"))
        if len(ends) >= n:
            return max(float(p.read_text()) for p in ends)
        if time.monotonic() > deadline:
            raise SystemExit(f"cluster_scale: {what}: {n - len(ends)} of {n} points not done after {timeout:.0f} s")
        time.sleep(2.0)


def nodes_of(job_ids: list[str], env: dict[str, str]) -> set[str]:
    """The nodes sacct says the jobs ran on."""
    if not job_ids:
        return set()
    res = subprocess.run(["sacct", "-X", "-n", "-P", "-o", "NodeList", "-j", ",".join(job_ids)], env=env,
                         capture_output=True, text=True)
    nodes: set[str] = set()
    for line in res.stdout.split():
        if line and line != "None assigned":
            expanded = subprocess.run(["scontrol", "show", "hostnames", line], env=env, capture_output=True,
                                      text=True).stdout.split()
            nodes.update(expanded or [line])
    return nodes


def write_bundle(folder: Path) -> Path:
    """The tiny bundle (sweep_pack's, without its sleep)."""
    from bench.sweep_pack import write_bundle as write_sleeping_bundle

    write_sleeping_bundle(folder)
    (folder / "configs" / "train.yaml").write_text(TRAIN_YAML)
    return folder


def measure_hpc_runner(work: Path, n: int, pack: int, env: dict[str, str], timeout: float) -> dict:
    """Run the packed sweep under the QOS limit; return its figures."""
    calls = work / "hpcr-sbatch-calls.txt"
    clusters = work / "clusters"
    clusters.mkdir(exist_ok=True)
    (clusters / "benchscale.yaml").write_text(PROFILE)
    run_env = {**env, "HPCR_CLUSTER_PATH": str(clusters),
               "PATH": f"{sbatch_shim(work / 'hpcr-shims', calls)}{os.pathsep}{env.get('PATH', '')}"}
    argv = [sys.executable, "-m", "hpc_runner", "sweep", "--bundle", str(work / "bundle"), "--cluster",
            "benchscale", "--output_dir", "sweep", "--sweep", f"x=range({n})", "--pack", str(pack)]
    with QueueWatch(env) as watch:
        t0 = time.time()
        res = subprocess.run(argv, cwd=work, env=run_env, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise SystemExit(f"cluster_scale: hpc-runner sweep failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        last = wait_for_marks(work / "sweep" / "points", n, timeout, "hpc-runner")
    record = json.loads((work / "sweep" / "sweep.yaml").read_text())
    jobs = sorted({str(j).split("_")[0] for p in record["points"] for j in p.get("jobs") or [p.get("job_id")] if j})
    sbatch = calls.read_text().split().count("sbatch") if calls.exists() else 0
    return {"wall": last - t0, "most_queued": watch.most, "sbatch": sbatch, "nodes": nodes_of(jobs, env)}


def measure_submitit(work: Path, n: int, env: dict[str, str], timeout: float) -> dict:
    """Run submitit's map_array of the same work (default QOS); return its figures."""
    calls = work / "submitit-sbatch-calls.txt"
    os.environ["PATH"] = f"{sbatch_shim(work / 'submitit-shims', calls)}{os.pathsep}{env.get('PATH', '')}"
    import submitit

    from hpc_runner.scheduler.slurm.cluster_info import max_array_size

    limit, _ = max_array_size()
    marks = work / "submitit-points"
    ex = submitit.SlurmExecutor(folder=work / "submitit" / "%j")
    ex.update_parameters(time=30, cpus_per_task=1)
    with QueueWatch(env) as watch:
        t0 = time.time()
        jobs = []
        for start in range(0, n, limit):
            xs = range(start, min(n, start + limit))
            jobs += ex.map_array(_point, [str(marks)] * len(xs), xs)
        last = wait_for_marks(marks, n, timeout, "submitit")
    ids = sorted({j.job_id.split("_")[0] for j in jobs})
    sbatch = calls.read_text().split().count("sbatch") if calls.exists() else 0
    return {"wall": last - t0, "most_queued": watch.most, "sbatch": sbatch, "nodes": nodes_of(ids, env)}


def submitit_under_the_limit(work: Path, n: int, limit: int, env: dict[str, str]) -> str:
    """What submitit's map_array does under the same QOS limit (a held array, cancelled at once)."""
    import submitit

    ex = submitit.SlurmExecutor(folder=work / "submitit-limited" / "%j")
    ex.update_parameters(time=30, cpus_per_task=1, qos=QOS, additional_parameters={"hold": True})
    try:
        jobs = ex.map_array(_point, [str(work / "unused")] * n, range(n))
    except Exception as exc:  # sbatch's refusal, as submitit raises it
        return f"refused: {str(exc).strip().splitlines()[-1][:200]}"
    subprocess.run(["scancel", jobs[0].job_id.split("_")[0]], env=env, capture_output=True)
    return f"accepted {len(jobs)} tasks (the QOS limit {limit} was not enforced at submit)"


def main() -> int:
    """Measure both; print the figures and the ratios."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", type=int, default=1000, metavar="N")
    p.add_argument("--pack", type=int, default=25, metavar="K", help="points per hpc-runner task")
    p.add_argument("--limit", type=int, default=20, metavar="L", help="MaxSubmitJobsPerUser of the QOS")
    p.add_argument("--workdir", type=Path, help="keep the sweeps here (default: a temp dir, removed)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to wait for each tool")
    p.add_argument("--skip-submitit", action="store_true", help="hpc-runner only")
    args = p.parse_args()
    ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True)
    if ping.returncode != 0 or "UP" not in ping.stdout:
        print("cluster_scale: no SLURM answers; start one with LOCAL_SLURM_NODES=16 scripts/local-slurm.sh start")
        return 1
    env = {k: v for k, v in os.environ.items() if k not in DROPPED and not k.startswith("HPCR_")}
    total = len(set(subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()))
    work = args.workdir or Path(tempfile.mkdtemp(prefix="hpcr-cluster-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    write_bundle(work / "bundle")  # the tiny bundle: two time marks
    print(f"cluster_scale: {args.points} tiny points on {total} node(s); hpc-runner --pack {args.pack} under "
          f"MaxSubmitJobsPerUser={args.limit}; submitit map_array under the default QOS; in {work}", flush=True)
    results = {}
    try:
        set_qos_limit(args.limit, env)
        with Contention() as load_h:
            results["hpc-runner"] = measure_hpc_runner(work, args.points, args.pack, env, args.timeout)
        refusal = submitit_under_the_limit(work, args.points, args.limit, env) if not args.skip_submitit else ""
        set_qos_limit(None, env)
        if not args.skip_submitit:
            with Contention() as load_s:
                results["submitit"] = measure_submitit(work, args.points, env, args.timeout)
    finally:
        set_qos_limit(None, env)
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    for name, r in results.items():
        print(f"{name}: {args.points / r['wall'] * 60:.0f} points/min (wall {r['wall']:.1f} s), at most "
              f"{r['most_queued']} job(s) queued or running at once, {r['sbatch'] / args.points:.3f} sbatch "
              f"call(s) per point ({r['sbatch']}), points ran on {len(r['nodes'])} of {total} node(s)")
    if refusal:
        print(f"submitit map_array of {args.points} under MaxSubmitJobsPerUser={args.limit}: {refusal}")
    if "submitit" in results:
        h, s = results["hpc-runner"], results["submitit"]
        print(f"cluster_scale ratio hpc-runner/submitit: points per minute={s['wall'] / h['wall']:.3f}, "
              f"most queued={h['most_queued'] / max(1, s['most_queued']):.3f}, "
              f"sbatch calls={h['sbatch'] / max(1, s['sbatch']):.3f}")
        print(load_s.line().replace("# machine:", "# machine (submitit; its jobs count as others):"))
    print(load_h.line().replace("# machine:", "# machine (hpc-runner; its jobs count as others):"))
    from bench.results import Figure, write_result

    h, s = results["hpc-runner"], results.get("submitit")
    per_min = {k: round(args.points / r["wall"] * 60) for k, r in results.items()}
    write_result("cluster_scale", [
        Figure(f"{args.points:,} tiny points over {total} emulated nodes, `--pack {args.pack}`: throughput",
               per_min["hpc-runner"], "points/min", "submitit `map_array`, default QOS" if s else None,
               per_min.get("submitit")),
        Figure(f"the same: most jobs queued or running at once (MaxSubmitJobsPerUser={args.limit})", h["most_queued"],
               "jobs", "submitit `map_array`" if s else None, s["most_queued"] if s else None,
               f"<= {args.limit}", h["most_queued"] <= args.limit),
        Figure("the same: nodes the points ran on", len(h["nodes"]), f"of {total}", goal="every node",
               goal_met=len(h["nodes"]) == total),
    ], measured_paths=["hpc_runner/sweep", "hpc_runner/scheduler", "bench/cluster_scale.py"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
