"""Data on the node: time to first batch and epoch time, reading from a slowed shared folder vs staged vs local.

The dataset is the seed's kind (create_test_image_3d: image and label .nii.gz). "shared" reads it through
scripts/slow_share.py (a FUSE view that adds latency to every read and shares a bandwidth cap, and counts the
bytes); "staged" first copies it from there to node-local disk with hpc_runner.data.staging (the copy counts
towards its first batch) and reads the copy; "local" reads data that was on local disk to begin with. Each
epoch loads every item with the bundle's preprocessing (LoadImaged, EnsureChannelFirstd, ScaleIntensityd) on
2 threads, no cache, as a run whose dataset does not fit in memory reads every epoch.

    .venv/bin/python bench/staging.py                # 24 volumes of 64^3, ~1-2 min on 2 cores
    .venv/bin/python bench/staging.py --full         # the seed's 100 volumes of 128^3
    .venv/bin/python bench/staging.py --quick        # a smoke run: nothing written
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import slow_share

from bench.results import Figure, write_result


def load_epoch(folder: Path, n: int, threads: int, batch: int = 2) -> tuple[float, float]:
    """Load every item of ``folder`` once; return (seconds to the first batch, seconds for the epoch)."""
    from monai.transforms import Compose, EnsureChannelFirstd, LoadImaged, ScaleIntensityd

    chain = Compose([LoadImaged(keys=["image", "label"], image_only=True), EnsureChannelFirstd(keys=["image", "label"]),
                     ScaleIntensityd(keys="image")])
    items = [{"image": str(folder / f"img{i:03d}.nii.gz"), "label": str(folder / f"seg{i:03d}.nii.gz")}
             for i in range(n)]
    start = time.perf_counter()
    first = None
    with ThreadPoolExecutor(threads) as pool:
        for k, _ in enumerate(pool.map(chain, items)):
            if k + 1 == batch:
                first = time.perf_counter() - start
    return first or time.perf_counter() - start, time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="the seed's 100 volumes of 128^3")
    p.add_argument("--volumes", type=int, default=24)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--latency-ms", type=float, default=2.0, help="added to every read of the shared folder")
    p.add_argument("--mbps", type=float, default=50.0, help="the shared folder's bandwidth as seen by this node")
    p.add_argument("--threads", type=int, default=2, help="transform threads")
    p.add_argument("--quick", action="store_true", help="smoke run: 4 volumes of 32^3, nothing written")
    args = p.parse_args()
    n, size = (100, 128) if args.full else (4, 32) if args.quick else (args.volumes, args.size)
    from hpc_runner.data.staging import StageSettings, stage_folder
    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    base = Path(tempfile.mkdtemp(prefix="hpcr-bench-staging-"))
    try:
        backing = base / "backing" / "ds"
        ensure_synthetic_volumes(backing, num_train=n, num_val=0, size=size)
        dataset = sum(f.stat().st_size for f in backing.iterdir())
        mnt = base / "share"
        slow_share.start(str(base / "backing"), str(mnt), args.latency_ms, args.mbps, log=str(base / "share.log"))
        try:
            local = [load_epoch(backing, n, args.threads) for _ in range(2)]
            shared = [load_epoch(mnt / "ds", n, args.threads) for _ in range(2)]
            shared_read = slow_share.stats(str(mnt))["read_bytes"]
            t0 = time.perf_counter()
            staged_copy = stage_folder(mnt / "ds", base / "stage", StageSettings(), warn=print)
            copy_s = time.perf_counter() - t0
            staged = [load_epoch(Path(staged_copy.read_from), n, args.threads) for _ in range(2)]
            staged_read = slow_share.stats(str(mnt))["read_bytes"] - shared_read
        finally:
            slow_share.stop(str(mnt))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    staged_first = copy_s + staged[0][0]
    lines = {
        "local": (local[0][0], local[1][1]), "shared": (shared[0][0], shared[1][1]),
        "staged": (staged_first, staged[1][1]),
    }
    print(f"{n} volumes of {size}^3 ({dataset / 1e6:.1f} MB); shared folder: {args.latency_ms:g} ms a read, "
          f"{args.mbps:g} MB/s; {args.threads} transform threads")
    for name, (first, epoch) in lines.items():
        print(f"  {name:7s} first batch {first:7.2f} s   epoch {epoch:7.2f} s")
    print(f"  staging copy {copy_s:.2f} s; bytes read from the shared folder: 2 epochs in place "
          f"{shared_read / 1e6:.1f} MB, staging {staged_read / 1e6:.1f} MB")
    ratio = staged[1][1] / local[1][1]
    what = f"{n} volumes of {size}^3, shared folder {args.latency_ms:g} ms/read and {args.mbps:g} MB/s"
    figures = [
        Figure("time to first batch, shared folder", round(shared[0][0], 3), "s", note=what),
        Figure("time to first batch, staged (copy included)", round(staged_first, 3), "s",
               "shared folder", round(shared[0][0], 3)),
        Figure("time to first batch, local to begin with", round(local[0][0], 3), "s"),
        Figure("epoch, shared folder", round(shared[1][1], 3), "s", "local", round(local[1][1], 3)),
        Figure("epoch, staged", round(staged[1][1], 3), "s", "local", round(local[1][1], 3),
               goal="within 1.1x of local", goal_met=ratio <= 1.1),
        Figure("bytes read from the shared folder per epoch, in place", round(shared_read / 2 / 1e6, 2), "MB"),
        Figure("bytes read from the shared folder to stage (once per node)", round(staged_read / 1e6, 2), "MB",
               "dataset", round(dataset / 1e6, 2)),
    ]
    write_result("staging", figures, measured_paths=["hpc_runner/data/staging.py", "bench/staging.py",
                                                     "scripts/slow_share.py"], quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
