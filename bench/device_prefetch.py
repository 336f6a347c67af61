"""Step time with and without device prefetch on a transfer-heavy batch (CUDA only).

Each batch is 8 x 1 x 128^3 float32 (64 MiB) plus a label of the same size, made on the CPU by a
ThreadDataLoader; the step is a small 3D conv forward/backward on the GPU. Without prefetch the
step copies its batch (pageable memory, as a plain loop does); with ``DevicePrefetcher`` the batch
is pinned on the producer thread and copied on a side stream while the previous step runs.

    .venv/bin/python bench/device_prefetch.py [--quick]

Without CUDA it prints "needs CUDA" and exits 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench._common import Contention
from hpc_runner.data import DevicePrefetcher, ThreadDataLoader


def main(argv: list[str] | None = None) -> int:
    """Run the prefetch benchmark and print the ratio line (or 'needs CUDA')."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run")
    ap.add_argument("--batches", type=int, default=None, help="batches per epoch (default 24, quick 6)")
    ap.add_argument("--rounds", type=int, default=None, help="epochs per mode (default 3, quick 1)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("device_prefetch: needs CUDA (none here); skipped")
        return 0
    n = args.batches or (6 if args.quick else 24)
    rounds = args.rounds or (1 if args.quick else 3)
    device = torch.device("cuda", torch.cuda.current_device())
    bs, size = 8, 128
    base = [torch.randn(1, size, size, size) for _ in range(4)]
    data = [{"image": base[i % 4], "label": (base[(i + 1) % 4] > 0).float()} for i in range(n * bs)]

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv3d(8, 1, 3, padding=1)
    ).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def step(batch: dict[str, torch.Tensor]) -> None:
        x = batch["image"].to(device, non_blocking=True)
        y = batch["label"].to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()
        opt.step()

    def epoch(prefetch: bool, repeats: int = 1) -> float:
        loader = ThreadDataLoader(data, batch_size=bs, num_workers=2, use_thread_workers=True, seed=0,
                                  buffer_size=2)
        source = DevicePrefetcher(loader, device) if prefetch else loader
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        count = 0
        for batch in source:
            for _ in range(repeats):  # a heavier step: the loop becomes compute-bound
                step(batch)
            count += 1
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / count

    def loader_alone(pin: bool) -> float:
        """ms per batch of the loader with no step: the floor of a data-bound loop (pinned: one more copy)."""
        loader = ThreadDataLoader(data, batch_size=bs, num_workers=2, use_thread_workers=True, seed=0,
                                  buffer_size=2)
        start, count = time.perf_counter(), 0
        for _ in (loader.iter_from(None, pin_memory=True) if pin else loader):
            count += 1
        return (time.perf_counter() - start) / count

    epoch(False)  # warm-up: cuDNN autotune, allocator, pinned pool
    epoch(True)
    resident = {k: v.to(device) for k, v in next(iter(ThreadDataLoader(data, batch_size=bs))).items()}
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(5):
        step(resident)
    torch.cuda.synchronize(device)
    step_s = (time.perf_counter() - t0) / 5
    alone, pinned = loader_alone(False), loader_alone(True)
    # enough steps per batch that computing takes 1.5x what loading takes: the case prefetch is for
    heavy = min(64, max(2, math.ceil(1.5 * pinned / step_s)))
    res: dict[str, list[float]] = {"plain": [], "prefetch": []}
    with Contention() as busy:
        for _ in range(rounds):
            res["plain"].append(epoch(False))
            res["prefetch"].append(epoch(True))
            res.setdefault("plain_x4", []).append(epoch(False, heavy))
            res.setdefault("prefetch_x4", []).append(epoch(True, heavy))
    plain, pref = statistics.median(res["plain"]), statistics.median(res["prefetch"])
    plain4, pref4 = statistics.median(res["plain_x4"]), statistics.median(res["prefetch_x4"])
    print(f"# device prefetch on {torch.cuda.get_device_name(device)}: batch {bs}x1x{size}^3 + label, "
          f"{n} batches, {rounds} round(s), median")
    print(f"device_prefetch: plain {plain * 1e3:.1f} ms/step  prefetch {pref * 1e3:.1f} ms/step  "
          f"speedup={plain / pref:.3f}x")
    print(f"device_prefetch (step x{heavy}, compute-bound): plain {plain4 * 1e3:.1f} ms/batch  prefetch "
          f"{pref4 * 1e3:.1f} ms/batch  speedup={plain4 / pref4:.3f}x")
    print(f"# one step on a resident batch {step_s * 1e3:.1f} ms; the loader alone {alone * 1e3:.1f} ms/batch, "
          f"pinning on its thread {pinned * 1e3:.1f} ms/batch: a loop slower than the loader is compute-bound, "
          "where prefetch can overlap the copy")
    print(busy.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
