"""What the pipeline asks of a stage's kind, at every step: the base class, and the bases the kinds share.

A stage kind is one subclass of ``StageKind`` (one module of pipeline/stages/ each), registered once in
``pipeline/stages/__init__.py`` (``KINDS``: name -> class). The pipeline's modules ask the stage's kind
object (``StageSpec.kind``, ``StageView.kind``, or ``kind_of(name)`` for a stage of the record) and never
compare its name: its fields and their checks (spec.py), its config (configs.py), its pre-flight
(preflight.py), how it is queued (submit.py), resumed (resume.py), handed a choice (select_job.py), viewed
(view.py) and summarised (summary.py).

The defaults of ``StageKind`` are those of a stage whose work is one job with no record of its own in its
folder; they are also what a stage of the record gets whose kind this version does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from hpc_runner.config import preflight as config_preflight
from hpc_runner.engine.runner import check_entry
from hpc_runner.errors import UserError
from hpc_runner.report.build import build_report
from hpc_runner.scheduler.dependency import AFTER_OK

if TYPE_CHECKING:
    from hpc_runner.config.bundle_config import BundleConfig
    from hpc_runner.config.overrides import Override
    from hpc_runner.pipeline.configs import StageConfig
    from hpc_runner.pipeline.record import PipelineRecord
    from hpc_runner.pipeline.spec import PipelineSpec, StageSpec
    from hpc_runner.pipeline.view import StageView
    from hpc_runner.scheduler.profiles import ClusterProfile

Log = Callable[[str], None]
Fail = Any  # spec.parse_spec's fail(message, at, expected=None, hint=None) -> UserError


class StageKind:
    """One kind of pipeline stage; the defaults: a stage that is one job and keeps no record in its folder."""

    name: str = ""  # as the file's messages and the record spell it
    key: ClassVar[str | None] = None  # the field that makes a stage this kind (None: ``claims`` decides)
    keys: ClassVar[frozenset[str]] = frozenset()  # the fields it takes, besides name, description and slurm
    dependency: ClassVar[str] = AFTER_OK  # how it waits on its input's jobs (scheduler/dependency.py)
    chooses: ClassVar[bool] = False  # it chooses a point of its input (a select stage): ``from:`` it takes that
    choosable: ClassVar[bool] = False  # a select stage may choose from it
    select_needs_metric: ClassVar[bool] = False  # a select stage that chooses from it must name a metric
    takes_choice: ClassVar[bool] = False  # its prepared config gets its select stage's choice written in
    checks_entry: ClassVar[bool] = False  # its ``entry`` must name a config or an id of the bundle
    default_config: ClassVar[str | None] = None  # the bundle config it loads without config_file or entry
    unit: ClassVar[str] = "point"  # what ``status`` counts in its folder

    def __init__(self, name: str | None = None) -> None:
        if name is not None:  # a kind the record names that no class is registered for
            self.name = name

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, StageKind) and other.name == self.name

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # the pipeline file (spec.py)

    def claims(self, raw: dict[str, Any]) -> bool:
        """Return True when a stage of the file, ``raw``, is of this kind (it has the kind's field)."""
        return self.key is not None and self.key in raw

    def parse(self, stage: StageSpec, raw: dict[str, Any], at: str, fail: Fail) -> None:
        """Check the kind's own fields of ``raw`` and set them on ``stage`` (the shared ones are set already)."""

    def source_path(self, index: int) -> str:
        """Return the id path of the field that names the stage's input (for the messages)."""
        return f"stages::{index}::from"

    def check_source(self, stage: StageSpec, source: StageSpec, at: str, fail: Fail) -> None:
        """Refuse an input the stage cannot take from: ``from:`` names a select stage (its chosen point)."""
        if not source.kind.chooses:
            raise fail(f"stage '{stage.name}' takes from '{source.name}', a {source.kind.name} stage", at,
                       expected="from: a select stage (its chosen point gives the weights and values); "
                       f"add one: {{name: best, select: {{from: {source.name}, metric: ..., mode: max}}}}")

    # its config (configs.py)

    def job_settings(self, settings: dict[str, Any], profile: ClusterProfile) -> None:
        """Change the profile settings its jobs are submitted with (before the stage's own ``slurm:``)."""

    def configure(self, spec: PipelineSpec, sc: StageConfig, bundle_dir: Path, directory: Path,
                  choices: dict[str, dict[str, Any]]) -> None:
        """Load the stage's config into ``sc``: its overrides and what it takes from its select stage."""
        from hpc_runner.pipeline.configs import configure_stage  # deferred: cycle (pipeline/__init__ loads stages)

        configure_stage(spec, sc, bundle_dir, directory, choices)

    def extra_overrides(self, sc: StageConfig, base: BundleConfig, directory: Path) -> list[Override]:
        """Return the overrides the kind adds to the stage's config (after the weights)."""
        return []

    def plan(self, spec: PipelineSpec, sc: StageConfig) -> None:
        """Set what the stage runs besides its config (a sweep's points, a tune's settings)."""

    def record_fields(self, sc: StageConfig) -> dict[str, Any]:
        """Return what the pipeline record keeps of the stage's config besides its file fields."""
        return {}

    # pre-flight (preflight.py)

    def preflight(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any) -> str | None:
        """Check that the stage's config can start; return what was checked (None: nothing to check)."""
        return None

    def minimum_jobs(self, sc: StageConfig) -> int:
        """Return how many of its jobs must be queued when the pipeline starts."""
        return 1

    def group_size(self, sc: StageConfig, max_array: int) -> int:
        """Return the size of its largest job group (what sbatch --test-only is asked about)."""
        return self.minimum_jobs(sc)

    # queueing (submit.py)

    def submit(self, directory: Path, sc: StageConfig, executor: Any, dependency: str | None, log: Log,
               reserve: int, argv: Sequence[str] | None) -> Any:
        """Queue the stage's jobs; return their ids (the local executor: whether its work went well)."""
        raise NotImplementedError(f"a {self.name} stage cannot be queued")

    def after_queued(self, directory: Path, sc: StageConfig, jobs: list[str]) -> None:
        """What is done once its jobs are queued and recorded (under the scheduler)."""

    def waits_note(self, stage: StageSpec) -> str:
        """Return how the stage waits on its input, for ``--dry-run`` (empty: it waits on nothing)."""
        if not stage.source:
            return ""
        return (f"waits (afterok) on {stage.source}; takes its chosen point's weights ({stage.weights_id}) "
                "and values")

    def describe(self, sc: StageConfig) -> str:
        """Return what the stage runs, for ``--dry-run``."""
        return self.name

    # resume (resume.py, select_job.py)

    def resume_action(self, record: PipelineRecord, name: str, inputs_again: bool) -> str:
        """Return what ``resume`` does with the stage when it did not complete (pipeline/resume.py)."""
        from hpc_runner.pipeline.resume import AGAIN  # deferred: cycle (pipeline/__init__ loads stages)

        return AGAIN

    def prepared_dir(self, folder: Path) -> Path:
        """Return the folder of the config its jobs start from (where a choice is written in)."""
        return folder

    def own_metric(self, raw: dict[str, Any]) -> tuple[str | None, str] | None:
        """Return the metric and mode a select stage chooses its points by when it names none (None: no own)."""
        return None

    # status, collect and report (view.py, summary.py)

    def recorded_detail(self, entry: dict[str, Any]) -> str:
        """Return the detail ``status`` shows from the stage's entry of the record alone."""
        return ""

    def look(self, record: PipelineRecord, v: StageView, state: str | None) -> None:
        """Fill in the view of a stage with recorded ``state``: a queued one from its job's state."""
        from hpc_runner.pipeline import record as pr  # deferred: cycle (pipeline/__init__ loads stages)
        from hpc_runner.pipeline.view import from_job  # deferred: cycle (pipeline/__init__ loads stages)

        if state == pr.QUEUED:
            from_job(record, v)

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Return what the stage gave, for ``collect`` (tables it writes go into its folder)."""
        return {}

    def report(self, v: StageView) -> Path | None:
        """Write the stage's own report; return its page (None: it has none)."""
        return None


class FolderStage(StageKind):
    """A stage that runs the bundle's config in its folder, a sweep, tune or run dir with its own record."""

    def preflight(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any) -> str | None:
        """Check the stage's entry, then its config as its kind runs it."""
        assert sc.cfg is not None
        check_entry(sc.cfg, sc.stage.entry)
        return self.check_config(sc, configs, cache, sc.stage.entry or "run")

    def check_config(self, sc: StageConfig, configs: dict[str, StageConfig], cache: Any, entry: str) -> str:
        """Check the stage's config (config/preflight.py); a stage from a select stage with each value it may get."""
        from hpc_runner.pipeline.preflight import check_consumer  # deferred: cycle (pipeline/__init__ loads stages)

        assert sc.cfg is not None
        if sc.stage.source is None:
            config_preflight.check_config(sc.cfg, cache, entry=entry)
            return "config"
        return check_consumer(sc, configs, cache, entry)

    def look(self, record: PipelineRecord, v: StageView, state: str | None) -> None:
        """A queued or done stage: its points' states, from its folder (one scheduler call)."""
        from hpc_runner.pipeline import record as pr  # deferred: cycle (pipeline/__init__ loads stages)
        from hpc_runner.pipeline.view import from_folder  # deferred: cycle (pipeline/__init__ loads stages)

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
        from hpc_runner.pipeline.resume import FRESH, POINTS  # deferred: cycle (pipeline/__init__ loads stages)

        return POINTS if (record.stage_dir(name) / "sweep.yaml").is_file() else FRESH

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Its results table (results.csv, results.md written into its folder)."""
        from hpc_runner.pipeline.summary import search_table  # deferred: cycle (pipeline/__init__ loads stages)

        return search_table(v) if v.target is not None else {}


class ConfigStage(FolderStage):
    """A stage that runs the config itself (one run, or its shards), with the choice of the select stage it
    takes ``from`` written into its prepared config."""

    takes_choice = True
    checks_entry = True

    def resume_action(self, record: PipelineRecord, name: str, inputs_again: bool) -> str:
        """Resume its folder when its config already holds the choice, else queue it anew."""
        # deferred: cycle (pipeline/__init__ loads stages)
        from hpc_runner.pipeline.resume import FRESH, POINTS, took_choice

        took = took_choice(record, name, self.prepared_dir(record.stage_dir(name)))
        return POINTS if took and not inputs_again else FRESH
