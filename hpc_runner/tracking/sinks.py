"""What the Trainer's records become in TensorBoard and MLflow (``MetricsLog`` hands every record over).

Per step: ``train/loss``, ``train/lr``, ``time/data_s``, ``time/compute_s``, ``time/steps_per_s``; per
validation: ``val/<metric_name>``; per epoch: ``epoch/loss``, ``epoch/time_s``, ``epoch/steps_per_s``.
Rank 0 only. The resolved hyperparameters go to MLflow as ``hp/...`` params when its run is new.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hpc_runner.tracking.session import current_run
from hpc_runner.tracking.tensorboard import open_writer

_SKIP = ("kind", "step", "epoch", "batch")


def record_scalars(record: dict[str, Any], epoch_first_step: int | None) -> dict[str, float]:
    """Return the scalars to log for one metrics.jsonl record."""
    kind, out = record.get("kind"), {}
    if kind == "iter":
        out = {"train/loss": record.get("loss"), "train/lr": record.get("lr"),
               "time/data_s": record.get("data_s"), "time/compute_s": record.get("compute_s")}
        step_s = (record.get("data_s") or 0.0) + (record.get("compute_s") or 0.0)
        if step_s > 0:
            out["time/steps_per_s"] = 1.0 / step_s
    elif kind == "val":
        out = {f"val/{k}": v for k, v in record.items() if k not in _SKIP}
    elif kind == "epoch":
        out = {"epoch/loss": record.get("loss"), "epoch/time_s": record.get("time_s")}
        steps = record["step"] - epoch_first_step + 1 if epoch_first_step is not None else None
        if steps and record.get("time_s"):
            out["epoch/steps_per_s"] = steps / record["time_s"]
    return {k: float(v) for k, v in out.items() if isinstance(v, int | float) and not isinstance(v, bool)}


class TrainerSink:
    """Send the Trainer's records to a SummaryWriter and/or an MlflowRun."""

    def __init__(self, writer: Any, mlflow_run: Any) -> None:
        self.writer, self.mlflow_run = writer, mlflow_run
        self._first_step: int | None = None

    def write(self, record: dict[str, Any]) -> None:
        """Log one record."""
        if record.get("kind") == "iter" and self._first_step is None:
            self._first_step = record["step"]
        scalars = record_scalars(record, self._first_step)
        if record.get("kind") == "epoch":
            self._first_step = None
        step = int(record.get("step", 0))
        if self.writer is not None:
            for key, value in scalars.items():
                self.writer.add_scalar(key, value, step)
        if self.mlflow_run is not None and scalars:
            self.mlflow_run.log_metrics(scalars, step)

    def close(self) -> None:
        """Flush the event file (the MLflow run is closed by the runner, after the artefacts)."""
        if self.writer is not None:
            self.writer.close()


def trainer_params(trainer: Any) -> dict[str, Any]:
    """Return the Trainer's resolved hyperparameters as ``hp/...`` params."""
    params: dict[str, Any] = {
        "hp/max_epochs": trainer.max_epochs, "hp/amp": trainer.amp, "hp/seed": trainer.seed,
        "hp/val_interval": trainer.val_interval, "hp/grad_clip_norm": trainer.grad_clip_norm,
        "hp/device": str(trainer.device), "hp/metric_name": trainer.metric_name,
        "hp/optimizer": type(trainer.optimizer).__name__,
        "hp/loss": type(trainer.loss_function).__name__,
        "hp/network": type(trainer._model()).__name__,
        "hp/network_parameters": sum(p.numel() for p in trainer._model().parameters()),
    }
    groups = getattr(trainer.optimizer, "param_groups", None) or [{}]
    for key, value in groups[0].items():
        if key in ("params", "initial_lr") or not isinstance(value, int | float | str | bool | tuple | type(None)):
            continue
        params[f"hp/optimizer.{key}"] = groups[0].get("initial_lr", value) if key == "lr" else value
    if trainer.lr_scheduler is not None:
        params["hp/lr_scheduler"] = type(trainer.lr_scheduler).__name__
    loader = trainer.train_loader
    for key in ("batch_size", "num_workers"):
        if getattr(loader, key, None) is not None:
            params[f"hp/{key}"] = getattr(loader, key)
    with contextlib.suppress(AttributeError, TypeError):
        params["hp/train_items"] = len(loader.dataset)  # type: ignore[attr-defined]
    return {k: v for k, v in params.items() if v is not None}


def open_sinks(trainer: Any) -> list[TrainerSink]:
    """Return the sinks of this Trainer's run: TensorBoard and the runner's MLflow run (rank 0, with a run dir)."""
    if not trainer.main or trainer.output_dir is None:
        return []

    writer = open_writer(trainer.output_dir, purge_step=trainer.step)
    run = current_run()
    if run is not None and not run.resumed:
        try:
            run.log_params(trainer_params(trainer))
        except Exception as exc:  # a param that cannot be read must not stop training
            print(f"hpc-runner: MLflow: hyperparameters not logged ({type(exc).__name__}: {exc})", flush=True)
    if writer is None and run is None:
        return []
    return [TrainerSink(writer, run)]
