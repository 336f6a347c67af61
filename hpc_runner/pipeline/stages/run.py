"""A run stage: ``entry`` (and/or ``config_file``) alone, one job in a run dir, ``from:`` a select stage or not."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.jobs.states import ENDED_WELL
from hpc_runner.jobs.submit_run import submit_run
from hpc_runner.pipeline.model import Log, StageConfig, StageView
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.pipeline.stages.base import ConfigStage
from hpc_runner.pipeline.view import metrics_line


class RunKind(ConfigStage):
    """One run of the stage's config (an evaluation, an inference, a training), as ``hpc-runner submit``."""

    name = "run"
    keys = frozenset({"entry", "config_file", "overrides", "from", "weights_id"})
    choosable = True  # its one run is the point
    unit = "run"

    def claims(self, raw: dict[str, Any]) -> bool:
        """A stage with an entry or config files and no other kind's field."""
        return "entry" in raw or "config_file" in raw

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """Its one job (jobs/submit_run.py), waiting on ``dependency``."""
        res = submit_run(sc.cfg, sc.stage.entry, sc.profile, directory / sc.name, argv=argv, log=log,
                         preflight=False, dependency=dependency)
        if not res.ran_here:
            return [res.job_ids[0]]
        return res.local_failures == 0

    def describe(self, sc: StageConfig) -> str:
        """Its entry."""
        return f"entry {sc.stage.entry or 'run'}"

    def look(self, record: PipelineRecord, v: StageView, state: str | None) -> None:
        """Its run's state; once it ended well, its results."""
        super().look(record, v, state)
        if v.points and v.points[0].state in ENDED_WELL:
            v.detail = "completed: " + metrics_line(v.folder)

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Its results (summary.json)."""
        if v.target is None:
            return {}
        return {"results": metrics_line(v.folder), "summary": str(v.folder / "summary.json")}
