"""A tune stage: ``tune: {space, trials, metric, ...}``, an Optuna search whose workers run in a tune dir."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.pipeline.model import Fail, Log, PipelineSpec, StageConfig, StageSpec
from hpc_runner.pipeline.spec import MODES, _mapping, _positive, _text, _unknown_keys
from hpc_runner.pipeline.stages.base import SearchStage
from hpc_runner.pipeline.submit import submitted
from hpc_runner.tune.settings import TuneSettings
from hpc_runner.tune.space import parse_space, space_corners
from hpc_runner.tune.submit import submit_tune
from hpc_runner.tune.tune_dir import check_space

FIELDS = ("space", "trials", "metric", "mode", "direction", "parallel", "pruner", "sampler", "seed",
          "pruner_options", "sampler_options")  # of ``tune:``


class TuneKind(SearchStage):
    """A tune: ``trials`` trials of ``space`` by ``parallel`` workers; its metric is a select stage's default."""

    name = "tune"
    key = "tune"
    keys = frozenset({"tune", "entry", "config_file", "overrides"})

    def parse(self, stage: StageSpec, raw: dict[str, Any], at: str, fail: Fail) -> None:
        """``tune``: a space, a number of trials and a metric at least (as ``hpc-runner tune``)."""
        tune = _mapping(raw.get("tune"), f"{at}::tune", fail)
        _unknown_keys(tune, FIELDS, f"{at}::tune", fail)
        space = tune.get("space")
        space = [space] if isinstance(space, str) else space
        if not isinstance(space, list) or not space or not all(isinstance(s, str) for s in space):
            raise fail("tune has no space", f"{at}::tune::space",
                       expected="space: ['learning_rate=loguniform(1e-4,1e-1)', ...] (as tune --space)")
        _positive(tune.get("trials"), f"{at}::tune::trials", fail, "a number of trials")
        _text(tune.get("metric"), f"{at}::tune::metric", fail, "the trainer's metric_name, e.g. val_dice")
        if "mode" in tune and tune["mode"] not in MODES:
            raise fail(f"mode: {tune['mode']!r}", f"{at}::tune::mode", expected="mode: max or min")
        if "parallel" in tune:
            _positive(tune["parallel"], f"{at}::tune::parallel", fail, "a number of workers")
        stage.tune = {**tune, "space": list(space)}

    def plan(self, spec: PipelineSpec, sc: StageConfig) -> None:
        """Its settings (tune/settings.py) and the corners of its space (what the pre-flight checks)."""
        t = sc.stage.tune
        direction = t.get("direction") or {"max": "maximize", "min": "minimize"}[t.get("mode", "max")]
        sc.tune = TuneSettings(space=list(t["space"]), trials=int(t["trials"]), metric=str(t["metric"]),
                               direction=direction, pruner=t.get("pruner", "asha"), sampler=t.get("sampler", "tpe"),
                               seed=t.get("seed"), pruner_options=dict(t.get("pruner_options") or {}),
                               sampler_options=dict(t.get("sampler_options") or {}))
        sc.points = space_corners(parse_space(sc.tune.space))

    def check_config(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any, entry: str) -> str:
        """Its space against the config (tune/tune_dir.py: each corner's config)."""
        return check_space(sc.cfg, sc.tune, True, entry)

    def minimum_jobs(self, sc: StageConfig) -> int:
        """Its workers (at most one per trial)."""
        if sc.tune is not None:
            return min(int(sc.stage.tune.get("parallel", 1)), int(sc.tune.trials))
        return 1

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """Its workers, as ``hpc-runner tune`` queues them (tune/submit.py)."""
        stage = sc.stage
        res = submit_tune(sc.cfg, stage.entry, sc.tune, sc.profile, directory / sc.name,
                          parallel=int(stage.tune.get("parallel", 1)), argv=argv, log=log, preflight=False)
        return submitted(res)

    def describe(self, sc: StageConfig) -> str:
        """Its number of trials."""
        return f"{(sc.tune.trials if sc.tune else 0)} trial(s)"

    def own_metric(self, raw: dict[str, Any]) -> tuple[str | None, str] | None:
        """Its own metric and direction."""
        tune = raw.get("tune") or {}
        if not tune:
            return None
        return tune.get("metric"), tune.get("mode") or ("min" if tune.get("direction") == "minimize" else "max")
