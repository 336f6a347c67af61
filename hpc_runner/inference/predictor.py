"""Inference and evaluation over many volumes: the loop, with writing overlapped and resumable.

The loop reads top to bottom (``Predictor.run``): for each batch, cases this shard's manifest already
holds complete are skipped (a resumed or requeued shard redoes nothing); the others go through the
inferer under ``torch.inference_mode`` and the post-processing, and their label maps go to the
background :class:`~hpc_runner.inference.writer.ResultWriter`, which encodes and writes them while the
next volume is inferred. The run ends only after every write is done (``writer.close()``); only then are
``cases.csv`` and ``summary.json`` written, from the manifest, so they list every case of the shard.
"""

from __future__ import annotations

import csv
import io
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hpc_runner.engine.stop import Preempted, stop_requested
from hpc_runner.errors import ConfigError
from hpc_runner.heap import settle_after_imports
from hpc_runner.inference.case_metrics import METRICS, case_metrics, summarize
from hpc_runner.inference.manifest import ManifestEntry, OutputManifest
from hpc_runner.inference.weights import load_weights
from hpc_runner.inference.writer import ResultWriter
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.json_out import dumps_json
from hpc_runner.resources.threads import use_cpu_budget

log = logging.getLogger(__name__)
SUMMARY_FILE = "summary.json"
CASES_FILE = "cases.csv"
PROGRESS_EVERY_S = 30.0


def argmax_labels(logits: torch.Tensor) -> torch.Tensor:
    """Return the label map (1, *spatial) of one case's logits (C, *spatial).

    This is softmax followed by argmax: softmax keeps the order of the channels, so it is left out and
    the labels are exactly those of ``argmax(softmax(x))`` without its rounding.
    """
    return torch.argmax(logits, dim=0, keepdim=True)


def manifest_name(shard_index: int, num_shards: int) -> str:
    """Return the manifest file of a shard: one file per shard, as shards may run on different nodes."""
    return f"manifest-{int(shard_index):03d}-of-{int(num_shards):03d}.jsonl"


def _affine(image: Any, batch: dict[str, Any], key: str, b: int) -> np.ndarray:
    """The affine of item ``b``: the MetaTensor's (from LoadImaged), else the meta dict's."""
    affine = getattr(image, "affine", None)
    if affine is None:
        meta = batch.get(f"{key}_meta_dict") or {}
        affine = meta.get("affine")
    if affine is None:
        raise ValueError(f"batch item '{key}' carries no affine: load it with LoadImaged and keep its metadata "
                         "(EnsureTyped track_meta true, the default)")
    affine = torch.as_tensor(affine)
    if affine.ndim == 3:
        affine = affine[b]
    return affine.detach().cpu().numpy().astype(np.float64)


class Predictor:
    """Run a network over a loader of volumes, write one label map per case, optionally score each case.

    ``label_key`` set: evaluation (per-case Dice and 95% Hausdorff, background excluded, kept in the
    manifest). ``output_dir`` (the run dir) receives ``cases.csv`` and ``summary.json``. Outputs are
    ``<predictions_dir>/<case>_<output_postfix>.nii.gz``; this shard's manifest is
    ``manifest-<shard>-of-<shards>.jsonl`` beside them.
    """

    def __init__(
        self,
        network: torch.nn.Module,
        loader: Iterable[dict[str, Any]],
        predictions_dir: str | Path,
        ckpt: str | Path | None = None,
        inferer: Callable[..., torch.Tensor] | None = None,
        device: str | torch.device | None = None,
        postprocessing: Callable[[torch.Tensor], torch.Tensor] | None = None,
        output_postfix: str = "seg",
        output_dtype: str = "uint8",
        compress_level: int = 1,
        writer_threads: int | None = None,
        queue_size: int = 4,
        write_predictions: bool = True,
        image_key: str = "image",
        label_key: str | None = None,
        metrics: Sequence[str] = METRICS,
        shard_index: int = 0,
        num_shards: int = 1,
        output_dir: str | Path | None = None,
    ) -> None:
        self.network = network
        self.loader = loader
        self.predictions_dir = Path(predictions_dir)
        self.ckpt = ckpt
        self.inferer = inferer
        self.device = torch.device(device) if device else torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.postprocessing = postprocessing or argmax_labels
        self.output_postfix = output_postfix
        self.output_dtype = np.dtype(output_dtype)
        self.compress_level = int(compress_level)
        self.writer_threads = writer_threads
        self.queue_size = int(queue_size)
        self.write_predictions = bool(write_predictions)
        self.image_key = image_key
        self.label_key = label_key
        self.metrics = tuple(metrics)
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metric(s) {unknown}; known: {', '.join(METRICS)}")
        self.shard_index = int(shard_index)
        self.num_shards = int(num_shards)
        self.output_dir = Path(output_dir) if output_dir else None

    def output_name(self, case: str) -> str:
        """Return the output file name of ``case``."""
        ext = ".nii.gz" if self.compress_level > 0 else ".nii"  # encode_nifti gzips only when level > 0
        return f"{case}_{self.output_postfix}{ext}" if self.output_postfix else f"{case}{ext}"

    def _is_done(self, manifest: OutputManifest, case: str) -> bool:
        entry = manifest.completed(case)
        if entry is None:
            return False
        if self.write_predictions and entry.file is None:
            return False  # scored before without a prediction file: this run must write it
        # an evaluation over predictions an inference run wrote still has to score them
        return self.label_key is None or all(m in entry.metrics for m in self.metrics)

    def _predict(self, image: torch.Tensor) -> torch.Tensor:
        image = image.to(self.device)
        return self.inferer(image, self.network) if self.inferer is not None else self.network(image)

    def run(self) -> dict[str, Any]:
        """Infer (and score) every case of the shard not yet done; return the summary."""
        settle_after_imports()  # hpc_runner/heap.py: imports done, the network built: the loop collects as usual
        cpus = use_cpu_budget()  # torch threads = the job's CPUs, as for training (also under MONAI's runner)
        t0 = time.perf_counter()
        weights = load_weights(self.network, self.ckpt, map_location=self.device) if self.ckpt else None
        if weights is None:
            log.warning("no ckpt given: the network runs with the weights it was built with")
        self.network.to(self.device).eval()
        self.predictions_dir.mkdir(parents=True, exist_ok=True)
        manifest = OutputManifest(self.predictions_dir, name=manifest_name(self.shard_index, self.num_shards))
        what = "evaluation" if self.label_key else "inference"
        part = f" of shard_index {self.shard_index} (of {self.num_shards})" if self.num_shards > 1 else ""
        print(f"hpc-runner: {what}{part} with weights {weights}, "
              f"{cpus.get('torch_threads', '?')} torch threads; outputs in {self.predictions_dir}", flush=True)
        cases: list[str] = []
        skipped = processed = 0
        empty: list[str] = []
        last_report = time.perf_counter()
        writer = ResultWriter(self.predictions_dir, manifest, compress_level=self.compress_level,
                              threads=self.writer_threads, queue_size=self.queue_size)
        with writer:
            for batch in self.loader:
                names = [str(c) for c in batch["case"]]
                cases.extend(names)
                todo = [b for b, case in enumerate(names) if not self._is_done(manifest, case)]
                skipped += len(names) - len(todo)
                if not todo:
                    continue
                image = batch[self.image_key]
                with torch.inference_mode():
                    logits = self._predict(image)
                for b in todo:
                    # one copy to the host: scored there (see case_metrics) and written from there
                    labels = self.postprocessing(logits[b]).detach().cpu()
                    scores: dict[str, float | None] = {}
                    if self.label_key:
                        truth = torch.as_tensor(batch[self.label_key][b]).cpu()
                        scores = case_metrics(labels[None], truth[None], int(logits.shape[1]), self.metrics, names[b])
                        if any(v is None for v in scores.values()):
                            empty.append(names[b])
                    if self.write_predictions:
                        array = labels[0].numpy().astype(self.output_dtype)
                        writer.submit(names[b], self.output_name(names[b]), array,
                                      _affine(image, batch, self.image_key, b), metrics=scores)
                    else:
                        writer.record_only(names[b], scores)
                    processed += 1
                if time.perf_counter() - last_report > PROGRESS_EVERY_S:
                    last_report = time.perf_counter()
                    print(f"hpc-runner: {processed} volumes done, {skipped} skipped", flush=True)
                if stop_requested():
                    break  # SIGUSR2/SIGTERM (time limit, preemption): finish the writes, then requeue
        if (reason := stop_requested()) is not None:
            # the writer closed, so every finished case is in the manifest: the requeued job skips them
            print(f"hpc-runner: stopping after {processed} volumes ({reason}); finished cases are in "
                  f"{manifest.path}", flush=True)
            raise Preempted(reason, str(manifest.path))
        seconds = time.perf_counter() - t0
        return self._finish(cases, processed, skipped, empty, seconds, writer, weights, cpus)

    def _finish(self, cases: list[str], processed: int, skipped: int, empty: list[str], seconds: float,
                writer: ResultWriter, weights: Path | None, cpus: dict[str, Any]) -> dict[str, Any]:
        entries = OutputManifest.read_all(self.predictions_dir)
        missing = [c for c in cases if c not in entries]
        if missing:  # the writer closed without error, so every case must have its line
            raise RuntimeError(f"{len(missing)} case(s) have no manifest entry in {self.predictions_dir}: "
                               f"{', '.join(missing[:5])}")
        rows = [_row(entries[c]) for c in sorted(cases)]
        names = sorted({k for r in rows for k in r} - {"case", "file", "size", "sha256"},
                       key=lambda k: (k.split("_")[0] not in self.metrics, k))
        summary: dict[str, Any] = {
            "kind": "evaluation" if self.label_key else "inference",
            "status": "completed",
            "count": len(cases),
            "written": writer.written,
            "processed": processed,
            "skipped": skipped,
            "seconds": round(seconds, 3),
            "volumes_per_s": round(processed / seconds, 3) if seconds > 0 and processed else None,
            "writer": {"busy_s": round(writer.busy_s, 3), "wait_s": round(writer.wait_s, 3), "bytes": writer.bytes},
            "shard_index": self.shard_index,
            "num_shards": self.num_shards,
            "predictions_dir": str(self.predictions_dir),
            "manifest": manifest_name(self.shard_index, self.num_shards),
            "weights": str(weights) if weights else None,
            "torch_threads": cpus.get("torch_threads"),
        }
        if self.label_key:
            summary["metrics"] = summarize(rows, names)
            summary["cases_without_value"] = sorted(c for c in cases if any(entries[c].metrics.get(m) is None
                                                                                 for m in self.metrics))
        if empty:
            log.warning("%d case(s) have an empty class (no value for Dice/HD95, recorded as None): %s",
                        len(empty), ", ".join(empty[:10]))
            print(f"hpc-runner: {len(empty)} case(s) have a class that is empty in the label or the prediction; "
                  f"their metric is None (left out of means): {', '.join(empty[:10])}", flush=True)
        if self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.output_dir / CASES_FILE, _csv(rows, ["case", "file", "size", "sha256", *names]))
            write_text_atomic(self.output_dir / SUMMARY_FILE, dumps_json(summary, indent=2) + "\n")
        line = (f"hpc-runner: {summary['kind']} of {len(cases)} case(s): {processed} inferred, {writer.written} "
                f"written, {skipped} skipped as already complete, {seconds:.1f} s")
        if summary["volumes_per_s"]:
            line += f", {summary['volumes_per_s']:.2f} volumes/s"
        line += f"; writer busy {writer.busy_s:.1f} s, loop waited {writer.wait_s:.1f} s for it"
        print(line, flush=True)
        for name in names if self.label_key else ():
            stats = summary["metrics"][name]
            if stats["mean"] is not None:
                print(f"hpc-runner:   {name}: mean {stats['mean']:.4f}, median {stats['median']:.4f}"
                      + (f", {stats['missing']} case(s) without a value" if stats["missing"] else ""), flush=True)
        return summary


def _row(entry: ManifestEntry) -> dict[str, Any]:
    return {"case": entry.case, "file": entry.file, "size": entry.size, "sha256": entry.sha256, **entry.metrics}


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> str:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in columns})
    return out.getvalue()


def infer(predictor: Predictor) -> dict[str, Any]:
    """Run inference and return the summary: a declarative entry (``_target_: hpc_runner.inference.infer``)."""
    return predictor.run()


def evaluate(predictor: Predictor) -> dict[str, Any]:
    """Run evaluation (``label_key`` must be set) and return the summary with per-metric means."""
    if not predictor.label_key:
        raise ConfigError("evaluation needs labels, but the predictor has no label_key", id_path="predictor",
                          expected="label_key: label (and `labels` or a datalist holding labels)")
    return predictor.run()
