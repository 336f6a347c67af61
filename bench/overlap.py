"""Overlap efficiency of a producer thread with GIL-free load and step (time.sleep): ours vs MONAI.

Efficiency = ideal / measured, ideal = first load + n x max(load, step), with load and step the
measured mean durations of time.sleep in the same run (it overshoots by ~80 us). Runs alternate
between the two implementations; the median of the rounds is reported.

    .venv/bin/python bench/overlap.py [--quick] [--buffer-size N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monai.data.thread_buffer import ThreadBuffer as MonaiThreadBuffer

from bench._common import Contention
from bench.results import Figure, write_result
from hpc_runner.data import ThreadBuffer

CASES = [(50.0, 35.0, 40), (5.0, 5.0, 300), (1.0, 1.0, 1500)]


def one_run(make: Callable[[Iterable[Any]], Iterable[Any]], load_ms: float, step_ms: float, n: int) -> dict:
    """Time one epoch of n items; return efficiency and the time lost per item."""
    loads: list[float] = []
    steps: list[float] = []
    load_s, step_s = load_ms / 1e3, step_ms / 1e3
    clock = time.perf_counter

    def source() -> Iterator[int]:
        for i in range(n):
            t = clock()
            time.sleep(load_s)
            loads.append(clock() - t)
            yield i

    start = clock()
    for _ in make(source()):
        t = clock()
        time.sleep(step_s)
        steps.append(clock() - t)
    total = clock() - start
    mean_load, mean_step = statistics.fmean(loads), statistics.fmean(steps)
    ideal = loads[0] + n * max(mean_load, mean_step)
    return {"eff": ideal / total, "lost_us": (total - ideal) / n * 1e6, "n": len(steps)}


def main(argv: list[str] | None = None) -> int:
    """Run the overlap benchmark and print one ratio line per case."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--buffer-size", type=int, default=1, help="buffer_size for both implementations")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    impls: dict[str, Callable[[Iterable[Any]], Iterable[Any]]] = {
        "ours": lambda src: ThreadBuffer(src, buffer_size=args.buffer_size),
        "monai": lambda src: MonaiThreadBuffer(src, buffer_size=args.buffer_size, timeout=0.01),
    }
    print(f"# overlap efficiency, buffer_size={args.buffer_size}, {rounds} round(s), median")
    with Contention() as busy:
        found = run_cases(impls, rounds, args.quick)
    print(busy.line())
    goals = {(50.0, 35.0): 0.999, (5.0, 5.0): 0.997, (1.0, 1.0): 0.99}  # efficiency; and <= 10 us lost per item
    figures = []
    for (load_ms, step_ms), (eff, lost) in found.items():
        case = f"load/step {load_ms:g}/{step_ms:g} ms"
        figures.append(Figure(f"overlap efficiency, {case}", round(eff["ours"], 4), "", "MONAI ThreadBuffer",
                              round(eff["monai"], 4), f">= {goals[load_ms, step_ms]:g}",
                              eff["ours"] >= goals[load_ms, step_ms]))
        if load_ms == step_ms:  # where neither side waits for the other, all that is lost is the handing over
            figures.append(Figure(f"time lost per item, {case}", round(lost["ours"], 1), "µs", "MONAI ThreadBuffer",
                                  round(lost["monai"], 1), "<= 10 µs", lost["ours"] <= 10))
    write_result("overlap", figures, measured_paths=["hpc_runner/data/buffer.py", "bench/overlap.py"],
                 quick=args.quick)
    return 0


def run_cases(impls: dict[str, Callable[[Iterable[Any]], Iterable[Any]]], rounds: int,
              quick: bool) -> dict[tuple[float, float], tuple[dict[str, float], dict[str, float]]]:
    """Run every case for every implementation and print its line; return each case's medians (eff, us lost)."""
    found = {}
    for load_ms, step_ms, n in CASES:
        if quick:
            n = max(10, n // 10)
        res: dict[str, list[dict]] = {k: [] for k in impls}
        for _ in range(rounds):
            for name, make in impls.items():
                r = one_run(make, load_ms, step_ms, n)
                if r["n"] != n:
                    raise SystemExit(f"{name}: got {r['n']} of {n} items")
                res[name].append(r)
        eff = {k: statistics.median(r["eff"] for r in v) for k, v in res.items()}
        lost = {k: statistics.median(r["lost_us"] for r in v) for k, v in res.items()}
        print(
            f"overlap load={load_ms:g}ms step={step_ms:g}ms n={n}: "
            f"ours eff={eff['ours']:.4f} ({lost['ours']:+.1f} us/item)  "
            f"monai eff={eff['monai']:.4f} ({lost['monai']:+.1f} us/item)  "
            f"ratio ours/monai={eff['ours'] / eff['monai']:.4f}"
        )
        found[load_ms, step_ms] = (eff, lost)
    return found


if __name__ == "__main__":
    raise SystemExit(main())
