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

    def epoch(prefetch: bool) -> float:
        loader = ThreadDataLoader(data, batch_size=bs, num_workers=2, use_thread_workers=True, seed=0,
                                  buffer_size=2)
        source = DevicePrefetcher(loader, device) if prefetch else loader
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        count = 0
        for batch in source:
            step(batch)
            count += 1
        torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / count

    epoch(False)  # warm-up: cuDNN autotune, allocator, pinned pool
    epoch(True)
    res: dict[str, list[float]] = {"plain": [], "prefetch": []}
    with Contention() as busy:
        for _ in range(rounds):
            res["plain"].append(epoch(False))
            res["prefetch"].append(epoch(True))
    plain, pref = statistics.median(res["plain"]), statistics.median(res["prefetch"])
    print(f"# device prefetch on {torch.cuda.get_device_name(device)}: batch {bs}x1x{size}^3 + label, "
          f"{n} batches, {rounds} round(s), median")
    print(f"device_prefetch: plain {plain * 1e3:.1f} ms/step  prefetch {pref * 1e3:.1f} ms/step  "
          f"speedup={plain / pref:.3f}x")
    print(busy.line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
