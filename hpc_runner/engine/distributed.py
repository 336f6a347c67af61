"""Multi-process runs: find the rank from torchrun or SLURM, start torch.distributed, shard the loader."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("hpc_runner.distributed")


def launched_world(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """Return ``(rank, world_size)`` this process was launched as (torchrun's RANK, or srun's tasks)."""
    environ = os.environ if environ is None else environ
    if "WORLD_SIZE" in environ and "RANK" in environ:
        return int(environ["RANK"]), int(environ["WORLD_SIZE"])
    ntasks = int(environ.get("SLURM_NTASKS", environ.get("SLURM_NPROCS", "1")) or 1)
    if ntasks > 1 and "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ:
        return int(environ["SLURM_PROCID"]), ntasks  # one process per srun task
    return 0, 1


def is_main_process() -> bool:
    """Return True on rank 0 (or when not distributed); only rank 0 writes records and checkpoints."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return launched_world()[0] == 0


def init_distributed(backend: str | None = None) -> bool:
    """Start the default process group when launched as several processes; return True if it did.

    Under srun the rendezvous variables come from submitit's ``TorchDistributedEnvironment``
    (SLURM's node list, task ids, a port derived from the job id); torchrun sets them itself.
    """
    import torch
    import torch.distributed as dist

    rank, world = launched_world()
    if world <= 1 or (dist.is_available() and dist.is_initialized()):
        return False
    if "MASTER_ADDR" not in os.environ:
        from submitit.helpers import TorchDistributedEnvironment

        os.environ.setdefault("SUBMITIT_EXECUTOR", "slurm")  # submitit only sets it in its own jobs, not plain srun
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0")))
        torch.cuda.set_device(local_rank % max(1, torch.cuda.device_count()))
    dist.init_process_group(backend=backend, rank=rank, world_size=world)
    log.info("torch.distributed: rank %d of %d (%s)", rank, world, backend)
    return True


def shutdown_distributed() -> None:
    """Destroy the process group if this process started one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard_loader(loader: Any, seed: int = 0) -> Any:
    """Make ``loader`` yield only this rank's share of every epoch (a DistributedSampler), in place.

    Loaders of ours expose ``shard(rank, world_size)``. For torch/MONAI DataLoaders the sampler is
    swapped in place rather than rebuilding the loader, so subclasses such as MONAI's
    ThreadDataLoader keep their buffering; torch forbids setting these attributes after __init__,
    hence ``object.__setattr__``.
    """
    import torch.distributed as dist
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

    if not (dist.is_available() and dist.is_initialized()):
        return loader
    rank, world = dist.get_rank(), dist.get_world_size()
    if hasattr(loader, "shard"):
        return loader.shard(rank, world)
    if not isinstance(loader, DataLoader) or isinstance(loader.sampler, DistributedSampler):
        return loader
    if loader.batch_size is None:
        raise ValueError("cannot shard a DataLoader with a custom batch_sampler; give it a DistributedSampler")
    sampler = DistributedSampler(
        loader.dataset,
        num_replicas=world,
        rank=rank,
        shuffle=isinstance(loader.sampler, RandomSampler),
        seed=seed,
        drop_last=loader.drop_last,
    )
    object.__setattr__(loader, "sampler", sampler)
    object.__setattr__(loader, "batch_sampler", BatchSampler(sampler, loader.batch_size, loader.drop_last))
    return loader


def all_ranks_agree(flag: bool) -> bool:
    """Return True if ``flag`` is set on any rank (so every rank stops at the same step)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1 if flag else 0])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())
