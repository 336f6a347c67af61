"""Where the time went: waiting for data versus computing, the slowest transforms, and what to change."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

DATA_BOUND = 0.20  # above this fraction of time waiting, the loader is the bottleneck
BALANCED = 0.05
SLOWEST = 3  # transforms named in the report
NOTABLE_SHARE = 0.10  # a transform below this share of all transform time gets no advice of its own
COSTLY_SHARE = 0.25  # a random transform taking this much of the steps' time costs even when hidden by prefetch
# transforms that resample (interpolate) the whole volume: the costly ones in 3D, per the JADE talk
RESAMPLING = frozenset(
    {
        "Spacing", "Spacingd", "Orientation", "Orientationd", "Resize", "Resized", "Zoom", "Zoomd", "Rotate",
        "Rotated", "Affine", "Affined", "Resample", "ResampleToMatch", "ResampleToMatchd", "SpatialResample",
        "SpatialResampled", "RandAffine", "RandAffined", "RandZoom", "RandZoomd", "RandRotate", "RandRotated",
        "Rand2DElastic", "Rand2DElasticd", "Rand3DElastic", "Rand3DElasticd",
    }
)
# stage and kind as hpc_runner.data.transform_timing writes them (not imported: that module imports MONAI)
CACHED, EVERY_EPOCH = "cached", "every epoch"
RANDOM, DETERMINISTIC, CALLABLE = "random", "deterministic", "callable"
# the transforms that read files (their time, a read slot's wait included, is the data wait's reading part);
# hpc_runner.data.reads.is_reader says which run through the read slots
READERS = frozenset({"LoadImage", "LoadImaged", "LoadImageD", "LoadImageDict"})


def is_reading(name: str) -> bool:
    """Whether a transform row (by name) reads files: LoadImage(d) and the other ``Load*`` transforms."""
    base = str(name).split(" #", 1)[0]
    return base in READERS or base.startswith("Load")


def wait_split(wait_s: float, rows: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """Split ``wait_s`` (the steps' data wait) into (reading, transforming) seconds by the share of the file loads in
    the transforms' time: of the every-epoch transforms (those that run while the steps wait), or of all of them when
    none runs every epoch. None when no transform was timed. The two parts sum to ``wait_s``."""
    timed = [r for r in rows if float(r.get("total_s") or 0.0) > 0]
    epoch = [r for r in timed if r.get("stage") == EVERY_EPOCH]
    use = epoch or timed
    total = sum(float(r["total_s"]) for r in use)
    if total <= 0:
        return None
    reading = wait_s * sum(float(r["total_s"]) for r in use if is_reading(str(r.get("name")))) / total
    return reading, wait_s - reading


@dataclass
class BottleneckReport:
    """Summary of per-iteration data-wait and compute times, and of the slowest transforms."""

    iterations: int
    data_wait_s: float
    compute_s: float
    first_batch_s: float
    wait_fraction: float
    verdict: str
    advice: list[str]
    slowest_transforms: list[dict[str, Any]] = field(default_factory=list)
    data_read_s: float | None = None  # the data wait's reading part (file loads), by the transforms' timings
    data_transform_s: float | None = None  # and its transforming part: the two sum to data_wait_s

    def line(self) -> str:
        """Return the one-line report printed at the end of a run."""
        split = (f": {self.data_read_s:.2f} s reading, {self.data_transform_s:.2f} s transforming"
                 if self.data_read_s is not None and self.data_transform_s is not None else "")
        return (
            f"data wait {self.wait_fraction:.1%} of step time ({self.data_wait_s:.2f} s waiting{split}, "
            f"{self.compute_s:.2f} s computing, first batch {self.first_batch_s * 1000:.0f} ms): {self.verdict}"
        )

    def transforms_line(self) -> str | None:
        """Return the line naming the slowest transforms (None when no transform was timed)."""
        if not self.slowest_transforms:
            return None
        parts = [
            f"{r['name']} {r['total_s']:.2f} s ({r['stage']}, {r['calls']} calls, {r['mean_ms']:.1f} ms each)"
            for r in self.slowest_transforms
        ]
        return "slowest transforms: " + "; ".join(parts)

    def to_dict(self) -> dict:
        """Return a JSON-ready dict."""
        return asdict(self)


def analyse(
    data_s: Sequence[float],
    compute_s: Sequence[float],
    *,
    num_workers: int | None = None,
    cached: bool | None = None,
    transforms: Sequence[dict[str, Any]] | None = None,
    cpus: int | None = None,
    device: str | None = None,
) -> BottleneckReport:
    """Return the bottleneck report; the first iteration (pipeline fill) is reported apart.

    ``transforms`` are the rows of summary.json's ``transforms`` (hpc_runner.data.transform_timing);
    ``cpus`` is the job's CPU budget, for advice on worker counts; ``device`` the rank's training
    device (``cuda:1``), named in the advice to move a transform to the GPU.
    """
    first = data_s[0] if data_s else 0.0
    wait = sum(data_s[1:])
    compute = sum(compute_s[1:])
    total = wait + compute
    fraction = wait / total if total > 0 else 0.0
    rows = list(transforms or [])
    advice: list[str] = []
    if fraction >= DATA_BOUND:
        verdict = "data-bound: the step waits for batches"
        advice.append(_worker_advice(num_workers, cpus, rows))
        if cached is False:
            advice.append("cache the deterministic transforms (CacheDataset / hpc-runner cache)")
        advice.append("use repeats=N in ThreadDataLoader to reuse each batch when loading is the limit")
        if not rows:
            advice.append("move expensive random transforms to the GPU (e.g. MONAI's GPU-capable transforms)")
    elif fraction >= BALANCED:
        verdict = "balanced: some waiting for data"
        advice.append("a larger buffer_size or one more worker may hide the remaining wait")
    else:
        verdict = "compute-bound: data is ready before the step needs it"
    slowest = slowest_transforms(rows)
    advice += transform_advice(slowest, rows, wait_fraction=fraction, step_time_s=total + first, device=device)
    split = wait_split(wait, rows)
    return BottleneckReport(len(data_s), wait, compute, first, fraction, verdict, advice, slowest,
                            *(split if split else (None, None)))


def slowest_transforms(rows: Sequence[dict[str, Any]], count: int = SLOWEST) -> list[dict[str, Any]]:
    """Return the ``count`` transforms with the largest total time, each with its ``share`` of all transform time."""
    everything = sum(float(r.get("total_s") or 0.0) for r in rows)
    top = sorted(rows, key=lambda r: -float(r.get("total_s") or 0.0))[:count]
    return [{**r, "share": round(float(r.get("total_s") or 0.0) / everything, 4) if everything else 0.0} for r in top]


def _base_name(name: str) -> str:
    return str(name).split(" #", 1)[0]


def _cost(row: dict[str, Any]) -> str:
    return f"{row['calls']} calls, {row['total_s']:.2f} s, {row['mean_ms']:.1f} ms each"


def transform_advice(
    slowest: Sequence[dict[str, Any]],
    rows: Sequence[dict[str, Any]],
    *,
    wait_fraction: float,
    step_time_s: float,
    device: str | None = None,
) -> list[str]:
    """Return advice about the slowest transforms: what runs every epoch that need not, and what to make cheaper.

    A deterministic transform that runs every epoch belongs before the cache; resampling (Spacingd,
    Orientationd, Resized...) most of all. A costly random transform is made cheaper or moved to the GPU
    when the step waits for data or the transform's time is a real part of the run.
    """
    advice: list[str] = []
    to_gpu = gpu_transform_advice(device)
    for row in slowest:
        if float(row.get("share") or 0.0) < NOTABLE_SHARE or not row.get("calls"):
            continue
        name, stage, kind = str(row["name"]), row.get("stage"), row.get("kind")
        resamples = _base_name(name) in RESAMPLING
        # on the critical path when the step waits for data; else it only competes for CPUs, which
        # matters once it takes a good part of the steps' time
        costly = wait_fraction >= BALANCED or (step_time_s > 0 and float(row["total_s"]) >= COSTLY_SHARE * step_time_s)
        if stage != EVERY_EPOCH:
            continue  # cached: paid once per item
        if kind == DETERMINISTIC and resamples:
            advice.append(
                f"{name} resamples every epoch ({_cost(row)}) although it is deterministic: resample once before "
                "the cache (put it before the first random transform, so the cached volumes are already resampled)"
            )
        elif kind == DETERMINISTIC:
            advice.append(
                f"{name} is deterministic but runs every epoch ({_cost(row)}): move it before the first random "
                "transform, so the cache covers it"
            )
        elif kind == CALLABLE:
            advice.append(
                f"{name} is not a MONAI Transform, so the cache stops before it and it runs every epoch "
                f"({_cost(row)}): if it is deterministic, make it a MONAI (Map)Transform and put it before the "
                "random ones"
            )
        elif resamples and costly:
            advice.append(
                f"{name} is an expensive random resampling ({_cost(row)}): resample the volumes once to the "
                "target spacing and size before the cache (Spacingd/Resized) so it works on less data, and run it "
                f"on the GPU ({to_gpu})"
            )
        elif costly:
            advice.append(
                f"{name} is the costliest random transform ({_cost(row)}): make it cheaper (smaller crops, a lower "
                f"prob) or move it to the GPU ({to_gpu})"
            )
    return advice


def gpu_transform_advice(device: str | None) -> str:
    """Return how to move a random transform to this rank's GPU, naming its index.

    A bare ``cuda`` is GPU 0 in a loader thread (a new thread starts on device 0, whatever the
    training thread set) and cannot start at all in a forked worker process.
    """
    gpu = device if device and device.startswith("cuda:") else "cuda:<this rank's GPU>"
    return (f"EnsureTyped(device=\"{gpu}\") before it, in a loader whose workers are threads "
            "(ThreadDataLoader, use_thread_workers: true): forked worker processes cannot start CUDA, and a "
            "bare \"cuda\" is GPU 0 for every rank")


def _worker_advice(num_workers: int | None, cpus: int | None, rows: Sequence[dict[str, Any]]) -> str:
    """Return the advice on data workers when the step waits for data, within the job's CPU budget."""
    threads = sorted({t for r in rows if r.get("stage") == EVERY_EPOCH for t in r.get("threads") or []})
    where = f" (the every-epoch transforms ran on {', '.join(threads)})" if threads else ""
    if cpus is not None and cpus >= 2:
        target = cpus - 1  # one CPU stays with the training loop
        if num_workers is not None and num_workers >= target:
            return (
                f"num_workers is {num_workers} with {cpus} CPUs for this job{where}: ask for more CPUs "
                "(--cpus / the profile's cpus_per_task) or make the every-epoch transforms cheaper"
            )
        return (
            f"raise the loader's num_workers to {target} with use_thread_workers: true (this job has {cpus} CPUs; "
            f"one stays with the training loop){where}"
        )
    if num_workers is not None and num_workers < 2:
        return f"raise the loader's num_workers (threads) so batches are prepared in parallel{where}"
    return f"raise num_workers, or buffer_size so more batches are prepared ahead{where}"
