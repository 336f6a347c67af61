"""CLI start-up latency: hpc-runner --help and config vs MONAI's `python -m monai.bundle run -- --help`.

Each command runs as a fresh process, as a user types it; the figure is the median of N runs.
Usage: python bench/cli_latency.py [--repeats N] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.results import Figure, write_result  # noqa: E402

GOAL_HELP_SPEEDUP = 10.0


def time_command(cmd: list[str], repeats: int) -> tuple[float, float]:
    """Return (median, min) wall seconds of ``cmd`` over ``repeats`` fresh processes."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return statistics.median(times), min(times)


def main() -> int:
    """Run the benchmark and print a table with ratios against MONAI."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="3 repeats")
    args = ap.parse_args()
    n = 3 if args.quick else args.repeats
    py = sys.executable
    bundle = "bundles/synthetic_seg"
    cases = [
        ("python -m monai.bundle run -- --help", [py, "-m", "monai.bundle", "run", "--", "--help"]),
        ("python -m hpc_runner --help", [py, "-m", "hpc_runner", "--help"]),
        ("python -m hpc_runner run --help", [py, "-m", "hpc_runner", "run", "--help"]),
        (f"python -m hpc_runner config --bundle {bundle}", [py, "-m", "hpc_runner", "config", "--bundle", bundle]),
    ]
    script = shutil.which("hpc-runner") or str(Path(py).with_name("hpc-runner"))
    if Path(script).exists():
        cases.insert(2, ("hpc-runner --help (console script)", [script, "--help"]))
    results = {}
    for label, cmd in cases:
        results[label] = time_command(cmd, n)
    monai_median = results[cases[0][0]][0]
    print(f"CLI latency, median of {n} fresh processes ({sys.platform}, python {sys.version.split()[0]})")
    print(f"{'command':62s} {'median':>9s} {'min':>9s} {'vs MONAI':>9s}")
    for label, (median, best) in results.items():
        print(f"{label:62s} {median * 1000:7.0f}ms {best * 1000:7.0f}ms {monai_median / median:8.1f}x")
    speedup = monai_median / results["python -m hpc_runner --help"][0]
    verdict = "met" if speedup >= GOAL_HELP_SPEEDUP else "NOT met"
    print(f"goal: --help >= {GOAL_HELP_SPEEDUP:.0f}x faster than MONAI's: {speedup:.1f}x ({verdict})")
    monai_ms = round(monai_median * 1000)
    write_result("cli_latency", [
        Figure("`hpc-runner --help`, median", round(results["python -m hpc_runner --help"][0] * 1000),
               "ms", "`python -m monai.bundle run -- --help`", monai_ms, f">= {GOAL_HELP_SPEEDUP:g}x faster",
               speedup >= GOAL_HELP_SPEEDUP, ratio_of="anchor/value"),
        Figure(f"`hpc-runner config --bundle {bundle}`, median", round(results[cases[-1][0]][0] * 1000), "ms",
               "`python -m monai.bundle run -- --help`", monai_ms, ratio_of="anchor/value"),
    ], measured_paths=["hpc_runner", "pyproject.toml"], quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
