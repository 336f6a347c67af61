"""The base every stage kind subclasses, and the bases the kinds share: what a kind does at each step.

A stage kind is one subclass of ``StageKind`` (one module of pipeline/stages/ each), registered once in
``pipeline/stages/__init__.py`` (``KINDS``: name -> class). What the pipeline asks of a kind, and the
answers that need none of its steps, are model.py's ``Kind``; ``StageKind`` adds those of a stage whose work
is one job with no record of its own in its folder (its config loaded as configs.py does, queued again on
resume, its job's state in ``status``): also what a stage of the record gets whose kind this version does
not know. The kinds import the pipeline's steps; no step imports a kind (they ask ``kind_of``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.engine.runner import check_entry
from hpc_runner.errors import UserError
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.configs import configure_stage
from hpc_runner.pipeline.model import Kind, PipelineSpec, StageConfig, StageView
from hpc_runner.pipeline.preflight import check_consumer
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.pipeline.resume import AGAIN, FRESH, POINTS, took_choice
from hpc_runner.pipeline.summary import search_table
from hpc_runner.pipeline.view import from_folder, from_job
from hpc_runner.report.build import build_report


class StageKind(Kind):
    """One kind of pipeline stage; the defaults: a stage that is one job and keeps no record in its folder."""

    def configure(self, spec: PipelineSpec, sc: StageConfig, bundle_dir: Path, directory: Path,
                  choices: dict[str, dict[str, Any]]) -> None:
        """Load the stage's config into ``sc``: its overrides and what it takes from its select stage."""
        configure_stage(spec, sc, bundle_dir, directory, choices)

    def resume_action(self, record: PipelineRecord, name: str, inputs_again: bool) -> str:
        """Queue it again (pipeline/resume.py)."""
        return AGAIN

    def look(self, record: PipelineRecord, v: StageView, state: str | None) -> None:
        """A queued stage: its job's state."""
        if state == pr.QUEUED:
            from_job(record, v)


class FolderStage(StageKind):
    """A stage that runs the bundle's config in its folder, a sweep, tune or run dir with its own record."""

    def preflight(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any) -> str | None:
        """Check the stage's entry, then its config as its kind runs it."""
        assert sc.cfg is not None
        check_entry(sc.cfg, sc.stage.entry)
        return self.check_config(sc, configs, cache, sc.stage.entry or "run")

    def check_config(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any, entry: str) -> str:
        """Check the stage's config (config/preflight.py); a stage from a select stage with each value it may get."""
        assert sc.cfg is not None
        if sc.stage.source is None:
            config_preflight.check_config(sc.cfg, cache, entry=entry)
            return "config"
        return check_consumer(sc, configs, cache, entry)

    def look(self, record: PipelineRecord, v: StageView, state: str | None) -> None:
        """A queued or done stage: its points' states, from its folder (one scheduler call)."""
        if state in (pr.QUEUED, pr.DONE):
            from_folder(v, done=state == pr.DONE)

    def report(self, v: StageView) -> Path | None:
        """Write the report of its folder (report/build.py); None when it has none to write."""
        if v.target is None:
            return None
        try:
            return build_report(v.folder).html
        except UserError:
            return None


class SearchStage(FolderStage):
    """A search (sweep, tune): many points in a sweep dir, chosen from by a select stage."""

    choosable = True

    def resume_action(self, record: PipelineRecord, name: str, inputs_again: bool) -> str:
        """Resume its folder (failed and missing points, the workers) when it has one, else queue it anew."""
        return POINTS if (record.stage_dir(name) / "sweep.yaml").is_file() else FRESH

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Its results table (results.csv, results.md written into its folder)."""
        return search_table(v) if v.target is not None else {}


class ConfigStage(FolderStage):
    """A stage that runs the config itself (one run, or its shards), with the choice of the select stage it
    takes ``from`` written into its prepared config."""

    takes_choice = True
    checks_entry = True

    def resume_action(self, record: PipelineRecord, name: str, inputs_again: bool) -> str:
        """Resume its folder when its config already holds the choice, else queue it anew."""
        took = took_choice(record, name, self.prepared_dir(record.stage_dir(name)))
        return POINTS if took and not inputs_again else FRESH
