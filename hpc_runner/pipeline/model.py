"""The pipeline's types, below every other module of the package: a stage of the file and the file
(``StageSpec``, ``PipelineSpec``), what a stage's kind answers (``Kind``), what a stage runs (``StageConfig``)
and how it stands (``StageView``).

These refer to each other, so they live together, and this module imports no other module of the pipeline
but the record. The imports go one way: the stage kinds (pipeline/stages/) call the pipeline's steps (spec,
configs, preflight, submit, resume, view, summary, the select and export jobs) and the steps ask a stage's
kind object (``StageSpec.kind``, ``StageView.kind``, or stages/registry.py's ``kind_of(name)``), never
importing a kind's module. ``Kind`` is the interface; stages/base.py's ``StageKind`` adds the defaults of a
one-job stage, which call the steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.config.overrides import Override
from hpc_runner.errors import UserError
from hpc_runner.pipeline.record import PipelineRecord
from hpc_runner.scheduler.dependency import AFTER_OK
from hpc_runner.scheduler.profiles import ClusterProfile

Log = Callable[[str], None]
Fail = Any  # spec.parse_spec's fail(message, at, expected=None, hint=None) -> UserError

DEFAULT_WEIGHTS_ID = "ckpt"  # the id of an evaluate/inference config that names the weights (--ckpt RUN_DIR)

# a stage's state as ``status`` shows it (view.py)
PLANNED, PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, NOT_SUBMITTED = (
    "PLANNED", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "NOT-SUBMITTED")


class Kind:
    """What the pipeline asks of a stage's kind, at every step; the defaults need no step of the pipeline.

    A stage kind is one subclass of stages/base.py's ``StageKind`` (one module of pipeline/stages/ each),
    registered once in ``pipeline/stages/__init__.py`` (``KINDS``: name -> class). The pipeline's modules ask
    the stage's kind object and never compare its name: its fields and their checks (spec.py), its config
    (configs.py), its pre-flight (preflight.py), how it is queued (submit.py), resumed (resume.py), handed a
    choice (select_job.py), viewed (view.py) and summarised (summary.py).
    """

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
        return type(other) is type(self) and isinstance(other, Kind) and other.name == self.name

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
        raise NotImplementedError(f"a {self.name} stage has no config")

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
        raise NotImplementedError(f"a {self.name} stage cannot be resumed")

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
        """Fill in the view of a stage with recorded ``state`` (its folder's or its job's state)."""

    def chain_entry(self, record: PipelineRecord, v: StageView) -> dict[str, Any]:
        """Return what the stage gave, for ``collect`` (tables it writes go into its folder)."""
        return {}

    def report(self, v: StageView) -> Path | None:
        """Write the stage's own report; return its page (None: it has none)."""
        return None


@dataclass
class StageSpec:
    """One stage of the pipeline file, checked (spec.py)."""

    name: str
    kind: Kind  # pipeline/stages/: what the pipeline does with a stage of this kind
    index: int
    raw: dict[str, Any]
    entry: str | None = None
    config_file: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)
    source: str | None = None  # `from:` (a select stage) or, for a select stage, the stage it chooses from
    shards: int | None = None
    slurm: dict[str, Any] = field(default_factory=dict)
    weights_id: str = DEFAULT_WEIGHTS_ID
    metric: str | None = None  # select
    mode: str = "max"  # select
    sweep: list[str] = field(default_factory=list)
    zip: bool = False
    pack: int = 1
    pack_parallel: int = 1
    tune: dict[str, Any] = field(default_factory=dict)
    export: dict[str, Any] = field(default_factory=dict)

    @property
    def inputs(self) -> list[str]:
        """Return the stages this one waits for (its ``from``, or what a select stage chooses from)."""
        return [self.source] if self.source else []

    def to_record(self) -> dict[str, Any]:
        """Return the stage as written in the pipeline record (the file's own fields, and its kind)."""
        return {"kind": self.kind.name, **self.raw}


@dataclass
class PipelineSpec:
    """The pipeline file, checked: the bundle, the overrides of every stage and the stages in file order."""

    file: Path
    bundle: str
    overrides: dict[str, Any]
    stages: list[StageSpec]
    lines: dict[str, int] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)

    def stage(self, name: str) -> StageSpec:
        """Return the stage called ``name``."""
        return next(s for s in self.stages if s.name == name)

    def consumers(self, name: str) -> list[StageSpec]:
        """Return the stages that wait on stage ``name`` (its ``from`` is ``name``)."""
        return [s for s in self.stages if s.source == name]

    def order(self) -> list[StageSpec]:
        """Return the stages in the order they are submitted: each after its inputs, else in file order."""
        return topological(self.stages)


def topological(stages: list[StageSpec], fail: Any = None) -> list[StageSpec]:
    """Return the stages, each after its inputs (file order otherwise); UserError for a cycle."""
    by_name = {s.name: s for s in stages}
    done: list[StageSpec] = []
    placed: set[str] = set()
    left = list(stages)
    while left:
        ready = [s for s in left if all(i in placed or i not in by_name for i in s.inputs)]
        if not ready:
            cycle = _cycle(left, by_name)
            message = f"the stages wait on each other in a cycle: {' -> '.join(cycle)}"
            first = by_name[cycle[0]]
            at = first.kind.source_path(first.index)
            if fail is None:
                raise UserError(message)
            raise fail(message, at, expected="each stage after the stages it takes from (no cycle)")
        for s in ready:
            done.append(s)
            placed.add(s.name)
        left = [s for s in left if s.name not in placed]
    return done


def _cycle(left: list[StageSpec], by_name: dict[str, StageSpec]) -> list[str]:
    """Return one cycle among ``left`` (each of them waits on another of them)."""
    start = left[0]
    path = [start.name]
    current = start
    while True:
        nxt = by_name[current.inputs[0]]
        if nxt.name in path:
            return [*path[path.index(nxt.name):], nxt.name]
        path.append(nxt.name)
        current = nxt


@dataclass
class StageConfig:
    """What a stage runs: its config (none for a select stage), its points or shards, its profile (configs.py)."""

    stage: StageSpec
    profile: ClusterProfile
    cfg: BundleConfig | None = None
    sweep: Any = None  # SweepSpec of a sweep stage
    points: list[dict[str, Any]] = field(default_factory=list)  # a sweep's points, a tune's corners
    tune: Any = None  # TuneSettings of a tune stage
    inherited: dict[str, Any] = field(default_factory=dict)  # the search's overrides a consumer takes
    shard_values: dict[str, Any] = field(default_factory=dict)  # num_shards, predictions_dir
    config_files: list[Path] = field(default_factory=list)  # an export stage's configs

    @property
    def name(self) -> str:
        """Return the stage's name."""
        return self.stage.name


@dataclass
class StageView:
    """One stage as ``status`` shows it (view.py)."""

    name: str
    kind: Kind  # the recorded kind's class (pipeline/stages/): how the stage is looked at
    state: str
    folder: Path
    jobs: list[str] = field(default_factory=list)
    detail: str = ""
    cause: dict[str, Any] | None = None
    reason: str | None = None  # squeue's reason of a pending job (Dependency, Priority, ...)
    target: Any = None  # the stage's sweep/run target (jobs/targets.py), when it has one
    points: list[Any] = field(default_factory=list)  # its points' states (jobs/states.py)
    answer: Any = None  # the scheduler's answer the points' states come from

    @property
    def active(self) -> bool:
        """True while the scheduler may still run something of the stage."""
        return self.state in (PENDING, RUNNING)

    def to_json(self) -> dict[str, Any]:
        """Return the stage as one JSON object (``status --json``)."""
        return {"stage": self.name, "kind": self.kind.name, "state": self.state, "jobs": self.jobs,
                "detail": self.detail, "reason": self.reason, "cause": self.cause, "dir": str(self.folder)}
