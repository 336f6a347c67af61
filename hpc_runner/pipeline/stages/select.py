"""A select stage: ``select: {from, metric, mode}``, one small job that chooses the best point of its input."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.pipeline.model import Fail, Log, PipelineSpec, StageConfig, StageSpec, StageView
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.pipeline.select_job import submit_select, wait_on_sweep
from hpc_runner.pipeline.spec import MODES, _text, _unknown_keys
from hpc_runner.pipeline.stages.base import StageKind
from hpc_runner.pipeline.submit import one_job
from hpc_runner.scheduler.dependency import AFTER_ANY
from hpc_runner.scheduler.profiles import ClusterProfile, parse_time_minutes
from hpc_runner.sweep.spec import format_cell

FIELDS = ("from", "metric", "mode")  # of ``select:``
# its job needs no GPU and little time: these settings of the profile are dropped for it
GPU_SETTINGS = ("gres", "gpus_per_node", "gpus_per_task", "cpus_per_gpu", "mem_per_gpu")
SELECT_MINUTES = 15


class SelectKind(StageKind):
    """A select stage: waits (afterany) on every job of its input, then chooses (pipeline/select_job.py)."""

    name = "select"
    key = "select"
    keys = frozenset({"select"})
    dependency = AFTER_ANY  # it runs however its input's jobs ended
    chooses = True

    def parse(self, stage: StageSpec, raw: dict[str, Any], at: str, fail: Fail) -> None:
        """``select``: the stage it chooses from, the metric and the mode."""
        sel = raw.get("select")
        if not isinstance(sel, dict):
            raise fail("select is not a mapping", f"{at}::select", expected="select: {from: search, metric: val_dice, "
                       "mode: max}")
        _unknown_keys(sel, FIELDS, f"{at}::select", fail)
        stage.source = _text(sel.get("from"), f"{at}::select::from", fail, "the name of the stage to choose from")
        if sel.get("metric") is not None:
            stage.metric = _text(sel["metric"], f"{at}::select::metric", fail, "a metric of the points' summary.json")
        mode = sel.get("mode", "max")
        if mode not in MODES:
            raise fail(f"mode: {mode!r} is not a direction", f"{at}::select::mode",
                       expected="mode: max (the highest metric wins) or min (the lowest)")
        stage.mode = mode

    def source_path(self, index: int) -> str:
        """``select::from``."""
        return f"stages::{index}::select::from"

    def check_source(self, stage: StageSpec, source: StageSpec, at: str, fail: Fail) -> None:
        """It chooses from a search or a run; from a sweep only by a metric."""
        if not source.kind.choosable:
            raise fail(f"select stage '{stage.name}' chooses from '{source.name}', a {source.kind.name} stage", at,
                       expected="a sweep, tune or run stage (its points, or its one run)")
        if source.kind.select_needs_metric and not stage.metric:
            raise fail(f"select stage '{stage.name}' has no metric to choose the best point of '{source.name}' by",
                       f"stages::{stage.index}::select", expected="select: {from: ..., metric: val_dice, mode: max}")

    def job_settings(self, settings: dict[str, Any], profile: ClusterProfile) -> None:
        """One CPU, no GPU and at most 15 minutes (it reads records and writes a few)."""
        for key in GPU_SETTINGS:
            settings.pop(key, None)
        settings["cpus_per_task"] = 1
        minutes = parse_time_minutes(settings.get("time", 60), profile.where)
        delay_min = -(-int(settings.get("signal_delay_s") or 0) // 60)
        settings["time"] = min(minutes, max(SELECT_MINUTES, delay_min + 5))

    def configure(self, spec: PipelineSpec, sc: StageConfig, bundle_dir: Path, directory: Path,
                  choices: dict[str, dict[str, Any]]) -> None:
        """No config: it reads records."""

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """Its job (pipeline/select_job.py)."""
        return one_job(executor, submit_select(executor, directory, sc.name, dependency), log)

    def after_queued(self, directory: Path, sc: StageConfig, jobs: list[str]) -> None:
        """The sweep's top-ups make its job wait on them too."""
        if jobs:
            wait_on_sweep(directory / str(sc.stage.source), jobs[0])

    def waits_note(self, stage: StageSpec) -> str:
        """It waits on every job of its input, however they end."""
        return f"waits (afterany) on every job of {stage.source}"

    def describe(self, sc: StageConfig) -> str:
        """Its metric and mode."""
        return f"{sc.stage.metric or 'completion'} ({sc.stage.mode})"

    def recorded_detail(self, entry: dict[str, Any]) -> str:
        """The point it chose, and why."""
        chosen = entry.get("chosen") or {}
        if not chosen:
            return ""
        params = " ".join(f"{k}={format_cell(x)}" for k, x in (chosen.get("params") or {}).items())
        return (f"chose point {chosen.get('point')} of {chosen.get('from')}" + (f" ({params})" if params else "")
                + f": {chosen.get('why')}")

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Its choice."""
        chosen = record.stage(v.name).get("chosen")
        return {"chosen": chosen} if chosen else {}
