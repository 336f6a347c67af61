"""torch.profiler over a few training steps after warm-up: a trace for Perfetto/Chrome and TensorBoard, and the top ops.

``hpc-runner run --profile`` sets ``HPCR_PROFILE`` to the number of steps to record (a job submitted
from a shell where it is set inherits it). The Trainer then skips ``WAIT`` steps (the first one fills the
data pipeline), warms the profiler up for ``WARMUP`` steps, records the next N and writes, in the run
dir's ``profile/`` folder:

* ``rank0.pt.trace.json``: a Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing); the
  ``*.pt.trace.json`` name is what TensorBoard's profile plugin reads (``tensorboard --logdir RUN_DIR``);
* ``top_ops.txt``: the operators sorted by self time (torch's ``key_averages().table``), also printed at
  the end of the run; summary.json's ``profile`` has the top ones. Both rank by self *device* time on a
  GPU run (a CUDA op's CPU time is its launch only) and by self CPU time otherwise.

A run that ends before the recorded steps are over writes what it recorded; one that ends during the
wait or the warm-up writes nothing and says so.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.records.atomic import write_text_atomic

ENV = "HPCR_PROFILE"
PROFILE_DIR = "profile"
TABLE_FILE = "top_ops.txt"
DEFAULT_STEPS = 3
WAIT = 1  # the first step waits for the pipeline to fill: not representative
WARMUP = 1  # the profiler's own start-up cost lands here, not in the recorded steps
TOP_OPS = 10
TABLE_ROWS = 25


def requested_steps(environ: dict[str, str] | None = None) -> int:
    """Return the number of steps to profile that ``HPCR_PROFILE`` asks for (0: no profiling)."""
    text = (os.environ if environ is None else environ).get(ENV, "").strip()
    if text.lower() in ("", "0", "no", "false", "off"):
        return 0
    try:
        steps = int(text)
    except ValueError:
        raise UserError(f"{ENV}={text!r} is not a number of steps", expected="a positive integer, e.g. 3") from None
    if steps < 0:
        raise UserError(f"{ENV}={text!r} is negative", expected="a positive integer, e.g. 3")
    return steps


@dataclass
class ProfileResult:
    """What the profiler wrote: the trace, the table, the steps recorded and the top operators by self time."""

    trace: str | None = None
    table: str | None = None
    steps: int = 0
    top_ops: list[dict[str, Any]] = field(default_factory=list)
    note: str | None = None
    table_text: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict (without the table's text, which is in its file)."""
        out = asdict(self)
        out.pop("table_text")
        return out


class NoProfiler:
    """What the Trainer holds when no profile was asked for: every call does nothing."""

    def step(self) -> None:
        """Do nothing."""

    def stop(self) -> None:
        """Do nothing."""

    def result(self) -> ProfileResult | None:
        """Return None: nothing was profiled."""
        return None


class StepProfiler:
    """torch.profiler with a wait/warmup/active schedule over training steps; call `step` after each step."""

    def __init__(self, folder: Path, active: int, *, wait: int = WAIT, warmup: int = WARMUP, rank: int = 0,
                 cuda: bool = False) -> None:
        import torch

        self.folder = Path(folder)
        self.active = max(1, int(active))
        self.rank = rank
        self.cuda = cuda
        self._steps_done = 0
        self._result: ProfileResult | None = None
        activities = [torch.profiler.ProfilerActivity.CPU]
        if cuda:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._first_recorded = wait + warmup
        self._prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=wait, warmup=warmup, active=self.active, repeat=1),
            on_trace_ready=self._write,
            record_shapes=True,  # the table and the trace show input shapes: which conv is slow
        )
        self._prof.start()
        self._running = True

    def step(self) -> None:
        """Mark the end of one training step."""
        if self._running:
            self._steps_done += 1
            self._prof.step()
            if self._result is not None:  # recorded and written: nothing more to do
                self.stop()

    def stop(self) -> None:
        """Stop profiling; a window cut short by the end of training is written as it is."""
        if not self._running:
            return
        self._running = False
        self._prof.stop()
        if self._result is None:
            self._result = ProfileResult(
                steps=0,
                note=(f"the run ended after {self._steps_done} steps, before the profiler's wait and warm-up "
                      f"({self._first_recorded} steps) were over: nothing recorded"),
            )

    def result(self) -> ProfileResult | None:
        """Return what was written (after `stop`)."""
        return self._result

    def _write(self, prof: Any) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        trace = self.folder / f"rank{self.rank}.pt.trace.json"
        tmp = trace.with_name(f".{trace.name}.tmp")
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, trace)  # atomic: a reader never sees half a trace
        averages = prof.key_averages()
        sort_by = "self_device_time_total" if self.cuda else "self_cpu_time_total"
        text = averages.table(sort_by=sort_by, row_limit=TABLE_ROWS)
        recorded = min(self.active, max(0, self._steps_done - self._first_recorded))
        header = (f"top operators by self time over {recorded or 'the last'} profiled training steps "
                  f"(steps {self._first_recorded + 1}..{self._first_recorded + self.active})\n")
        table = write_text_atomic(self.folder / TABLE_FILE, header + text + "\n")
        self._result = ProfileResult(str(trace), str(table), recorded,
                                     top_operators(averages, device=self.cuda), None, text)


def top_operators(averages: Any, count: int = TOP_OPS, device: bool = False) -> list[dict[str, Any]]:
    """Return the ``count`` operators with the largest self time (ProfilerStep ranges left out).

    On a GPU run (``device``) they rank by self device time, as ``top_ops.txt`` does, and carry their
    device times too; the CPU time of a CUDA op is only its launch.
    """
    events = [e for e in averages if not str(e.key).startswith("ProfilerStep")]
    key = "self_device_time_total" if device else "self_cpu_time_total"
    events.sort(key=lambda e: -float(getattr(e, key, 0.0) or 0.0))
    out = []
    for e in events[:count]:
        row = {
            "name": str(e.key),
            "calls": int(e.count),
            "self_cpu_ms": round(float(e.self_cpu_time_total) / 1000.0, 3),
            "cpu_total_ms": round(float(e.cpu_time_total) / 1000.0, 3),
        }
        if device:
            row["self_device_ms"] = round(float(e.self_device_time_total) / 1000.0, 3)
            row["device_total_ms"] = round(float(e.device_time_total) / 1000.0, 3)
        out.append(row)
    return out


def for_run(output_dir: Path | None, main: bool, cuda: bool = False) -> StepProfiler | NoProfiler:
    """Return the profiler of a training run: a StepProfiler on rank 0 when HPCR_PROFILE asks for one."""
    steps = requested_steps()
    if not steps or not main or output_dir is None:
        return NoProfiler()
    return StepProfiler(Path(output_dir) / PROFILE_DIR, steps, cuda=cuda)
