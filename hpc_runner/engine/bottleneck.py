"""Where the time went: waiting for data versus computing, with advice on what to change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

DATA_BOUND = 0.20  # above this fraction of time waiting, the loader is the bottleneck
BALANCED = 0.05


@dataclass
class BottleneckReport:
    """Summary of per-iteration data-wait and compute times."""

    iterations: int
    data_wait_s: float
    compute_s: float
    first_batch_s: float
    wait_fraction: float
    verdict: str
    advice: list[str]

    def line(self) -> str:
        """Return the one-line report printed at the end of a run."""
        return (
            f"data wait {self.wait_fraction:.1%} of step time ({self.data_wait_s:.2f} s waiting, "
            f"{self.compute_s:.2f} s computing, first batch {self.first_batch_s * 1000:.0f} ms): {self.verdict}"
        )

    def to_dict(self) -> dict:
        """Return a JSON-ready dict."""
        return asdict(self)


def analyse(data_s: Sequence[float], compute_s: Sequence[float], *, num_workers: int | None = None,
            cached: bool | None = None) -> BottleneckReport:
    """Return the bottleneck report; the first iteration (pipeline fill) is reported apart."""
    first = data_s[0] if data_s else 0.0
    wait = sum(data_s[1:])
    compute = sum(compute_s[1:])
    total = wait + compute
    fraction = wait / total if total > 0 else 0.0
    advice: list[str] = []
    if fraction >= DATA_BOUND:
        verdict = "data-bound: the step waits for batches"
        if num_workers is not None and num_workers < 2:
            advice.append("raise the loader's num_workers (threads) so batches are prepared in parallel")
        else:
            advice.append("raise num_workers, or buffer_size so more batches are prepared ahead")
        if cached is False:
            advice.append("cache the deterministic transforms (CacheDataset / hpc-runner cache)")
        advice.append("use repeats=N in ThreadDataLoader to reuse each batch when loading is the limit")
        advice.append("move expensive random transforms to the GPU (e.g. MONAI's GPU-capable transforms)")
    elif fraction >= BALANCED:
        verdict = "balanced: some waiting for data"
        advice.append("a larger buffer_size or one more worker may hide the remaining wait")
    else:
        verdict = "compute-bound: data is ready before the step needs it"
    return BottleneckReport(len(data_s), wait, compute, first, fraction, verdict, advice)
