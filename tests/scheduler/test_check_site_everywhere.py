"""Every submitter says (or stops at) what `cluster check` found before queueing: ``executor.check_site()``."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.memory.executor import MemoryCluster
from hpc_runner.scheduler.profiles import ClusterProfile

BROKEN = ClusterProfile("broken", [], {"executor": "memory", "time": 10, "cpus_per_task": 1, "checked": {
    "date": "2025-01-01T00:00:00", "by": "hpc-runner cluster check broken",
    "partitions": {"small": {"node": "n1", "job_id": "7", "findings": {
        "imports": {"ok": False, "detail": "cannot import torch"}}}}}})
TARGET = SimpleNamespace(record=SimpleNamespace(), path=Path("/nonexistent"))


def _tune(tmp: Path) -> None:
    from hpc_runner.tune.submit import submit_tune

    submit_tune(None, None, SimpleNamespace(trials=2), BROKEN, tmp / "t")


def _pipeline(tmp: Path) -> None:
    from hpc_runner.pipeline.submit import start_pipeline

    start_pipeline(None, BROKEN, tmp / "p")  # type: ignore[arg-type]


def _resume_sweep(tmp: Path) -> None:
    from hpc_runner.sweep.resume import resume_sweep

    resume_sweep(TARGET, SimpleNamespace(resubmit=[]), BROKEN)  # type: ignore[arg-type]


def _resume_run(tmp: Path) -> None:
    from hpc_runner.sweep.resume import resume_run

    resume_run(TARGET, BROKEN)  # type: ignore[arg-type]


@pytest.mark.parametrize("submit", [_tune, _pipeline, _resume_sweep, _resume_run])
def test_a_failed_check_the_job_depends_on_stops_it_before_queueing(submit, tmp_path: Path) -> None:
    with MemoryCluster().installed() as cluster, pytest.raises(ClusterError, match="imports failed"):
        submit(tmp_path)
    assert cluster.calls["sbatch"] == 0 and not (tmp_path / "t").exists() and not (tmp_path / "p").exists()
