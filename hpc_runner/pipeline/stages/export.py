"""An export stage: ``export: {net_id, filepath, ...}``, MONAI's ckpt_export of the chosen weights (export_job.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import has_id
from hpc_runner.errors import ConfigError
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.configs import load_stage_config
from hpc_runner.pipeline.export_job import exported_file, stage_fields, submit_export
from hpc_runner.pipeline.model import Fail, Log, PipelineSpec, StageConfig, StageSpec, StageView
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.pipeline.spec import _mapping, _unknown_keys, where
from hpc_runner.pipeline.stages.base import StageKind
from hpc_runner.pipeline.submit import one_job
from hpc_runner.pipeline.view import COMPLETED, FAILED, from_job
from hpc_runner.records.numbers import starts_with_digit

FIELDS = ("net_id", "filepath", "key_in_ckpt", "use_trace", "input_shape")  # of ``export:``


class ExportKind(StageKind):
    """One job that reads the choice from the record and runs ``ckpt_export`` with it."""

    name = "export"
    key = "export"
    keys = frozenset({"export", "from", "config_file", "weights_id"})
    checks_entry = True
    default_config = "inference"  # the network as inference builds it

    def parse(self, stage: StageSpec, raw: dict[str, Any], at: str, fail: Fail) -> None:
        """``export``: ckpt_export's fields; ``from`` is required (the weights it exports)."""
        export = _mapping(raw.get("export"), f"{at}::export", fail)
        _unknown_keys(export, FIELDS, f"{at}::export", fail)
        stage.export = {"net_id": "network_def", "filepath": "model.ts", **export}
        if stage.source is None:
            raise fail("an export stage needs the weights it exports", f"{at}", expected="from: a select stage")

    def configure(self, spec: PipelineSpec, sc: StageConfig, bundle_dir: Path, directory: Path,
                  choices: dict[str, dict[str, Any]]) -> None:
        """Its config files as they are (its job gives them to ckpt_export), checked for the network's id."""
        stage = sc.stage
        base = load_stage_config(spec, stage, bundle_dir)
        sc.cfg, sc.config_files = base, list(base.config_files)
        net_id = stage.export.get("net_id", "network_def")
        if not has_id(base.config, net_id):
            raise ConfigError(f"stage '{stage.name}' exports the network '{net_id}', and its config has no such id",
                              where=where(spec.file, spec.lines, f"stages::{stage.index}::export"),
                              id_path=f"stages.{stage.index}.export.net_id",
                              expected="export: {net_id: ID} naming the network of the stage's config")

    def record_fields(self, sc: StageConfig) -> dict[str, Any]:
        """Its config files and the bundle, for its job."""
        return stage_fields(sc)

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """Its job (pipeline/export_job.py)."""
        return one_job(executor, submit_export(executor, directory, sc.name, dependency), log)

    def describe(self, sc: StageConfig) -> str:
        """ckpt_export."""
        return "ckpt_export"

    def look(self, record: PipelineRecord, v: StageView, state: str | None) -> None:
        """Its job's state; ran here (the local executor): its file says how it went."""
        if state != pr.QUEUED:
            return
        if v.jobs and not [j for j in v.jobs if j and starts_with_digit(j)]:
            path = exported_file(record, v.name)
            v.state, v.detail = (COMPLETED, f"exported {path}") if path.is_file() else (FAILED, f"{path} not written")
            return
        from_job(record, v)
        if v.state == COMPLETED:
            v.detail = f"exported {exported_file(record, v.name)}"

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """The file it exported (None until it is written)."""
        path = exported_file(record, v.name)
        return {"exported": str(path) if path.is_file() else None}
