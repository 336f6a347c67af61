"""What a command costs the login node: `sweep --dry-run` of the example with the pre-flight, the first time (an
empty cache) and the second time, against `--no-preflight`; wall seconds and peak memory (RSS) of the process.

Goals (issue 34): the second time at most 1 s and 200 MB; the first time 200 MB (the pre-flight reads the
targets from source, config/static_targets.py; peak RSS via wait4 counts any child process too).
Usage: python bench/login_node.py [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.results import Figure, write_result  # noqa: E402

GOAL_SECOND_S, GOAL_MB = 1.0, 200.0


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Return (wall seconds, peak RSS in MB) of one fresh process running ``cmd``."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024  # Linux: KiB


def main() -> int:
    """Print the table and whether each goal is met."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    cmd = [sys.executable, "-m", "hpc_runner", "sweep", "--bundle", "bundles/synthetic_seg", "--cluster", "local",
           "--sweep", "learning_rate=1e-3,2e-3", "--dry-run"]
    rows = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "XDG_CACHE_HOME": cache}  # an empty cache: the first pre-flight of this bundle
            rows.append(("first", *measure(cmd, env)))
            rows.append(("second", *measure(cmd, env)))
            rows.append(("no-preflight", *measure([*cmd, "--no-preflight"], env)))
    print("| sweep --dry-run (example, 2 points) | median s | median peak MB |")
    print("|---|---|---|")
    found = {}
    for kind in ("first", "second", "no-preflight"):
        walls = [w for k, w, _ in rows if k == kind]
        mbs = [m for k, _, m in rows if k == kind]
        found[kind] = (statistics.median(walls), statistics.median(mbs))
        print(f"| {kind} | {found[kind][0]:.2f} | {found[kind][1]:.0f} |")
    second_ok = found["second"][0] <= GOAL_SECOND_S and found["second"][1] <= GOAL_MB
    first_ok = found["first"][1] <= GOAL_MB
    print(f"goal, second time <= {GOAL_SECOND_S:g} s and {GOAL_MB:g} MB: {'met' if second_ok else 'NOT met'}")
    print(f"goal, first time <= {GOAL_MB:g} MB: {'met' if first_ok else 'NOT met'} (the first pre-flight reads the "
          "targets from source, torch and MONAI not imported, and builds MONAI's name index once; a target the "
          "source cannot decide is imported, which costs ~540 MB)")
    nopf = "`--no-preflight`"
    write_result("login_node", [
        Figure("`sweep --dry-run`, first (empty cache): wall", round(found["first"][0], 2), "s", nopf,
               round(found["no-preflight"][0], 2)),
        Figure("`sweep --dry-run`, first (empty cache): peak RSS", round(found["first"][1]), "MB", nopf,
               round(found["no-preflight"][1]), f"<= {GOAL_MB:g} MB", first_ok),
        Figure("`sweep --dry-run`, second (verdicts cached): wall", round(found["second"][0], 2), "s", nopf,
               round(found["no-preflight"][0], 2), f"<= {GOAL_SECOND_S:g} s",
               found["second"][0] <= GOAL_SECOND_S),
        Figure("`sweep --dry-run`, second (verdicts cached): peak RSS", round(found["second"][1]), "MB", nopf,
               round(found["no-preflight"][1]), f"<= {GOAL_MB:g} MB", found["second"][1] <= GOAL_MB),
    ], measured_paths=["hpc_runner/config", "hpc_runner/sweep", "hpc_runner/cli", "bench/login_node.py"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
