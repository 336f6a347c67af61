"""Step time with and without device prefetch, when the loop waits for data and when it is compute-bound.

On CUDA each batch is 8 x 1 x 128^3 float32 (64 MiB) plus a label of the same size, made on the CPU
by a ThreadDataLoader; the step is a small 3D conv forward/backward on the GPU. Without prefetch the
step copies its batch (pageable memory, as a plain loop does). With ``DevicePrefetcher`` the copy
runs on a side stream; ``pin_memory="auto"`` (the default) pins only once the loop is seen to be
compute-bound, ``pin_memory=True`` (the old default, for comparison) pins every batch on the
producer thread. Two regimes: one step per batch (the loop waits for data) and enough steps per
batch that computing takes 1.5x what loading takes (compute-bound). Issue 36 asks for >= 1.0x and
>= 1.3x. About a minute on an H100; no round starts after ``--budget-s`` seconds of measuring.

Without CUDA the same loop runs on the CPU with small batches (a few seconds): there the prefetcher
is a passthrough, and the ratios (1.0x within noise) only show that it costs nothing.

    .venv/bin/python bench/device_prefetch.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench._common import Contention
from bench.results import Figure, write_result
from hpc_runner.data import DevicePrefetcher, ThreadDataLoader

MODES = {"plain": None, "prefetch": "auto", "pin_always": True}  # mode -> DevicePrefetcher's pin_memory


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: list[str] | None = None) -> int:
    """Run both regimes with and without prefetch and print one ratio line per regime."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--batches", type=int, default=None, help="batches per epoch (default 16, quick 6)")
    ap.add_argument("--rounds", type=int, default=None, help="epochs per mode and regime (default 3, quick 1)")
    ap.add_argument("--budget-s", type=float, default=60.0,
                    help="start no round after this many seconds of measuring (at least one round runs)")
    args = ap.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    n = args.batches or (6 if args.quick else 16 if cuda else 8)
    rounds = args.rounds or (1 if args.quick else 3)
    bs, size = (8, 128) if cuda else (2, 16)  # on the CPU only the passthrough's cost is measured: keep it small
    if not cuda:
        torch.set_num_threads(1)  # the step's threads would fight the loader's on a small machine
    modes = MODES if cuda else {"plain": None, "prefetch": "auto"}
    base = [torch.randn(1, size, size, size) for _ in range(4)]
    data = [{"image": base[i % 4], "label": (base[(i + 1) % 4] > 0).float()} for i in range(n * bs)]

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv3d(8, 1, 3, padding=1)
    ).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def step(batch: dict[str, torch.Tensor]) -> None:
        x = batch["image"].to(device, non_blocking=True)  # a no-op for a batch the prefetcher moved
        y = batch["label"].to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()

    def loader() -> ThreadDataLoader:
        return ThreadDataLoader(data, batch_size=bs, num_workers=2, use_thread_workers=True, seed=0, buffer_size=2)

    def epoch(mode: str, repeats: int = 1) -> tuple[float, str]:
        """Seconds per batch after the first (the loader's start is the same in every mode), and the pinning chosen."""
        source = loader() if modes[mode] is None else DevicePrefetcher(loader(), device, pin_memory=modes[mode])
        _sync(device)
        start, count = 0.0, 0
        for batch in source:
            for _ in range(repeats):  # a heavier step: the loop becomes compute-bound
                step(batch)
            if count == 0:
                _sync(device)
                start = time.perf_counter()
            count += 1
        _sync(device)
        count -= 1
        choice = getattr(source, "pin_choice", None)
        return (time.perf_counter() - start) / count, choice.line() if choice is not None else ""

    def loader_alone(pin: bool) -> float:
        """Seconds per batch of the loader with no step: the floor of a data-bound loop (pinned: one more copy)."""
        start, count = time.perf_counter(), 0
        for _ in loader().iter_from(None, pin_memory=pin):
            count += 1
        return (time.perf_counter() - start) / count

    for mode in modes:  # warm-up: cuDNN autotune, the allocators, the pinned pool
        epoch(mode)
    resident = {k: v.to(device) for k, v in next(iter(ThreadDataLoader(data, batch_size=bs))).items()}
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(5):
        step(resident)
    _sync(device)
    step_s = (time.perf_counter() - t0) / 5
    alone, pinned = loader_alone(False), loader_alone(cuda)
    # enough steps per batch that computing takes 1.5x what loading (pinned, the slower) takes
    heavy = min(256, max(2, math.ceil(1.5 * max(alone, pinned) / step_s)))
    regimes = {"waits for data": 1, "compute-bound": heavy}
    times: dict[tuple[str, str], list[float]] = {}
    choices: dict[tuple[str, str], str] = {}
    done, stop_at = 0, time.perf_counter() + args.budget_s
    with Contention() as busy:
        for r in range(rounds):
            if r and time.perf_counter() > stop_at:
                break
            done += 1
            for regime, repeats in regimes.items():
                for mode in list(modes)[:: 1 if r % 2 == 0 else -1]:  # alternate the order: no mode always runs first
                    seconds, choices[regime, mode] = epoch(mode, repeats)
                    times.setdefault((regime, mode), []).append(seconds)
    where = torch.cuda.get_device_name(device) if cuda else "cpu (no CUDA: the prefetcher is a passthrough)"
    print(f"# device prefetch on {where}: batch {bs}x1x{size}^3 + label, {n} batches, {done} of {rounds} round(s), "
          "median")

    def median(regime: str, mode: str) -> float:
        return statistics.median(times[regime, mode])

    for regime, repeats in regimes.items():
        plain = median(regime, "plain")
        parts = [f"plain {plain * 1e3:.1f} ms/batch"]
        for mode in modes:
            if mode != "plain":
                t = median(regime, mode)
                parts.append(f"{mode} {t * 1e3:.1f} ms/batch speedup={plain / t:.3f}x")
        print(f"device_prefetch {regime} ({repeats} step(s) per batch): " + "  ".join(parts))
        if choices.get((regime, "prefetch")):
            print(f"#   {regime}: auto pinning: {choices[regime, 'prefetch']}")
    if not cuda:
        ours, theirs = iter(DevicePrefetcher(loader(), device)), iter(loader())
        print(f"# on the CPU iter(DevicePrefetcher) is the loader's own iterator: {type(ours) is type(theirs)}")
        ours.close()  # no producer thread left running at exit
        theirs.close()
    pinning = f", pinning on its thread {pinned * 1e3:.1f} ms/batch" if cuda else ""
    print(f"# one step on a resident batch {step_s * 1e3:.1f} ms; the loader alone {alone * 1e3:.1f} ms/batch{pinning}")
    print(busy.line())
    if cuda:  # on the CPU the prefetcher is a passthrough: nothing to record
        goals = {"waits for data": 1.0, "compute-bound": 1.3}
        write_result("device_prefetch", [
            Figure(f"{regime} ({repeats} step(s) per batch), prefetch (auto pinning)",
                   round(median(regime, "prefetch") * 1e3, 1), "ms/batch", "no prefetch",
                   round(median(regime, "plain") * 1e3, 1), f">= {goals[regime]:g}x faster",
                   median(regime, "plain") / median(regime, "prefetch") >= goals[regime], ratio_of="anchor/value")
            for regime, repeats in regimes.items()
        ], measured_paths=["hpc_runner/data/prefetch.py", "hpc_runner/data/pin_choice.py", "bench/device_prefetch.py"],
            quick=args.quick)
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # the loaders' producer and worker threads (daemons) may still be inside torch when the interpreter tears down,
    # which aborts it ("terminate called without an active exception", exit 134, about one run in two here): the
    # figures are printed, so leave without the teardown
    os._exit(code)
