"""A sharded stage: a run with ``shards: N``, N array tasks (a sweep over ``shard_index``, one predictions/)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig, config_value
from hpc_runner.config.overrides import Override
from hpc_runner.jobs.ledger import BASE_DIR
from hpc_runner.pipeline.model import Fail, Log, StageConfig, StageSpec, StageView
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.pipeline.spec import _positive
from hpc_runner.pipeline.stages.base import ConfigStage
from hpc_runner.pipeline.submit import submit_points
from hpc_runner.pipeline.summary import predictions
from hpc_runner.sweep.shards import PREDICTIONS_FOLDER, PREDICTIONS_ID, check_shardable
from hpc_runner.sweep.spec import build_spec


class ShardsKind(ConfigStage):
    """The stage's config run as ``shards`` array tasks, each on its share of the cases (sweep/shards.py)."""

    name = "shards"
    keys = frozenset({"entry", "config_file", "overrides", "from", "shards", "weights_id"})
    unit = "shard"

    def claims(self, raw: dict[str, Any]) -> bool:
        """A run with ``shards``."""
        return ("entry" in raw or "config_file" in raw) and raw.get("shards") is not None

    def parse(self, stage: StageSpec, raw: dict[str, Any], at: str, fail: Fail) -> None:
        """``shards``: a number of array tasks."""
        stage.shards = _positive(raw.get("shards"), f"{at}::shards", fail, "a number of shards")

    def extra_overrides(self, sc: StageConfig, base: BundleConfig, directory: Path) -> list[Override]:
        """num_shards (and one predictions_dir for every shard) of a sharded stage (sweep/shards.py)."""
        stage = sc.stage
        check_shardable(base, int(stage.shards or 1))
        values: dict[str, Any] = {"num_shards": stage.shards}
        if config_value(base, PREDICTIONS_ID, None) is not None:
            values[PREDICTIONS_ID] = str((directory / stage.name / PREDICTIONS_FOLDER).resolve())
        sc.shard_values = values
        return [Override(k, v, "hpc-runner", "submit --shards") for k, v in values.items()]

    def group_size(self, sc: StageConfig, max_array: int) -> int:
        """One array of its shards, at most MaxArraySize."""
        return min(max_array, int(sc.stage.shards or 1))

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """A sweep over ``shard_index`` through the governor (its top-ups keep its dependency)."""
        sweep = build_spec([f"shard_index=range(0,{sc.stage.shards})"])
        return submit_points(directory, sc, sweep, dependency, log, reserve, argv, shards=sc.shard_values)

    def describe(self, sc: StageConfig) -> str:
        """Its number of shards."""
        return f"{sc.stage.shards} shard(s)"

    def prepared_dir(self, folder: Path) -> Path:
        """The sweep's base/ (its points are made from it when they start)."""
        return folder / BASE_DIR

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Its predictions and the shards' cases merged (cases.csv written into its folder)."""
        return predictions(v) if v.target is not None else {}
