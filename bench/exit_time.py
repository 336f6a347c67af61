"""Process end: seconds from a run's last output line to its exit, ours against MONAI's runner.

Both run the same one-line bundle (``run: ["$print(...)"]``) as fresh processes, so both import torch
and MONAI; what differs is the end, where CPython's shutdown collects the heap (hpc-runner freezes it
at exit: hpc_runner/quick_exit.py). Every command and every SLURM job pays this once.
A third case, ours with CPython's collector thresholds while torch and MONAI are imported (the peer of
hpc_runner/heap.py's 20,000/20/20), gives the collector's share of the start; a fourth, ours importing MLflow, pyplot
and Optuna with MONAI (none deferred: the peer of hpc_runner/optional_modules.py), gives the deferred packages' share.
Usage: python bench/exit_time.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._common import Contention
from bench.results import Figure, write_result


def timed_run(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """Run ``cmd``; return (wall seconds, seconds from its last output line to its exit)."""
    t0 = time.perf_counter()
    last = t0
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        lines = []
        for line in proc.stdout:
            last = time.perf_counter()
            lines.append(line)
        code = proc.wait()
    end = time.perf_counter()
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{''.join(lines)[-2000:]}")
    return end - t0, end - last


def ours_with(setup: str) -> str:
    """`python -m hpc_runner` (for ``python -c``) with one part of its start changed by ``setup``, a line of Python
    run first, before the entry point reads what it changes."""
    return "\n".join(["import runpy, sys", setup, "sys.argv[0] = 'hpc_runner'",
                      "runpy.run_module('hpc_runner', run_name='__main__', alter_sys=True)"])


# CPython's thresholds while importing: heap.py's start-up ones set to them (the freeze once the config is parsed is
# kept, as in ours)
CPYTHON_THRESHOLDS = ours_with("import gc, hpc_runner.heap as heap; heap.IMPORT_THRESHOLDS = gc.get_threshold()")
# nothing deferred: optional_modules.py's list emptied
NOTHING_DEFERRED = ours_with("import hpc_runner.optional_modules as om; om.DEFERRED = ()")


def write_bundle(root: Path) -> Path:
    """A bundle whose run prints one line: all that is left to time is start-up and exit."""
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.json").write_text(json.dumps({"run": ["$print('done', flush=True)"]}))
    return root / "configs" / "train.json"


def main() -> int:
    """Time both runners, alternating, and print medians and the ratio."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="one run of each: a smoke test, not a measurement")
    args = ap.parse_args()
    n = 1 if args.quick else args.repeats
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        config = write_bundle(Path(tmp) / "one_line")
        cases = {
            "monai": [py, "-m", "monai.bundle", "run", "--config_file", str(config)],
            "ours": [py, "-m", "hpc_runner", "run", "--config_file", str(config), "--output_dir", "runs/x"],
            "cpython_thresholds": [py, "-c", CPYTHON_THRESHOLDS, "run", "--config_file", str(config),
                                   "--output_dir", "runs/x"],
            "nothing_deferred": [py, "-c", NOTHING_DEFERRED, "run", "--config_file", str(config),
                                 "--output_dir", "runs/x"],
        }
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in cases}
        with Contention() as contention:
            for _ in range(n):
                for name, cmd in cases.items():  # alternate, so drift on a shared machine hits both
                    times[name].append(timed_run(cmd, Path(tmp)))
                    if name != "monai":
                        subprocess.run(["rm", "-rf", str(Path(tmp) / "runs")], check=True)
    print(f"process end, median of {n} fresh processes (python {sys.version.split()[0]})")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(e for _, e in v)) for k, v in times.items()}
    for name, (wall, end) in med.items():
        print(f"exit {name:18s}: wall {wall:5.2f} s, last line to exit {end:5.2f} s")
    print(contention.line())
    print(f"exit ratio ours/monai: last line to exit {med['ours'][1] / med['monai'][1]:.2f}, "
          f"wall {med['ours'][0] / med['monai'][0]:.2f}")
    print(f"start ratio ours/CPython's thresholds: wall {med['ours'][0] / med['cpython_thresholds'][0]:.2f}")
    print(f"start ratio ours/nothing deferred: wall {med['ours'][0] / med['nothing_deferred'][0]:.2f}")
    write_result("exit_time", [
        Figure("a one-line bundle's run: last output line to exit", round(med["ours"][1], 2), "s",
               "`python -m monai.bundle run`", round(med["monai"][1], 2)),
        Figure("the same: wall, imports included", round(med["ours"][0], 2), "s", "`python -m monai.bundle run`",
               round(med["monai"][0], 2)),
        Figure("the same: wall, against our start with CPython's collector thresholds", round(med["ours"][0], 2),
               "s", "ours, thresholds 700/10/10 while importing", round(med["cpython_thresholds"][0], 2)),
        Figure("the same: wall, against our start importing MLflow, pyplot and Optuna with MONAI",
               round(med["ours"][0], 2), "s", "ours, nothing deferred", round(med["nothing_deferred"][0], 2)),
    ], measured_paths=["hpc_runner/quick_exit.py", "hpc_runner/heap.py", "hpc_runner/optional_modules.py",
                       "hpc_runner/process_start.py",
                       "hpc_runner/engine", "hpc_runner/cli",
                       "bench/exit_time.py"],
        quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
