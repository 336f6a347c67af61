"""Result writing during inference: ResultWriter (background, uint8, gzip 1) vs MONAI's SaveImaged in the loop.

Both sides run the same loader, the same UNet (train.yaml's, seeded random weights) over the same synthetic
volumes on CPU, in the same process; the sides alternate and the median of the repeats is reported.
  peer: Activationsd(softmax) -> AsDiscreted(argmax) -> SaveImaged as the zoo's spleen inference.json has it
        (output_dtype float32, output_postfix "trans", separate_folder, resample False), in the loop;
  ours: the same softmax + argmax on the tensor, then ResultWriter.submit (uint8, compress_level 1) while the
        next volume is inferred; close() is inside the timed run.
A second ratio runs the peer with output_dtype uint8, to show what the overlap alone gives; "bare" runs the
same loop writing nothing, the ceiling of any writer.

    .venv/bin/python bench/result_writing.py [--quick] [--volumes N] [--size S] [--repeats R]
    .venv/bin/python bench/result_writing.py --levels      # size and time of each gzip level
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from bench._common import Contention
from bench.results import Figure, write_result
from hpc_runner.inference.nifti import encode_nifti, read_nifti
from hpc_runner.inference.writer import ResultWriter
from hpc_runner.resources.threads import use_cpu_budget

NETWORK = {"spatial_dims": 3, "in_channels": 1, "out_channels": 2, "channels": [8, 16, 32, 64],
           "strides": [2, 2, 2], "num_res_units": 2}  # bundles/synthetic_seg/configs/train.yaml network_def


def make_loader(datalist: list[dict[str, str]]) -> Any:
    """The loader both sides share: load, channel first, scale intensity (the bundle's preprocessing)."""
    from monai.data import DataLoader, Dataset
    from monai.transforms import Compose, EnsureChannelFirstd, EnsureTyped, LoadImaged, ScaleIntensityd

    pre = Compose([LoadImaged(keys="image", image_only=True), EnsureChannelFirstd(keys="image"),
                   ScaleIntensityd(keys="image"), EnsureTyped(keys="image")])
    return DataLoader(Dataset(datalist, transform=pre), batch_size=1, num_workers=0)


def run_peer(net: torch.nn.Module, datalist: list[dict[str, str]], out: Path, dtype: Any) -> float:
    """MONAI's chain in the loop; return seconds for all volumes."""
    from monai.data import decollate_batch
    from monai.transforms import Activationsd, AsDiscreted, Compose, SaveImaged

    post = Compose([
        Activationsd(keys="pred", softmax=True),
        AsDiscreted(keys="pred", argmax=True),
        SaveImaged(keys="pred", output_dir=str(out), output_postfix="trans", output_ext=".nii.gz",
                   output_dtype=dtype, resample=False, separate_folder=True, print_log=False),
    ])
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in make_loader(datalist):
            batch["pred"] = net(batch["image"])
            for item in decollate_batch(batch):
                post(item)
    return time.perf_counter() - start


def run_bare(net: torch.nn.Module, datalist: list[dict[str, str]]) -> float:
    """The same loop writing nothing: the ceiling any writer can reach; return seconds."""
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in make_loader(datalist):
            torch.softmax(net(batch["image"]), dim=1).argmax(dim=1).to(torch.uint8)
    return time.perf_counter() - start


def run_ours(net: torch.nn.Module, datalist: list[dict[str, str]], out: Path, stats: dict[str, float]) -> float:
    """Softmax + argmax on the tensor, ResultWriter in the background; return seconds including close()."""
    start = time.perf_counter()
    with torch.inference_mode(), ResultWriter(out, compress_level=1) as writer:
        for batch in make_loader(datalist):
            labels = torch.softmax(net(batch["image"]), dim=1).argmax(dim=1).to(torch.uint8)
            for b in range(labels.shape[0]):
                path = Path(batch["image"].meta["filename_or_obj"][b])
                case = path.name.removesuffix(".gz").removesuffix(".nii")
                affine = np.asarray(batch["image"].affine[b], dtype=np.float64)
                writer.submit(case, f"{case}.nii.gz", labels[b].numpy(), affine)
    stats.update(busy_s=writer.busy_s, wait_s=writer.wait_s, written=writer.written)
    return time.perf_counter() - start


def voxel_equal(datalist: list[dict[str, str]], ours: Path, peer: Path) -> bool:
    """Whether every case's label map is the same in both output folders."""
    for item in datalist:
        case = Path(item["image"]).name.removesuffix(".nii.gz")
        a, _ = read_nifti(ours / f"{case}.nii.gz")
        b, _ = read_nifti(peer / case / f"{case}_trans.nii.gz")
        if a.shape != b.shape or not np.array_equal(a.astype(np.float64), b.astype(np.float64)):
            return False
    return True


def compare(args: argparse.Namespace, work: Path) -> int:
    """Time both sides (and the uint8 peer), alternating; print rates, ratios and the voxel check."""
    from monai.networks.nets import UNet

    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    datalist = ensure_synthetic_volumes(work / "data", num_train=args.volumes, num_val=0, size=args.size)
    datalist = [{"image": d["image"]} for d in datalist]
    torch.manual_seed(0)
    net = UNet(**NETWORK).eval()
    stats: dict[str, float] = {}
    sides: dict[str, Callable[[Path], float]] = {
        "bare": lambda out: run_bare(net, datalist),
        "ours": lambda out: run_ours(net, datalist, out, stats),
        "peer": lambda out: run_peer(net, datalist, out, np.float32),
        "peer_uint8": lambda out: run_peer(net, datalist, out, np.uint8),
    }
    times: dict[str, list[float]] = {k: [] for k in sides}
    run_peer(net, datalist[:2], work / "warmup", np.float32)  # first-call costs out of the timed runs
    for r in range(args.repeats):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in order:
            out = work / f"{name}-{r}"
            times[name].append(sides[name](out))
            if r < args.repeats - 1 and out.exists():
                shutil.rmtree(out)
    n = len(datalist)
    rate = {k: n / statistics.median(v) for k, v in times.items()}
    last = args.repeats - 1
    equal = voxel_equal(datalist, work / f"ours-{last}", work / f"peer-{last}")
    for name in sides:
        print(f"result_writing {name}: {rate[name]:.3f} volumes/s (median of {args.repeats}, "
              f"{n} volumes of {args.size}^3)")
    print(f"result_writing ratio ours/peer(float32)={rate['ours'] / rate['peer']:.3f}")
    print(f"result_writing ratio ours/peer(uint8)={rate['ours'] / rate['peer_uint8']:.3f}  (the overlap alone)")
    print(f"result_writing ceiling bare/peer(float32)={rate['bare'] / rate['peer']:.3f}  (no writing at all)")
    print(f"# ours: writer busy {stats['busy_s'] / stats['written'] * 1e3:.1f} ms/volume in its thread, "
          f"loop waited {stats['wait_s']:.2f} s for it (last run)")
    print(f"voxel-equal: {'yes' if equal else 'no'}")
    ratio = rate["ours"] / rate["peer"]
    write_result("result_writing", [
        Figure(f"inference over {n} volumes of {args.size}³, our background writer (uint8)", round(rate["ours"], 3),
               "volumes/s", "MONAI `SaveImaged` (float32) in the loop", round(rate["peer"], 3),
               ">= 1.3x, voxel-equal", ratio >= 1.3 and equal, note=f"voxel-equal: {'yes' if equal else 'no'}"),
        Figure("the same, no writing at all (the ceiling)", round(rate["bare"], 3), "volumes/s",
               "MONAI `SaveImaged` (float32) in the loop", round(rate["peer"], 3)),
    ], measured_paths=["hpc_runner/inference/writer.py", "hpc_runner/inference/nifti.py", "bench/result_writing.py"],
        quick=args.quick)
    return 0 if equal else 1


def realistic_outputs(size: int) -> dict[str, np.ndarray]:
    """A uint8 label map with a few spheres and a float32 probability map around them."""
    from monai.data import create_test_image_3d

    _, seg = create_test_image_3d(size, size, size, num_objs=5, rad_max=max(4, size // 5), rad_min=max(2, size // 16),
                                  num_seg_classes=1, random_state=np.random.RandomState(0))
    mask = torch.from_numpy(seg.astype(np.float32))[None, None]
    for _ in range(3):  # soft edges, as a network's softmax has them
        mask = torch.nn.functional.avg_pool3d(mask, 5, stride=1, padding=2)
    noise = torch.from_numpy(np.random.default_rng(0).normal(0, 0.5, mask.shape).astype(np.float32))
    prob = torch.sigmoid(12 * (mask - 0.5) + noise)[0, 0].numpy()
    return {"uint8 label map": seg.astype(np.uint8), "float32 probability map": prob.astype(np.float32)}


def levels(args: argparse.Namespace) -> int:
    """Print size and encode time of each gzip level for realistic outputs."""
    outputs = realistic_outputs(args.size)
    affine = np.eye(4)
    print(f"# encode_nifti per gzip level, {args.size}^3, median of {args.repeats}")
    print("| output | level | size (KiB) | ratio to raw | encode (ms) |")
    print("|---|---:|---:|---:|---:|")
    figures = []
    for name, array in outputs.items():
        raw = len(encode_nifti(array, affine, 0))
        for level in (0, 1, 3, 6, 9):
            spans = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                data = encode_nifti(array, affine, level)
                spans.append(time.perf_counter() - t)
            print(f"| {name} | {level} | {len(data) / 1024:.0f} | {len(data) / raw:.3f} | "
                  f"{statistics.median(spans) * 1e3:.1f} |")
            figures.append(Figure(f"{name}, {args.size}³, gzip level {level}: size", round(len(data) / 1024), "KiB",
                                  "raw (level 0)", round(raw / 1024)))
            figures.append(Figure(f"{name}, gzip level {level}: encode", round(statistics.median(spans) * 1e3, 1),
                                  "ms"))
    write_result("result_writing_levels", figures,
                 measured_paths=["hpc_runner/inference/nifti.py", "bench/result_writing.py"])
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the comparison (or --levels) and print its lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (4 volumes of 32^3, 1 repeat)")
    ap.add_argument("--levels", action="store_true", help="size and time per gzip level instead")
    ap.add_argument("--volumes", type=int, default=None)
    ap.add_argument("--size", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args(argv)
    args.volumes = args.volumes or (4 if args.quick else 32)
    args.size = args.size or (32 if args.quick else 96)
    args.repeats = args.repeats or (1 if args.quick else 5)
    cpus = use_cpu_budget()
    print(f"# {' '.join(['python', *sys.argv])}")
    print(f"# torch threads {cpus.get('torch_threads')}, CPU budget {cpus.get('count')} ({cpus.get('source')})")
    with Contention() as busy:
        if args.levels:
            code = levels(args)
        else:
            with tempfile.TemporaryDirectory(prefix="hpcr-bench-writing-") as tmp:
                code = compare(args, Path(tmp))
    print(busy.line())
    return code


if __name__ == "__main__":
    raise SystemExit(main())
