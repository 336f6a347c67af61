"""The GPU paths a CPU machine cannot run: one line per check, on a machine with a CUDA GPU.

    python scripts/gpu_checks.py        # exit 1 if any check failed; "needs CUDA" and exit 0 without one

Each check is one decision of issue 27 or of the data path, run for real: the build's kernels match
this GPU, a rank's device, NCCL collectives (world size 1: one GPU cannot hold two NCCL ranks), AMP
training with a GradScaler, a mid-epoch resume on the GPU (random states and Adam's step on the CPU,
weights equal to the straight run), device prefetch from pinned memory, when prefetch pins (auto), and
gpu_transforms (the random transforms after the copy draw what the loader threads draw).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch import nn

RESULTS: list[tuple[str, bool, str]] = []
DEVICE = "cuda"  # a dry run of the script's own logic on a CPU sets "cpu" (checks that need CUDA fail)


def check(fn: Callable[[], str]) -> Callable[[], str]:
    """Run ``fn`` now and record ok (its detail) or FAIL (the exception's last line)."""
    t0 = time.perf_counter()
    try:
        detail = fn()
        ok = True
    except Exception as exc:  # a check's failure is a finding, reported, not a crash
        traceback.print_exc()
        detail, ok = f"{type(exc).__name__}: {exc}"[:400], False
    line = f"{'ok  ' if ok else 'FAIL'} {fn.__name__} ({time.perf_counter() - t0:.1f}s): {detail}"
    print(line, flush=True)
    RESULTS.append((fn.__name__, ok, detail))
    return fn


def data(n: int, size: int = 32, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``n`` noisy spheres, as the example bundle's items."""
    g = torch.Generator().manual_seed(seed)
    ax = torch.arange(size, dtype=torch.float32) - size / 2
    r = (ax[:, None, None] ** 2 + ax[None, :, None] ** 2 + ax[None, None, :] ** 2).sqrt()
    items = []
    for _ in range(n):
        rad = float(torch.randint(5, 12, (1,), generator=g))
        label = (r < rad).float()[None]
        items.append({"image": label + 0.3 * torch.randn(label.shape, generator=g), "label": label})
    return items


def trainer(out: Path | None, amp: bool = False, epochs: int = 2, loss: nn.Module | None = None, seed: int = 0):
    """A small 3D UNet Trainer on the GPU, seeded and deterministic."""
    from monai.losses import DiceLoss
    from monai.networks.nets import UNet

    from hpc_runner.engine.trainer import Trainer

    torch.manual_seed(seed)
    net = UNet(3, 1, 1, channels=(8, 16, 32), strides=(2, 2), num_res_units=1)
    loader = torch.utils.data.DataLoader(data(12), batch_size=2, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    return Trainer(net, torch.optim.Adam(net.parameters(), lr=1e-3), loss or DiceLoss(sigmoid=True), loader,
                   max_epochs=epochs, device=DEVICE, amp=amp, seed=seed, deterministic=True, output_dir=out,
                   progress=False, checkpoint_interval=0)


def arch_matches_this_gpu() -> str:
    """The pre-flight's arch rule agrees with what runs: this build has kernels for this GPU."""
    from hpc_runner.engine.cuda_arch import arch_problem, check_cuda_arch, kernels_run_on

    cap, arches = torch.cuda.get_device_capability(), torch.cuda.get_arch_list()
    assert kernels_run_on(cap, arches), (cap, arches)
    assert arch_problem(0, torch.cuda.get_device_name(), cap, arches, torch.__version__) is None
    check_cuda_arch()
    (torch.ones(8, device="cuda") * 2).sum().item()  # a kernel really runs
    return f"{torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]}, build {' '.join(arches)}"


def rank_device_on_one_gpu() -> str:
    """A rank that sees one GPU takes cuda:0; a bundle's cuda:0 under two ranks is the rank's own GPU."""
    from hpc_runner.engine.distributed import rank_device

    n = torch.cuda.device_count()
    assert rank_device(0, n) == "cuda:0"
    assert rank_device(0, n, "cuda:0", ranks=1) == "cuda:0"
    assert rank_device(0, n, "cuda", ranks=2) == "cuda:0"
    torch.zeros(1, device=rank_device(0, n)).add_(1).item()
    return f"{n} GPU(s) seen; rank 0 -> cuda:0"


def nccl_collectives() -> str:
    """NCCL world of one: the collective device is CUDA, a seed and a vote go through NCCL, gloo beside it."""
    import torch.distributed as dist

    from hpc_runner.engine.distributed import agreed_seed, all_ranks_agree, collective_device, control_group

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True)
    dist.init_process_group("nccl", rank=0, world_size=1, store=store, device_id=torch.device("cuda:0"))
    try:
        dev = collective_device()
        assert torch.device(dev).type == "cuda", dev
        t = torch.ones(4, device="cuda")
        dist.all_reduce(t)
        assert t.sum().item() == 4
        assert agreed_seed(1234) == 1234
        group = control_group()
        assert all_ranks_agree(True, group) and not all_ranks_agree(False, group)
        backend = dist.get_backend()
        # the Trainer under NCCL: DDP with device_ids from the rank's device, its stop vote on the gloo group
        tr = trainer(None, epochs=2)
        tr.run()
        wrapped = type(tr.network).__name__
        assert wrapped == "DistributedDataParallel", wrapped
        assert tr.history["epoch_loss"][-1] < tr.history["epoch_loss"][0]
    finally:
        dist.destroy_process_group()
    return f"backend {backend}, collective device {dev}, control group {group}; Trainer wrapped in {wrapped}"


def amp_training() -> str:
    """AMP on CUDA: float16 autocast with a GradScaler; loss falls and the weights stay finite."""
    tr = trainer(None, amp=True, epochs=3)
    assert tr.scaler is not None
    summary = tr.run()
    losses = tr.history["epoch_loss"]
    assert all(torch.isfinite(p).all() for p in tr.network.parameters())
    assert losses[-1] < losses[0], losses
    scale = tr.scaler.get_scale()
    return f"epoch losses {[round(x, 4) for x in losses]}, scale {scale:.0f}, wall {summary.get('wall_s')}"


def mid_epoch_resume_on_gpu() -> str:
    """A stop at step 3 of 6 checkpoints mid-epoch; the resume loads RNG states and Adam's step on the CPU."""
    from monai.losses import DiceLoss

    from hpc_runner.engine.stop import Preempted, clear_stop, request_stop

    class StopAt(nn.Module):
        def __init__(self, at: int) -> None:
            super().__init__()
            self.inner, self.calls, self.at = DiceLoss(sigmoid=True), 0, at

        def forward(self, a, b):
            self.calls += 1
            if self.calls == self.at:
                request_stop("gpu_checks: a stop at step 3")
            return self.inner(a, b)

    with tempfile.TemporaryDirectory() as tmp:
        straight = trainer(Path(tmp) / "straight")
        straight.run()
        stopped = trainer(Path(tmp) / "stopped", loss=StopAt(3))
        try:
            stopped.run()
            raise AssertionError("the stop request did not stop the run")
        except Preempted:
            pass
        finally:
            clear_stop()
        ckpts = sorted((Path(tmp) / "stopped" / "checkpoints").glob("ckpt_*.pt"))
        state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
        assert 0 < state["batch_in_epoch"] < 6, state["batch_in_epoch"]
        resumed = trainer(Path(tmp) / "stopped")
        resumed.run()
        steps = {p: s["step"] for p, s in resumed.optimizer.state.items() if "step" in s}
        assert steps and all(torch.as_tensor(s).device.type == "cpu" for s in steps.values())
        worst = max((a - b).abs().max().item() for a, b in
                    zip(straight.network.state_dict().values(), resumed.network.state_dict().values()))
    assert worst < 1e-4, f"largest weight difference from the straight run {worst:g}"
    return f"stopped at step {state['step']} (batch {state['batch_in_epoch']}), resumed; max |dw| {worst:.2e}"


def prefetch_overlaps_copy() -> str:
    """DevicePrefetcher from a ThreadDataLoader: batches arrive on the GPU in order, pinned on the way."""
    from hpc_runner.data import DevicePrefetcher, ThreadDataLoader

    items = [{"image": torch.full((1, 64, 64, 64), float(i))} for i in range(16)]
    loader = ThreadDataLoader(items, batch_size=4, seed=0, num_workers=2, use_thread_workers=True)
    sums = [b["image"].sum().item() for b in DevicePrefetcher(loader, DEVICE)]
    assert sums == [64**3 * sum(range(k, k + 4)) for k in (0, 4, 8, 12)], sums
    return f"{len(sums)} batches in order"


def prefetch_pins_only_when_compute_bound() -> str:
    """Auto pinning on CUDA events: a loop that out-computes its loader pins, one that waits for data does not."""
    from hpc_runner.data import DevicePrefetcher

    def loader(n: int, sleep_s: float):
        for i in range(n):
            time.sleep(sleep_s)
            yield {"image": torch.full((4, 1, 64, 64, 64), float(i))}

    a = torch.randn(2048, 2048, device=DEVICE)
    heavy, firsts = DevicePrefetcher(loader(12, 0.0), DEVICE), []
    for b in heavy:
        for _ in range(20):
            a = torch.tanh(a @ a)  # GPU work queued faster than it runs: compute-bound
        firsts.append(b["image"][0, 0, 0, 0, 0])
    assert [x.item() for x in firsts] == [float(i) for i in range(12)]
    waiting = DevicePrefetcher(loader(12, 0.02), DEVICE)
    assert [b["image"].sum().item() for b in waiting] == [64**3 * 4 * float(i) for i in range(12)]
    assert heavy.pin_choice is not None and heavy.pin_choice.pin, heavy.pin_choice.line()
    assert waiting.pin_choice is not None and waiting.pin_choice.decided is False, waiting.pin_choice.line()
    return f"compute-bound: {heavy.pin_choice.line()}; waiting: {waiting.pin_choice.line()}"


def gpu_transforms_match_the_cpu_path() -> str:
    """The random transforms run on the GPU after prefetch give each item the augmentation of the CPU path."""
    from monai.data import CacheDataset
    from monai.transforms import Compose, RandAffined, RandFlipd, RandGaussianNoised, RandRotate90d

    from hpc_runner.data import DevicePrefetcher, ThreadDataLoader

    keys = ("image", "label")

    def loader() -> ThreadDataLoader:
        chain = Compose([RandFlipd(keys, prob=0.5, spatial_axis=0), RandRotate90d(keys, prob=0.5),
                         RandGaussianNoised("image", prob=0.8, std=0.2),
                         RandAffined(keys, prob=0.9, rotate_range=(0.3, 0.3, 0.3), padding_mode="zeros")])
        return ThreadDataLoader(CacheDataset(data(8), chain, progress=False), batch_size=2, shuffle=True, seed=5,
                                num_workers=2, use_thread_workers=True)

    cpu, gpu = loader(), loader()
    tail = gpu.defer_random_transforms()
    worst = 0.0
    for epoch in (0, 1):
        cpu.set_epoch(epoch)
        gpu.set_epoch(epoch)
        for want, got in zip(cpu, DevicePrefetcher(gpu, DEVICE), strict=True):
            got = tail(got)
            assert got["image"].device.type == torch.device(DEVICE).type, got["image"].device
            for k in keys:
                # bilinear resampling on the GPU is not bit-identical to the CPU's; the draws are the same
                worst = max(worst, float((got[k].cpu() - want[k]).abs().max()))
    assert worst < 1e-3, f"largest difference from the CPU path {worst:g}"
    return f"{tail.line(DEVICE)}; max |gpu - cpu| {worst:.2e} over 2 epochs"


def main() -> int:
    """Run every check; exit 1 if any failed."""
    if not torch.cuda.is_available():
        print("gpu_checks: needs CUDA (none here); skipped")
        return 0
    os.environ.setdefault("HPCR_QUIET", "1")
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}", flush=True)
    for fn in (arch_matches_this_gpu, rank_device_on_one_gpu, nccl_collectives, amp_training,
               mid_epoch_resume_on_gpu, prefetch_overlaps_copy, prefetch_pins_only_when_compute_bound,
               gpu_transforms_match_the_cpu_path):
        check(fn)
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"gpu_checks: {len(RESULTS) - len(failed)} ok, {len(failed)} failed {failed or ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
