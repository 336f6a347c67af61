"""A sweep stage: ``sweep: [...]`` (as ``--sweep``), its points queued as job arrays through the governor."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.errors import UserError
from hpc_runner.pipeline.model import Fail, Log, PipelineSpec, StageConfig, StageSpec
from hpc_runner.pipeline.spec import _positive, where
from hpc_runner.pipeline.stages.base import SearchStage
from hpc_runner.pipeline.submit import submit_points
from hpc_runner.sweep.check import check_points as check_values
from hpc_runner.sweep.check import preflight_overrides
from hpc_runner.sweep.spec import build_spec


class SweepKind(SearchStage):
    """A sweep: its points (``sweep``, ``zip``) packed ``pack`` to a task, in a sweep dir."""

    name = "sweep"
    key = "sweep"
    keys = frozenset({"sweep", "entry", "config_file", "overrides", "zip", "pack", "pack_parallel"})
    select_needs_metric = True

    def parse(self, stage: StageSpec, raw: dict[str, Any], at: str, fail: Fail) -> None:
        """``sweep`` (a list of --sweep options), ``zip``, ``pack`` and ``pack_parallel``."""
        sweeps = raw.get("sweep")
        sweeps = [sweeps] if isinstance(sweeps, str) else sweeps
        if not isinstance(sweeps, list) or not sweeps or not all(isinstance(s, str) and s.strip() for s in sweeps):
            raise fail("sweep is not a list of --sweep options", f"{at}::sweep",
                       expected='sweep: ["learning_rate=1e-3,4e-3", "batch_size=2,4"]')
        stage.sweep = list(sweeps)
        stage.zip = bool(raw.get("zip", False))
        stage.pack = _positive(raw.get("pack", 1), f"{at}::pack", fail, "a number of points per task")
        stage.pack_parallel = _positive(raw.get("pack_parallel", 1), f"{at}::pack_parallel", fail,
                                        "a number of points run at once")

    def plan(self, spec: PipelineSpec, sc: StageConfig) -> None:
        """Its sweep and points (sweep/spec.py)."""
        stage = sc.stage
        try:
            sc.sweep = build_spec(stage.sweep, stage.zip)
        except UserError as exc:
            raise type(exc)(f"stage '{stage.name}': {exc.message}", where=where(
                spec.file, spec.lines, f"stages::{stage.index}::sweep"), id_path=f"stages.{stage.index}.sweep",
                expected=exc.expected, hint=exc.hint) from None
        sc.points = sc.sweep.points()

    def check_config(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any, entry: str) -> str:
        """Each point's values, then each point's config."""
        assert sc.cfg is not None
        note = check_values(sc.cfg, sc.points)
        return note + "; " + config_preflight.check_points(sc.cfg, preflight_overrides(sc.points), cache, entry=entry)

    def group_size(self, sc: StageConfig, max_array: int) -> int:
        """One array of its tasks (``pack`` points each), at most MaxArraySize."""
        return min(max_array, -(-len(sc.points) // max(1, sc.stage.pack)))

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """Its points, through the governor (sweep/submission.py), the later stages' slots kept."""
        return submit_points(directory, sc, sc.sweep, dependency, log, reserve, argv)

    def describe(self, sc: StageConfig) -> str:
        """Its number of points."""
        return f"{len(sc.points)} point(s)"
