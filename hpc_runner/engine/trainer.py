"""The supervised training loop that bundles reference as ``_target_: hpc_runner.engine.Trainer``.

It reads top to bottom: epochs of steps, validation every N epochs, checkpoints, metrics. Timing,
checkpoints, metrics and seeding live in their own modules; this file only calls them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from hpc_runner.data.prefetch import DevicePrefetcher, move_to_device
from hpc_runner.data.transform_timing import merged_rows, timers_in
from hpc_runner.data.workers import available_cpus
from hpc_runner.engine import profiler, validation_hooks
from hpc_runner.engine.checkpoint import (
    CheckpointError,
    checkpoint_path,
    load_latest_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from hpc_runner.engine.distributed import (
    all_ranks_agree,
    collective_device,
    control_group,
    device_remap_line,
    is_main_process,
    launched_world,
    local_rank,
    rank_device,
    shard_loader,
    world_size,
)
from hpc_runner.engine.seeding import capture_rng, derive_seed, restore_rng, rng_for_rank, seed_everything
from hpc_runner.engine.stop import Preempted, Pruned, stop_requested
from hpc_runner.engine.trainer_args import better, check_trainer_arguments, gpu_transforms_wanted, warn_amp_on_cpu
from hpc_runner.engine.val_sample import middle_slice, write_val_sample
from hpc_runner.errors import ConfigError
from hpc_runner.pages import bottleneck
from hpc_runner.records.atomic import save_atomic, write_text_atomic
from hpc_runner.records.json_out import dumps_json, json_copy
from hpc_runner.records.metrics_log import MetricsLog, truncate_after_step
from hpc_runner.records.rundir import CHECKPOINT_DIR, METRICS_FILE, SUMMARY_FILE
from hpc_runner.scheduler.job_clock import CheckpointTimer
from hpc_runner.scheduler.job_env import job_end_time
from hpc_runner.tracking.sinks import open_sinks

log = logging.getLogger("hpc_runner.trainer")


def _reseed_transforms(loader: Any, seed: int) -> None:
    """Re-seed the MONAI random transforms of ``loader``'s dataset for this epoch.

    They own a RandomState that MONAI's DataLoader seeds once, at construction, so without this
    an epoch's augmentation depends on all the epochs before it, which a resumed run never saw.
    """
    dataset = getattr(loader, "dataset", None)
    if dataset is not None:
        from monai.data.utils import set_rnd

        set_rnd(dataset, seed)


def defer_random_transforms(loader: Any, device: torch.device, say: bool) -> Any:
    """Return the DeviceTail that runs ``loader``'s random transforms after the copy to ``device`` (gpu_transforms).

    ConfigError when the loader cannot leave them (not our ThreadDataLoader, an IterableDataset, no Compose).
    """
    defer = getattr(loader, "defer_random_transforms", None)
    if not callable(defer):
        raise ConfigError(
            f"gpu_transforms needs the train loader to be hpc_runner.data.ThreadDataLoader, "
            f"not {type(loader).__name__}",
            id_path="trainer#gpu_transforms",
            expected="train_loader: {_target_: hpc_runner.data.ThreadDataLoader, ...}, or gpu_transforms: false",
        )
    try:
        tail = defer()
    except ValueError as exc:
        raise ConfigError(str(exc), id_path="trainer#gpu_transforms",
                          expected="a map-style dataset of dict items with a MONAI Compose, or gpu_transforms: false",
                          ) from exc
    if say:
        print(f"hpc-runner: {tail.line(device)}", flush=True)
    return tail


def choose_device(
    requested: str | torch.device | None, rank_on_node: int, cuda_devices: int, ranks: int = 1
) -> torch.device:
    """Return the device of this rank: the bundle's ``device`` if it names one, else its local rank's GPU, else CPU.

    Under several ``ranks`` a bundle's ``cuda:N`` becomes the rank's own GPU (see ``rank_device``).
    """
    req = None if requested is None else str(torch.device(requested))
    return torch.device(rank_device(rank_on_node, cuda_devices, req, ranks))


# DistributedDataParallel options a bundle may set (torch.nn.parallel.DistributedDataParallel.__init__);
# device_ids and output_device are the Trainer's: one per rank, from its device
DDP_OPTIONS = frozenset({
    "find_unused_parameters", "static_graph", "gradient_as_bucket_view", "broadcast_buffers", "bucket_cap_mb",
})


def ddp_options(ddp: dict[str, Any] | None) -> dict[str, Any]:
    """Return the bundle's DDP options checked against what the Trainer passes on; ConfigError for others."""
    options = dict(ddp or {})
    unknown = sorted(set(options) - DDP_OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown DistributedDataParallel option(s) {', '.join(unknown)}",
            id_path="trainer#ddp",
            expected=f"some of {', '.join(sorted(DDP_OPTIONS))} (device_ids follow each rank's device)",
        )
    return options


def cpu_state_dict(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Return ``module``'s state dict with every tensor copied to the CPU, so the file loads on any machine."""
    return {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in module.state_dict().items()}


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """Return ``device_ids`` for DistributedDataParallel: this rank's one GPU, or None off CUDA (as torch asks)."""
    if device.type != "cuda":
        return None
    if device.index is None:
        raise ValueError("a CUDA device without an index would make every rank name GPU 0; choose_device gives one")
    return [device.index]


class _HostEvent:
    """The host clock with the part of ``torch.cuda.Event``'s API the ledger uses (CPU runs are synchronous)."""

    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _HostEvent) -> float:
        return (end.t - self.t) * 1000.0


@dataclass
class _PendingStep:
    record: dict[str, Any]
    loss: torch.Tensor
    asked: Any  # marked before the batch was asked for: from here the device waits for data
    start: Any
    end: Any


class StepLedger:
    """Each step's loss and timing, read when the device has finished the step, never right after queuing it.

    On CUDA, ``loss.item()`` or ``event.synchronize()`` after each step would make the host wait for
    the GPU to drain its queue, so the GPU idles while the host fetches and queues the next step.
    Here the loss is copied to host memory asynchronously and three events per step are recorded on
    the compute stream; a step is read once its end event has completed (``query()``), or forcibly
    when more than ``lag`` steps are waiting (then the host waits for a step the GPU finished long
    ago in all but pathological cases, while the ``lag`` newer ones keep it busy). ``data_s`` is
    the device time from asking for the batch to the step's start: the GPU reaches the first event
    when it has finished the steps before, and the second only once the batch is there, so it
    counts the wait for the loader and any host-to-device copy not hidden behind compute.
    ``compute_s`` is start to end.
    """

    def __init__(self, device: torch.device, lag: int = 2, new_event: Callable[[], Any] | None = None) -> None:
        self.lag = max(0, int(lag))
        if new_event is None:
            cuda = device.type == "cuda"
            new_event = (lambda: torch.cuda.Event(enable_timing=True)) if cuda else _HostEvent
        self._new_event = new_event
        self._pending: deque[_PendingStep] = deque()

    def mark(self) -> Any:
        """Record an event now (on the current stream) and return it."""
        event = self._new_event()
        event.record()
        return event

    def step_ended(self, record: dict[str, Any], loss: torch.Tensor, asked: Any, start: Any) -> None:
        """Keep a step's record until its loss and times can be read without waiting for the device.

        ``asked`` was marked before the loop asked for the batch, ``start`` once it was on the device.
        """
        # to host memory without waiting (pinned on CUDA); valid once the end event has completed
        host_loss = loss.detach().to("cpu", non_blocking=True)
        self._pending.append(_PendingStep(record, host_loss, asked, start, self.mark()))

    def __len__(self) -> int:
        return len(self._pending)

    def ready(self, flush: bool = False) -> list[dict[str, Any]]:
        """Return the records, with ``loss``, ``data_s`` and ``compute_s``, of the steps that can be read now."""
        out = []
        while self._pending and (flush or len(self._pending) > self.lag or self._pending[0].end.query()):
            step = self._pending.popleft()
            step.end.synchronize()  # a no-op when query() was True
            record = step.record
            record["loss"] = float(step.loss.item())
            record["data_s"] = round(max(0.0, step.asked.elapsed_time(step.start)) / 1000.0, 6)
            record["compute_s"] = round(step.start.elapsed_time(step.end) / 1000.0, 6)
            out.append(record)
        return out


class Trainer:
    """Supervised trainer: epochs, optional LR scheduler and validation, AMP, checkpoints, metrics.

    Every argument is plain data or an object built by the bundle, so a config can declare it::

        trainer:
          _target_: hpc_runner.engine.Trainer
          network: "@network"
          optimizer: "@optimizer"
          loss_function: "@loss"
          train_loader: "@train_loader"
          max_epochs: 20
          output_dir: "@output_dir"
    """

    def __init__(
        self,
        network: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_function: Callable[..., torch.Tensor],
        train_loader: Iterable,
        max_epochs: int = 1,
        device: str | torch.device | None = None,
        val_loader: Iterable | None = None,
        val_interval: int = 1,
        metric: Any = None,
        metric_name: str = "val_metric",
        metric_mode: str = "max",
        post_pred: Callable | None = None,
        post_label: Callable | None = None,
        inferer: Callable | None = None,
        lr_scheduler: Any = None,
        scheduler_interval: str = "epoch",
        amp: bool = False,
        seed: int | None = None,
        deterministic: bool = False,
        checkpoint_interval: int = 0,
        keep_checkpoints: int = 3,
        output_dir: str | Path | None = None,
        image_key: str = "image",
        label_key: str = "label",
        progress: bool | None = None,
        prefetch: bool = True,
        grad_clip_norm: float | None = None,
        resume: bool = True,
        ddp: dict[str, Any] | None = None,
        gpu_transforms: bool | None = None,
    ) -> None:
        check_trainer_arguments(max_epochs, val_interval, checkpoint_interval, keep_checkpoints, scheduler_interval,
                                grad_clip_norm, metric_mode)
        self.network = network
        # `_mode_: callable` in a bundle gives a factory: build it on this network (no `$` needed)
        if not isinstance(optimizer, torch.optim.Optimizer) and callable(optimizer):
            optimizer = optimizer(network.parameters())
        if lr_scheduler is not None and callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
            lr_scheduler = lr_scheduler(optimizer)
        self.optimizer = optimizer
        self.loss_function = loss_function
        self.train_loader = train_loader
        self.max_epochs = int(max_epochs)
        # one device per rank, chosen once: the network, the batches and DDP's device_ids all use it
        cuda_devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
        ranks, rank_on_node = world_size(), local_rank()
        self.device = choose_device(device, rank_on_node, cuda_devices, ranks)
        requested = None if device is None else str(torch.device(device))
        if (line := device_remap_line(requested, str(self.device), launched_world()[0], rank_on_node)) is not None:
            print(line, flush=True)
        self.ddp = ddp_options(ddp)
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)  # NCCL and the CUDA calls without a device use the current one
        self.val_loader = val_loader
        self.val_interval = max(1, int(val_interval))
        self.metric = metric
        self.metric_name = metric_name
        self.metric_mode = metric_mode  # which way is better: decided once, read by collect, reports and tune
        self.post_pred = post_pred
        self.post_label = post_label
        self.inferer = inferer
        self.lr_scheduler = lr_scheduler
        self.scheduler_interval = scheduler_interval
        self.amp = bool(amp)
        warn_amp_on_cpu(self.amp, self.device.type)
        self.seed = seed
        self.deterministic = deterministic
        self.checkpoint_interval = int(checkpoint_interval or 0)
        self.keep_checkpoints = keep_checkpoints
        self.output_dir = Path(output_dir) if output_dir else None
        self.image_key = image_key
        self.label_key = label_key
        self.progress = progress
        self.prefetch = prefetch
        self.grad_clip_norm = grad_clip_norm
        self.resume = resume
        self.main = is_main_process()
        # the random transforms after the device copy (hpc_runner.data.device_transforms); None: in the loader
        self.gpu_transforms = gpu_transforms_wanted(gpu_transforms)
        self._device_tail = (defer_random_transforms(train_loader, self.device, self.main)
                             if self.gpu_transforms else None)
        self.scaler = torch.amp.GradScaler("cuda") if self.amp and self.device.type == "cuda" else None
        # state that a checkpoint carries
        self.epoch = 0
        self.batch_in_epoch = 0
        self.step = 0
        self.history: dict[str, Any] = {"best_metric": None, "best_epoch": None, "metrics": [], "epoch_loss": []}
        self.epoch_losses: list[float] = []  # this epoch's step losses, so a resumed epoch reports the same mean
        self._data_s: list[float] = []
        self._compute_s: list[float] = []
        self.metrics_lag = 2  # steps whose loss/timing may still be on the device (see StepLedger)
        self._control: Any = None
        self._profiler: Any = profiler.NoProfiler()  # run() starts one when `hpc-runner run --profile` asked
        self._timer: Any = None  # run(): the job's end, for the checkpoint timed to the limit (job_clock)

    # ---- setup -------------------------------------------------------------------------------
    def _autocast(self) -> contextlib.AbstractContextManager:
        if not self.amp:
            return contextlib.nullcontext()
        dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _model(self) -> torch.nn.Module:
        return self.network.module if hasattr(self.network, "module") else self.network

    def _wrap_distributed(self) -> None:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return
        if isinstance(self.network, torch.nn.parallel.DistributedDataParallel):
            if self.ddp:
                print(f"hpc-runner: the network arrived wrapped in DistributedDataParallel: its own options "
                      f"apply, not ddp {self.ddp}", flush=True)
        else:
            self.network = torch.nn.parallel.DistributedDataParallel(
                self.network, device_ids=ddp_device_ids(self.device), **self.ddp
            )
        if dist.get_world_size() > 1:  # wrapped here or by the bundle: each rank trains on its share
            self.train_loader = shard_loader(self.train_loader, seed=self.seed or 0)
        self._control = control_group()  # the stop vote each step, read by the host without a GPU sync

    @property
    def _ckpt_dir(self) -> Path | None:
        return self.output_dir / CHECKPOINT_DIR if self.output_dir else None

    # ---- checkpoints -------------------------------------------------------------------------
    def state_dict(self, rng_by_rank: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Return everything needed to continue exactly from this point.

        ``rng_by_rank`` are every rank's random states (:meth:`save` gathers them); ``rng`` is rank 0's.
        """
        rngs = rng_by_rank or [capture_rng()]
        return {
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "network": self._model().state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "rng": rngs[0],
            "rng_by_rank": rngs,
            "history": json_copy(self.history),
            "epoch_losses": list(self.epoch_losses),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (RNG states are restored by the loop)."""
        self._model().load_state_dict(state["network"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.lr_scheduler is not None and state.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.epoch = int(state["epoch"])
        self.batch_in_epoch = int(state["batch_in_epoch"])
        self.step = int(state["step"])
        self.history = state["history"]
        self.epoch_losses = [float(x) for x in state.get("epoch_losses", [])]

    def save(self) -> Path | None:
        """Write a checkpoint of the current step (rank 0 writes; every rank must call it at the same step).

        Every rank's random states go in it: each rank continues from its own after a resume.
        """
        if self._ckpt_dir is None:
            return None
        t0 = time.perf_counter()
        rngs = _gather_rng(self._control)
        if not self.main:
            return None
        path = save_checkpoint(self._ckpt_dir, self.step, self.state_dict(rngs), keep=self.keep_checkpoints)
        if self._timer is not None:
            self._timer.save_took(time.perf_counter() - t0)
        return path

    def _timed_checkpoint_due(self, epoch_started: float, steps_done: int) -> str | None:
        """Why a checkpoint is due before the job's limit now (scheduler/job_clock.py), or None.

        The epoch's length as measured so far: the longest epoch of this run, or this one's steps so far
        stretched to the whole loader."""
        if self._timer is None or self._timer.end is None or steps_done <= 0:
            return None
        estimate = None
        with contextlib.suppress(TypeError):
            estimate = (time.perf_counter() - epoch_started) / steps_done * len(self.train_loader)  # type: ignore[arg-type]
        return self._timer.due(time.time(), estimate)

    def _resume(self) -> tuple[dict[str, Any] | None, str | None]:
        """Load the newest checkpoint rank 0 can read, on every rank; return this rank's RNG states and its path.

        Loaded to the CPU: ``load_state_dict`` moves weights and optimizer state to the parameters' device
        (Adam's ``step`` stays on the CPU, as torch keeps it unless capturable/fused), and the random
        states must be CPU tensors. Rank 0 chooses and broadcasts the step: on a shared filesystem each
        rank listing the folder itself may see another newest file, and ranks that resume from
        different steps hang.
        """
        if not self.resume or self._ckpt_dir is None:
            return None, None
        dist = torch.distributed
        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if not distributed:
            found = load_latest_checkpoint(self._ckpt_dir, map_location="cpu")
        else:
            found = self._load_chosen_by_rank_0()
        if not found:
            return None, None
        path, state = found
        self.load_state_dict(state)
        rank = dist.get_rank() if distributed else 0
        rng, note = rng_for_rank(state, rank, dist.get_world_size() if distributed else 1)
        if note:
            print(f"hpc-runner: {note}", flush=True)
        print(f"hpc-runner: resuming from {path} (epoch {self.epoch + 1}, step {self.step})", flush=True)
        return rng, str(path)

    def _load_chosen_by_rank_0(self) -> tuple[Path, dict[str, Any]] | None:
        """Rank 0 picks the checkpoint and broadcasts its step; every rank loads that step or all of them stop."""
        dist = torch.distributed
        self._control = control_group()  # collective the first time: every rank is here
        group = self._control
        chosen, problem = None, None
        if dist.get_rank() == 0:
            try:
                chosen = load_latest_checkpoint(self._ckpt_dir, map_location="cpu")
            except CheckpointError as exc:
                problem = exc
        step = -2 if problem is not None else (chosen[1]["step"] if chosen else -1)
        t = torch.tensor([step], dtype=torch.int64, device=collective_device(group))
        dist.broadcast(t, src=0 if group is None else dist.get_global_rank(group, 0), group=group)
        step = int(t.item())
        if dist.get_rank() != 0 and step >= 0:
            path = checkpoint_path(self._ckpt_dir, step)
            try:
                chosen = (path, read_checkpoint(path, map_location="cpu"))
            except Exception as exc:  # not there, or damaged, on this node's view of the filesystem
                problem = CheckpointError(
                    f"rank {dist.get_rank()} cannot read {path}, the checkpoint rank 0 resumes from: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    where=str(self._ckpt_dir),
                    expected="the run dir on a filesystem every node of the job sees",
                )
        failed = all_ranks_agree(problem is not None or step == -2, group)
        if problem is not None:
            raise problem
        if failed:
            raise CheckpointError("another rank could not read the checkpoint to resume from (see its error)",
                                  where=str(self._ckpt_dir))
        return chosen if step >= 0 else None

    # ---- the loop ----------------------------------------------------------------------------
    def _batches(self, epoch: int, skip: int) -> Iterator[Any]:
        if hasattr(self.train_loader, "set_epoch"):
            self.train_loader.set_epoch(epoch)
        sampler = getattr(self.train_loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)  # DistributedSampler: a new shuffle each epoch, the same on every rank
        if skip and hasattr(self.train_loader, "skip_batches"):
            self.train_loader.skip_batches(skip)  # our loader starts at batch `skip` without computing the rest
            skip = 0
        source: Iterable = self.train_loader
        if self.device.type == "cuda" and self.prefetch:
            source = DevicePrefetcher(source, self.device)
        it = iter(source)
        for _ in range(skip):  # any other loader: make the batches again and drop them
            next(it)
        return it

    def _bar(self, epoch: int, initial: int):
        from tqdm.auto import tqdm

        try:
            total = len(self.train_loader)  # type: ignore[arg-type]
        except TypeError:
            total = None
        # a bar on a terminal; in a batch log (SLURM) the one line per epoch is enough
        enabled = self.main and (self.progress if self.progress is not None else sys.stderr.isatty())
        return tqdm(
            total=total,
            initial=initial,
            desc=f"epoch {epoch + 1}/{self.max_epochs}",
            disable=not enabled,
            leave=False,
            mininterval=0.5,
            dynamic_ncols=True,
        )

    def _train_step(self, batch: Any) -> torch.Tensor:
        """One optimisation step; return the loss (averaged over ranks) as a tensor still on the device."""
        inputs, labels = batch[self.image_key], batch[self.label_key]
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast():
            outputs = self.network(inputs)
            loss = self.loss_function(outputs, labels)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if self.grad_clip_norm:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.grad_clip_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if self.grad_clip_norm:
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), self.grad_clip_norm)
            self.optimizer.step()
        if self.lr_scheduler is not None and self.scheduler_interval == "iteration":
            self.lr_scheduler.step()
        value = loss.detach().float()
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(value, op=dist.ReduceOp.AVG if self.device.type == "cuda" else dist.ReduceOp.SUM)
            if self.device.type != "cuda":  # gloo has no AVG
                value /= dist.get_world_size()
        return value

    def _train_epoch(self, epoch: int, metrics: MetricsLog, rng_after_skip: dict | None) -> float:
        self.network.train()
        skip = self.batch_in_epoch
        if self.seed is not None:
            # each epoch starts from its own seed, so a restart reproduces the shuffle and the draws
            epoch_seed = derive_seed(self.seed, "epoch", epoch)
            seed_everything(epoch_seed)
            _reseed_transforms(self.train_loader, epoch_seed)
        batches = self._batches(epoch, skip)
        if rng_after_skip is not None and (skip > 0 or self.seed is None):
            restore_rng(rng_after_skip)  # mid-epoch: continue exactly where the checkpoint was taken
        ledger = StepLedger(self.device, lag=self.metrics_lag)
        if skip == 0:
            self.epoch_losses = []
        epoch_started, steps_done = time.perf_counter(), 0
        with self._bar(epoch, skip) as bar:
            while True:
                asked = ledger.mark()
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                # on the data side of the clock: a copy the prefetcher did not make already is data wait
                batch = move_to_device(batch, self.device)
                if self._device_tail is not None:  # gpu_transforms: each item's random transforms, on the device
                    batch = self._device_tail(batch)
                start = ledger.mark()
                loss = self._train_step(batch)
                self._profiler.step()
                self.step += 1
                self.batch_in_epoch += 1
                record = {"kind": "iter", "step": self.step, "epoch": epoch, "batch": self.batch_in_epoch - 1,
                          "loss": None, "lr": self.optimizer.param_groups[0]["lr"]}
                ledger.step_ended(record, loss, asked, start)
                self._log_steps(ledger.ready(), metrics, bar)
                bar.update(1)
                steps_done += 1
                if self.checkpoint_interval and self.step % self.checkpoint_interval == 0:
                    self._log_steps(ledger.ready(flush=True), metrics, bar)
                    self.save()
                timed = self._timed_checkpoint_due(epoch_started, steps_done)
                # every rank must stop (or save) after the same step, or the others wait forever in all-reduce
                stop, timed_any = agree_flags([stop_requested() is not None, timed is not None], self._control)
                if stop:
                    self._log_steps(ledger.ready(flush=True), metrics, bar)
                    path = self.save()
                    raise Preempted(stop_requested() or "a stop request on another rank", str(path) if path else None)
                if timed_any:
                    self._log_steps(ledger.ready(flush=True), metrics, bar)
                    path = self.save()
                    if self.main:
                        print(f"hpc-runner: checkpoint {path} at step {self.step} (epoch {epoch + 1}, batch "
                              f"{self.batch_in_epoch}): {timed or 'another rank timed it'}; a stop or kill at the "
                              "limit loses only the steps after it", flush=True)
            self._log_steps(ledger.ready(flush=True), metrics, bar)
            with contextlib.suppress(AttributeError):
                batches.close()  # type: ignore[attr-defined]
        losses = self.epoch_losses
        return sum(losses) / len(losses) if losses else float("nan")

    def _log_steps(self, records: list[dict[str, Any]], metrics: MetricsLog, bar: Any) -> None:
        """Write the records of finished steps, in step order; stop on a non-finite loss."""
        for record in records:
            loss = record["loss"]
            self.epoch_losses.append(loss)
            self._data_s.append(record["data_s"])
            self._compute_s.append(record["compute_s"])
            metrics.write(record)
            bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss is {loss} at epoch {record['epoch'] + 1}, step {record['step']}")

    def validate(self) -> float | None:
        """Run the metric over the validation loader and return its value (None without one)."""
        return self._validate(epoch=None)[0]

    def _validate(self, epoch: int | None) -> tuple[float | None, dict[str, Any] | None]:
        """Return the metric's value and, with an ``epoch`` on rank 0, the first item's middle slice."""
        if self.val_loader is None or self.metric is None:
            return None, None
        from monai.data import decollate_batch

        model = self._model()  # the bare module: no DDP gradient hooks in evaluation
        model.eval()
        self.metric.reset()
        sample = None
        keep_sample = epoch is not None and self.main and self.output_dir is not None
        with torch.no_grad(), self._autocast():
            for batch in self.val_loader:
                batch = move_to_device(batch, self.device)
                inputs, labels = batch[self.image_key], batch[self.label_key]
                outputs = self.inferer(inputs, model) if self.inferer is not None else model(inputs)
                if keep_sample:  # the outputs are at hand: one slice of the first item, no extra forward pass
                    sample, keep_sample = middle_slice(inputs, labels, outputs, epoch), False
                preds = [self.post_pred(o) for o in decollate_batch(outputs)] if self.post_pred else outputs
                targets = [self.post_label(t) for t in decollate_batch(labels)] if self.post_label else labels
                self.metric(y_pred=preds, y=targets)
        value = self.metric.aggregate()
        if isinstance(value, list | tuple):
            value = value[0]
        self.metric.reset()
        return float(value.item() if hasattr(value, "item") else value), sample

    def run(self) -> dict[str, Any]:
        """Train to ``max_epochs`` (continuing from the newest checkpoint) and return the summary."""
        t_start = time.perf_counter()
        self.network.to(self.device)
        if self.seed is not None or self.deterministic:
            seed_everything(self.seed, self.deterministic)
        rng_after_skip, resumed_from = self._resume()
        self._wrap_distributed()
        if self._ckpt_dir is not None:
            self._timer = CheckpointTimer(job_end_time())  # None outside a job: no timed checkpoint
        metrics_path = self.output_dir / METRICS_FILE if self.output_dir and self.main else None
        if metrics_path is not None and resumed_from:
            truncate_after_step(metrics_path, self.step)

        metrics = MetricsLog(metrics_path, sinks=open_sinks(self))  # TensorBoard, MLflow: rank 0 only
        self._profiler = profiler.for_run(self.output_dir, self.main, cuda=self.device.type == "cuda")
        try:
            while self.epoch < self.max_epochs:
                epoch = self.epoch
                t_epoch = time.perf_counter()
                whole = self.batch_in_epoch == 0  # not the rest of an epoch a checkpoint was taken in
                mean_loss = self._train_epoch(epoch, metrics, rng_after_skip)
                rng_after_skip = None
                record: dict[str, Any] = {
                    "kind": "epoch", "step": self.step, "epoch": epoch, "loss": mean_loss,
                    "time_s": round(time.perf_counter() - t_epoch, 3),
                }
                if self._timer is not None and whole:
                    self._timer.epoch_took(record["time_s"])
                self.history["epoch_loss"].append(mean_loss)
                if (epoch + 1) % self.val_interval == 0 or epoch + 1 == self.max_epochs:
                    # every rank validates on the whole set: MONAI metrics all-gather across ranks, and
                    # gathering identical copies gives exactly the single-process value
                    value, sample = self._validate(epoch)
                    if sample is not None:  # each validation replaces it: the report shows the latest
                        write_val_sample(self.output_dir, sample)
                    if value is not None:
                        record[self.metric_name] = value
                        self.history["metrics"].append([epoch, value])
                        best = self.history["best_metric"]
                        if best is None or better(value, best, self.metric_mode):
                            self.history["best_metric"], self.history["best_epoch"] = value, epoch
                        metrics.write({"kind": "val", "step": self.step, "epoch": epoch, self.metric_name: value})
                        try:  # listeners (tune's pruner) see each value; Pruned ends the run after this record
                            validation_hooks.notify(epoch, self.metric_name, value)
                        except Pruned:
                            if epoch + 1 < self.max_epochs:
                                metrics.write(record)
                                self.epoch = epoch + 1  # a pruned trial's summary counts the epochs it trained
                                self._finish(time.perf_counter() - t_start, resumed_from, status="pruned")
                                raise
                            # the last epoch: stopping now saves nothing and would discard a finished result
                if self.lr_scheduler is not None and self.scheduler_interval == "epoch":
                    self.lr_scheduler.step()
                metrics.write(record)
                if self.main:
                    print(self._epoch_line(record), flush=True)
                self.epoch += 1
                self.batch_in_epoch = 0
                path = self.save()
                if all_ranks_agree(stop_requested() is not None, self._control) and self.epoch < self.max_epochs:
                    raise Preempted(stop_requested() or "a stop request on another rank", str(path) if path else None)
        finally:
            metrics.close()
            self._profiler.stop()
        return self._finish(time.perf_counter() - t_start, resumed_from)

    def _epoch_line(self, record: dict[str, Any]) -> str:
        text = f"epoch {record['epoch'] + 1}/{self.max_epochs}: loss {record['loss']:.4f}, {record['time_s']:.1f} s"
        if self.metric_name in record:
            text += f", {self.metric_name} {record[self.metric_name]:.4f}"
        return text

    def _finish(self, wall_s: float, resumed_from: str | None, status: str = "completed") -> dict[str, Any]:
        """Write summary.json (and, when completed, model.pt), print the closing lines; return the summary."""
        transforms = self._transform_times()
        report = bottleneck.analyse(
            self._data_s, self._compute_s, num_workers=getattr(self.train_loader, "num_workers", None),
            transforms=transforms, cpus=_cpu_budget(), device=str(self.device),
        )
        profiled = self._profiler.result()
        losses = self.history["epoch_loss"]
        metric_values = self.history["metrics"]
        summary: dict[str, Any] = {
            "status": status,
            "epochs": self.epoch,
            "steps": self.step,
            "wall_s": round(wall_s, 3),
            "steps_per_s": round(len(self._data_s) / wall_s, 3) if wall_s > 0 else None,
            "final_loss": losses[-1] if losses else None,
            "metric_name": self.metric_name if metric_values else None,
            "metric_mode": self.metric_mode,
            "final_metric": metric_values[-1][1] if metric_values else None,
            "best_metric": self.history["best_metric"],
            "best_epoch": (self.history["best_epoch"] + 1) if self.history["best_epoch"] is not None else None,
            "resumed_from": resumed_from,
            "gpu_transforms": self.gpu_transforms,
            "bottleneck": report.to_dict(),
            "transforms": transforms,
        }
        if profiled is not None:
            summary["profile"] = profiled.to_dict()
        if metric_values:
            summary[self.metric_name] = metric_values[-1][1]
        if self.output_dir is not None and self.main:
            write_text_atomic(self.output_dir / SUMMARY_FILE, dumps_json(summary, indent=2) + "\n")
            if status == "completed":  # a pruned trial's weights are not a result
                # CPU copies: a CUDA-tagged file would need map_location to load where there is no GPU
                weights = cpu_state_dict(self._model())
                save_atomic(self.output_dir / "model.pt", lambda f: torch.save(weights, f))
        if self.main:
            metric = ""
            if metric_values:
                metric = (
                    f"; {self.metric_name} {summary['final_metric']:.4f}"
                    f" (best {summary['best_metric']:.4f} at epoch {summary['best_epoch']})"
                )
            loss_text = f"{summary['final_loss']:.4f}" if summary["final_loss"] is not None else "n/a"
            verb = "trained" if status == "completed" else f"{status} after"
            print(
                f"hpc-runner: {verb} {self.epoch} epochs ({self.step} steps) in {wall_s:.1f} s, "
                f"{summary['steps_per_s'] or 0:.2f} steps/s; final loss {loss_text}{metric}",
                flush=True,
            )
            print(f"hpc-runner: {report.line()}", flush=True)
            if report.transforms_line():
                print(f"hpc-runner: {report.transforms_line()}", flush=True)
            if profiled is not None:
                _print_profile(profiled)
            for tip in report.advice:
                print(f"hpc-runner:   advice: {tip}", flush=True)
        return summary

    def _transform_times(self) -> list[dict[str, Any]]:
        """Return the per-transform times of this trainer's datasets (hpc_runner.data.transform_timing)."""
        return merged_rows(timers_in(self.train_loader, self.val_loader))


def agree_flags(flags: list[bool], group: Any = None) -> list[bool]:
    """Return each flag set if any rank set it: one all-reduce for all of them (the stop and the timed
    checkpoint each step), so every rank stops or saves after the same step."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return list(flags)
    t = torch.tensor([1 if f else 0 for f in flags], device=collective_device(group))  # NCCL: CUDA tensors only
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return [bool(x) for x in t.tolist()]


def _gather_rng(group: Any) -> list[dict[str, Any]]:
    """Return every rank's random states, in rank order (this process's alone when not distributed)."""
    dist = torch.distributed
    mine = capture_rng()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return [mine]
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, mine, group=group)  # CPU objects over the gloo (control) group
    return out


def _cpu_budget() -> int | None:
    with contextlib.suppress(Exception):  # advice only: a CPU count that cannot be read leaves it generic

        return available_cpus()
    return None


def _print_profile(result: profiler.ProfileResult) -> None:
    if result.trace is None:
        print(f"hpc-runner: profile: {result.note}", flush=True)
        return
    print(f"hpc-runner: profile of {result.steps} steps: trace {result.trace} (Perfetto/chrome://tracing, "
          f"TensorBoard); top operators by self time ({result.table}):", flush=True)
    print(result.table_text, flush=True)


def fit(trainer: Trainer) -> dict[str, Any]:
    """Run ``trainer`` and return its summary: a declarative entry (``_target_: hpc_runner.engine.fit``)."""
    return trainer.run()
