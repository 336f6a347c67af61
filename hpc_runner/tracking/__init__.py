"""Experiment tracking: TensorBoard event files and MLflow runs for a run dir (docs/tracking.md).

Nothing here is imported by ``hpc-runner --help``; mlflow and tensorboard load only when a run uses them.
"""
