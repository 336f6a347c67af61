"""Multi-process runs: find the rank from torchrun or SLURM, start torch.distributed, shard the loader."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any

# the launcher's and the rendezvous' decisions, imported from here by older callers
from hpc_runner.engine.launch_env import (  # noqa: F401
    env_int,
    launched_world,
    local_rank,
    node_rank,
    srun_without_torchrun,
    visible_gpu_count,
)
from hpc_runner.engine.rendezvous import (  # noqa: F401
    choose_gloo_interface,
    connect_store,
    master_port,
    rendezvous_env,
    rendezvous_plan,
    rendezvous_wait,
    resolve_host,
    this_node,
)
from hpc_runner.engine.stop import stop_requested
from hpc_runner.errors import ClusterError, UserError

log = logging.getLogger("hpc_runner.distributed")


def world_size() -> int:
    """Return the number of ranks: the process group's when there is one, else what the launcher says."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return launched_world()[1]


def rank_device(rank_on_node: int, cuda_devices: int, requested: str | None = None, ranks: int = 1) -> str:
    """Return the device a rank trains on: ``cuda:<local rank>`` among the GPUs it sees, else ``cpu``.

    A rank that sees one GPU (srun --gpus-per-task, or CUDA_VISIBLE_DEVICES set per task) uses it;
    a rank that sees all of its node's GPUs uses the one of its local rank. ``requested`` (the
    bundle's ``device``) wins when the run is one process; a bare ``cuda`` gets the local rank's
    index. Under several ranks (``ranks`` > 1) a CUDA index in the bundle (``cuda:0``, as zoo
    configs say) is remapped to the rank's own GPU: honoured, it would put every rank on one GPU
    and NCCL would fail ("Duplicate GPU detected"). See :func:`device_remap_line`.
    """
    if requested is not None:
        req = str(requested)
        if req != "cuda" and not (ranks > 1 and req.startswith("cuda:")):
            return req
        if cuda_devices <= 0:
            return req  # torch says what is wrong when the network is moved there
    if cuda_devices <= 0:
        return "cpu"
    if cuda_devices == 1:
        return "cuda:0"
    if rank_on_node >= cuda_devices:
        raise ClusterError(
            f"local rank {rank_on_node} sees only {cuda_devices} GPUs: two ranks would share one GPU",
            expected="as many tasks per node as GPUs per node (--ntasks-per-node equal to --gres=gpu:N)",
        )
    return f"cuda:{rank_on_node}"


def shared_gpu_problem(local_world: int, cuda_devices: int, visible: str | None) -> str | None:
    """Return why NCCL cannot start when every rank of this node sees the same single GPU, else None.

    One GPU visible and ``CUDA_VISIBLE_DEVICES`` unset means the node has one GPU and each local rank sees
    it: NCCL refuses two ranks on one device ("invalid usage"). With the variable set (``srun
    --gpus-per-task``, a slot runner) each rank may see a GPU of its own, which cannot be told from here.
    """
    if local_world > 1 and cuda_devices == 1 and visible is None:
        return (f"{local_world} ranks on this node but it has one GPU, which every rank sees: NCCL cannot put "
                "two ranks on one GPU")
    return None


def device_remap_line(requested: str | None, chosen: str, rank: int, rank_on_node: int) -> str | None:
    """Return the line that says a bundle's explicit CUDA device was replaced by this rank's own (None if not)."""
    if requested is None or not str(requested).startswith("cuda:") or str(requested) == chosen:
        return None
    return (f"hpc-runner: rank {rank} (local rank {rank_on_node}) trains on {chosen}, not the bundle's device "
            f"{requested}: under several ranks each one takes its own GPU")


def collective_device_type(backend: str) -> str:
    """Return the device type a collective's tensors must be on for ``backend`` (``dist.get_backend()``).

    NCCL takes CUDA tensors only, XCCL XPU tensors only; gloo, MPI and UCC take CPU tensors. A
    per-device backend string (``"cpu:gloo,cuda:nccl"``) has a CPU backend, which is the cheaper choice.
    """
    import torch.distributed as dist

    entries = [e.strip().lower() for e in str(backend).split(",") if e.strip()]
    by_device: dict[str, str] = {}
    for entry in entries:
        device, _, name = entry.rpartition(":")
        if device:
            by_device[device] = name
        else:
            for dev in dist.Backend.backend_capability.get(name, ["cpu"]):
                by_device.setdefault(dev, name)
    if "cpu" in by_device:
        return "cpu"
    if not by_device:
        raise ValueError(f"no device for the process-group backend {backend!r}")
    return next(iter(by_device))


def bundle_makes_process_group(config: Any) -> bool:
    """Return True if a bundle's config calls ``init_process_group`` itself (as zoo multi_gpu_train.json does)."""
    if isinstance(config, str):
        return "init_process_group" in config
    if isinstance(config, Mapping):
        return any(bundle_makes_process_group(v) for v in config.values())
    if isinstance(config, list | tuple):
        return any(bundle_makes_process_group(v) for v in config)
    return False


def describe_device_choice(environ: Mapping[str, str] | None = None) -> str:
    """Return one line: this rank, its local rank and the CUDA device it takes on a node with its visible GPUs."""
    environ = os.environ if environ is None else environ
    rank, world = launched_world(environ)
    lr = local_rank(environ)
    gpus = visible_gpu_count(environ)
    try:
        plan = rank_device(lr, gpus)
    except Exception as exc:  # the Trainer raises it; here it is only reported
        plan = f"none ({exc})"
    return (
        f"rank {rank} of {world}, local rank {lr}: GPU device {plan} "
        f"(CUDA_VISIBLE_DEVICES={environ.get('CUDA_VISIBLE_DEVICES', '')!s})"
    )


def is_main_process() -> bool:
    """Return True on rank 0 (or when not distributed); only rank 0 writes records and checkpoints."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return launched_world()[0] == 0


def init_distributed(backend: str | None = None, bundle_config: Any = None) -> bool:
    """Start the default process group when launched as several processes; return True if it did.

    Under srun without torchrun the rendezvous variables are set from SLURM's first (see
    :func:`rendezvous_plan`). A group that already exists is used as it is, and none is started for a
    bundle that calls ``init_process_group`` itself (``bundle_config``): it finds the variables set.
    The wait for the other ranks is bounded by ``HPCR_RENDEZVOUS_TIMEOUT`` (a few seconds for SLURM variables
    with no step behind them) and ends on SIGINT or a stop request
    (:func:`hpc_runner.engine.rendezvous.connect_store`): ClusterError, exit code 2 (130 on SIGINT). Every rank
    of a group started here then votes once in :func:`start_together`, before any other collective.
    """
    global _OWN_GROUP, _VOTE_PENDING
    import torch
    import torch.distributed as dist

    values, notes = rendezvous_plan()
    launched = dict(os.environ)  # as the launcher left it: a stale environment is judged and named by it
    os.environ.update(values)
    rank, world = launched_world()
    if world <= 1:
        return False
    if dist.is_available() and dist.is_initialized():
        return False
    # each rank says which GPU it takes (the same decision as the Trainer's), CUDA or not
    where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    how = f" ({'; '.join(notes)})" if notes else ""
    _say(f"hpc-runner: {describe_device_choice()}; rendezvous {where}{how}")
    if bundle_config is not None and bundle_makes_process_group(bundle_config):
        _say(f"hpc-runner: rank {rank}: the bundle starts torch.distributed itself")
        return False
    timeout_s, stale = rendezvous_wait(launched)  # a bad value is refused before anything waits
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    # gloo carries the group (CPU) or the stop votes beside NCCL: its interface must reach the other nodes
    print(f"hpc-runner: rank {rank}: {choose_gloo_interface()}", flush=True)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        store = None  # torchrun's agent hosts the store and started every rank: torch's env:// rendezvous
    else:
        store = dist.PrefixStore("default_pg", connect_store(rank, world, timeout_s, stopped=stop_requested,
                                                             stale=stale, launched=launched))
    if backend == "nccl":
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
        shared = shared_gpu_problem(local_world, torch.cuda.device_count(), os.environ.get("CUDA_VISIBLE_DEVICES"))
        if shared:
            raise ClusterError(shared, expected="one GPU per rank (--ntasks-per-node equal to --gres=gpu:N), "
                               "or CUDA_VISIBLE_DEVICES='' for ranks on the CPU (gloo)")
        torch.cuda.set_device(rank_device(local_rank(), torch.cuda.device_count()))
    dist.init_process_group(backend=backend, rank=rank, world_size=world, store=store)
    _OWN_GROUP = True
    log.info("torch.distributed: rank %d of %d (%s)", rank, world, backend)
    _RANKS[:] = gather_rank_records(rank_record(backend))
    _VOTE_PENDING = True
    return True


_OWN_GROUP = False
_VOTE_PENDING = False  # the group init_distributed started awaits every rank's start_together
_REFUSAL_BYTES = 1024  # how much of a refusing rank's paragraph the others are told


def start_together(refusal: BaseException | None = None) -> None:
    """Vote, with every other rank, whether the run starts: once per group, after the checks that may refuse.

    A rank that refuses once the group exists (rank 0's run dir holds another config, a GPU check) would
    leave the others in their next collective until the backend's timeout (30 minutes, a GPU allocation held
    idle). Every rank of a group :func:`init_distributed` started calls this once, at the same point of the
    collectives' order (before any other after the start), with its refusal or None: one small all-gather
    on the CPU (:func:`control_group`) tells each rank every refusal. The refusing rank then raises its own
    error (the caller does), the others a ClusterError ``rank N refused: ...`` (exit code 2). A no-op without
    a group started here, or once voted.
    """
    global _VOTE_PENDING
    if not (_VOTE_PENDING and owns_process_group()):
        return
    _VOTE_PENDING = False
    import torch
    import torch.distributed as dist

    group = control_group()
    said = b"" if refusal is None else (_refusal_line(refusal).encode("utf-8", "replace") or b"refused")
    mine = torch.zeros(_REFUSAL_BYTES + 1, dtype=torch.uint8, device=collective_device(group))
    if said:
        said = said[:_REFUSAL_BYTES]
        mine[0] = 1
        mine[1:1 + len(said)] = torch.frombuffer(bytearray(said), dtype=torch.uint8)
    every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    if refusal is not None:
        with contextlib.suppress(Exception):  # a peer already gone: the caller's own error is what to say
            dist.all_gather(every, mine, group=group)
        return  # the caller raises its own error
    try:
        dist.all_gather(every, mine, group=group)
    except RuntimeError as exc:  # a rank ended without voting (gloo sees its connection close): its output says why
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise ClusterError(f"another rank of this run ended before it started, without saying why here ({first})",
                           expected="every rank able to start: the other ranks' output says what stopped it") from None
    for rank, vote in enumerate(every):
        if int(vote[0]) == 1:
            text = bytes(vote[1:].cpu().tolist()).rstrip(b"\0").decode("utf-8", "replace")
            raise ClusterError(f"rank {rank} refused: {text}")  # its paragraph; this rank stops with it


def _refusal_line(exc: BaseException) -> str:
    """Return a refusal as one line: a UserError's paragraph, else the exception's type and its start."""
    text = exc.paragraph() if isinstance(exc, UserError) else f"{type(exc).__name__}: {str(exc).strip()[:400]}"
    return " ".join(text.split())


_RANKS: list[dict[str, Any]] = []  # every rank's record (rank_record), gathered when the group started


def rank_record(backend: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Return where this rank runs: its ranks, node (SLURM's name), host name and address, and device.

    ``device`` is the one the rank takes when the bundle names none (its local rank's GPU among those
    it sees, else ``cpu``, as the Trainer decides); a bundle's own ``device`` is in its config.yaml.
    """
    import socket

    import torch

    environ = os.environ if environ is None else environ
    rank = launched_world(environ)[0]
    lr = local_rank(environ)
    host = socket.gethostname()
    try:
        device = rank_device(lr, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    except Exception as exc:  # two ranks on one GPU: the Trainer refuses it; here it is only recorded
        device = f"none ({exc})"
    return {"rank": rank, "local_rank": lr, "node_rank": node_rank(environ), "node": this_node(environ),
            "host": host, "address": resolve_host(host), "device": device, "backend": backend,
            "cuda_visible_devices": environ.get("CUDA_VISIBLE_DEVICES")}


def gather_rank_records(mine: dict[str, Any]) -> list[dict[str, Any]]:
    """Return every rank's record, in rank order (a collective: every rank calls it at the same point)."""
    import torch.distributed as dist

    records: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(records, mine, group=control_group())
    return [r for r in records if isinstance(r, dict)]


def rank_records() -> list[dict[str, Any]]:
    """Return the records of every rank of the group this process started (empty when it started none)."""
    return list(_RANKS) if _OWN_GROUP else []
_SAID: set[str] = set()


def _say(line: str) -> None:
    """Print ``line`` once per process (the run dir's preparation and the run both ask to start the group)."""
    if line not in _SAID:
        _SAID.add(line)
        print(line, flush=True)


def owns_process_group() -> bool:
    """Return True while the default process group is one :func:`init_distributed` started."""
    import torch.distributed as dist

    return _OWN_GROUP and dist.is_available() and dist.is_initialized()


def shutdown_distributed() -> None:
    """Destroy the process group if this process started one."""
    global _OWN_GROUP, _VOTE_PENDING
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    _OWN_GROUP = _VOTE_PENDING = False


def settle_distributed_threads(pause: float = 0.1) -> None:
    """Let torch.distributed's worker threads drop their last tensors while Python can still run them.

    A gloo worker thread that frees the last reference to a tensor Python has let go of needs the GIL;
    once the interpreter is finalizing it cannot take it, the thread is unwound through a noexcept
    destructor and the process aborts ("terminate called without an active exception" after the run
    finished; pytorch/pytorch#179291). Destroying any group still registered (a bundle's own group
    included), collecting the objects that hold one and pausing with the GIL released lets them finish.
    """
    import gc
    import time

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()
    time.sleep(pause)  # releases the GIL: a worker waiting for it frees its tensor now, not at exit


def collective_device(group: Any = None) -> Any:
    """Return the device a collective on ``group`` (default: the default group) needs its tensors on."""
    import torch
    import torch.distributed as dist

    kind = collective_device_type(dist.get_backend(group))
    if kind == "cuda":
        return torch.device("cuda", torch.cuda.current_device())  # NCCL's device is the current one
    return torch.device(kind)


def agreed_seed(seed: int, group: Any = None) -> int:
    """Return rank 0's ``seed`` on every rank (``seed`` itself when not distributed).

    A seed that each rank drew for itself (``torch.initial_seed()``) gives each rank's sampler its
    own shuffle, so ranks duplicate some samples and miss others.
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return int(seed)
    value = int(seed) & ((1 << 64) - 1)
    # two 32-bit halves: a 64-bit seed does not fit an int64 tensor
    t = torch.tensor([value >> 32, value & 0xFFFFFFFF], dtype=torch.int64, device=collective_device(group))
    dist.broadcast(t, src=0 if group is None else dist.get_global_rank(group, 0), group=group)
    hi, lo = (int(x) for x in t.tolist())
    return (hi << 32) | lo


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
        if hasattr(loader, "seed"):
            loader.seed = agreed_seed(loader.seed)  # the split assumes one (seed, epoch) order on every rank
        return loader.shard(rank, world)
    if not isinstance(loader, DataLoader) or isinstance(loader.sampler, DistributedSampler):
        return loader
    if loader.batch_size is None:
        raise ValueError("cannot shard a DataLoader with a custom batch_sampler; give it a DistributedSampler")
    seed = agreed_seed(seed)
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


def control_group() -> Any:
    """Return a process group whose collectives take CPU tensors: the default one, or a gloo group beside it.

    A flag read by the host each step on an NCCL group would be a CUDA tensor, and reading it
    (``.item()``) waits for every kernel queued before it: one host synchronisation per step. Every
    rank must call this at the same point the first time (``new_group`` is collective).
    """
    import torch.distributed as dist

    global _CONTROL
    if not (dist.is_available() and dist.is_initialized()):
        return None
    default = dist.group.WORLD
    if _CONTROL is not None and _CONTROL[0] is default:
        return _CONTROL[1]
    group = None if collective_device_type(dist.get_backend()) == "cpu" else dist.new_group(backend="gloo")
    _CONTROL = (default, group)
    return group


_CONTROL: tuple[Any, Any] | None = None


def all_ranks_agree(flag: bool, group: Any = None) -> bool:
    """Return True if ``flag`` is set on any rank of ``group`` (so every rank stops at the same step)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1 if flag else 0], device=collective_device(group))  # NCCL takes CUDA tensors only
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return bool(t.item())
