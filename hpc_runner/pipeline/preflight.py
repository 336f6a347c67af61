"""The pipeline's pre-flight: every stage's config, resources and submit slots, before anything is queued.

- every stage's config (config/preflight.py: targets import, ``$`` lines compile, input paths exist), each
  sweep point's, each tune's corners; a stage ``from`` a select stage with a temporary folder standing
  for the weights (they do not exist yet) and with the values of each point it may be given (a sweep's
  points, a tune's corners: the ids its config has);
- ``sbatch --test-only`` of each stage's largest job group (SLURM);
- the submit slots: every stage needs at least one job queued now (a select stage, a run, one task of
  each sweep, a tune's workers); a sweep stage's governor counts with the slots of the stages queued after
  it kept aside, so its points wait (and are topped up as usual) rather than take the later stages' slots.
"""

from __future__ import annotations

import copy
import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.config.overrides import Override, point_override
from hpc_runner.config.preflight import PreflightCache, config_problems, describe_problems
from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.pipeline.choice import choice_values
from hpc_runner.pipeline.configs import source_points
from hpc_runner.pipeline.model import StageConfig, StageSpec
from hpc_runner.scheduler.executor import Executor, JobRequest, Limit
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.spec import describe_point


def _in_stage(stage: StageSpec, exc: UserError) -> UserError:
    """The same error, its message prefixed with the stage it is about."""
    out = type(exc)(f"stage '{stage.name}': {exc.message}", where=exc.where, id_path=exc.id_path,
                    expected=exc.expected, hint=exc.hint)
    return out


def check_configs(order: list[StageConfig], configs: dict[str, StageConfig]) -> str:
    """Raise UserError (naming the stage) for a stage whose config cannot start; return what was checked."""
    cache = PreflightCache()
    checked = []
    for sc in order:
        stage = sc.stage
        if sc.cfg is None:
            continue
        try:
            note = stage.kind.preflight(sc, configs, cache)  # None: nothing of its own to check (select, export)
        except UserError as exc:
            raise _in_stage(stage, exc) from None
        if note is not None:
            checked.append(f"{stage.name}: {note}")
    return "; ".join(checked)


def check_consumer(sc: StageConfig, configs: dict[str, StageConfig], cache: Any, entry: str) -> str:
    """A stage from a select stage: its config with a stand-in for the weights and each point's values."""
    stage, cfg = sc.stage, sc.cfg
    assert cfg is not None
    own = set(stage.overrides)
    with tempfile.TemporaryDirectory(prefix="hpcr-weights-") as stand_in:
        base = cfg.with_overrides([Override(stage.weights_id, stand_in, "pipeline", "pre-flight stand-in")],
                                  check=False)
        config_preflight.check_config(base, cache, entry=entry)
        seen: set[str] = set()
        for n, point in enumerate(source_points(configs, stage)):
            values, _ = choice_values(base.config, {"params": point}, own)
            key = json.dumps(values, sort_keys=True, default=repr)
            if not values or key in seen:
                continue
            seen.add(key)

            variant = base.with_overrides([point_override(k, copy.deepcopy(v)) for k, v in values.items()],
                                          check=True)
            problems = config_problems(variant, cache, entry=entry)
            if problems:
                first = problems[0]
                raise ClusterError(
                    f"pre-flight: with the values of point {n} of '{stage.source}' ({describe_point(values)}) the "
                    f"config cannot start, nothing was queued: {describe_problems(problems)}",
                    where=first.where, id_path=first.id_path)
    return f"config with {len(seen)} chosen-value variant(s)"


def minimum_jobs(sc: StageConfig) -> int:
    """Return how many jobs (array tasks) of a stage must be queued when the pipeline starts."""
    return sc.stage.kind.minimum_jobs(sc)


def group_size(sc: StageConfig, max_array: int = 1001) -> int:
    """Return the size of the stage's largest job group (what sbatch --test-only is asked about)."""
    return sc.stage.kind.group_size(sc, max_array)


def check_resources(order: list[StageConfig], directory: Path, cwd: str) -> None:
    """``sbatch --test-only`` of each stage's largest job group (nothing for the local executor)."""
    for sc in order:
        executor = executor_for(sc.profile)
        executor.check_time()
        if executor.runs_here:
            continue
        request = JobRequest(job_name=f"hpcr-{sc.stage.kind.name}-{sc.name}",
                             folder=directory / sc.name / sr.JOB_FOLDER, chdir=cwd)
        try:
            executor.check_resources(request, group_size(sc), f"stage '{sc.name}'")
        except UserError as exc:
            if not executor.is_limit_refusal(exc.message):  # the queue is full now: the slots are counted below
                raise _in_stage(sc.stage, exc) from None


def plan_slots(order: list[StageConfig], limits: Any) -> dict[str, int]:
    """Return, per stage, the slots kept for the stages queued after it; ClusterError when the free submit slots
    cannot hold one job of every stage (nothing is queued)."""
    need = [minimum_jobs(sc) for sc in order]
    free = limits.free_slots if limits is not None else None
    if free is not None and free < sum(need):
        raise ClusterError(
            f"the pipeline needs at least {sum(need)} submit slot(s) to start (one job of each of its "
            f"{len(order)} stages), and {free} are free ({limits.describe()}); nothing was queued",
            expected="fewer stages, or the pipeline started when more of your jobs have left the queue",
            hint="your jobs in the scheduler's queue hold the slots (`squeue -u $USER`, `qstat -u $USER`)")
    return {sc.name: sum(need[n + 1:]) for n, sc in enumerate(order)}


def keeping(slots: int) -> Callable[[Executor], Any] | None:
    """Return the governor's limits reader with ``slots`` free submit slots kept aside (None: nothing kept)."""
    if slots <= 0:
        return None

    def read(executor: Executor) -> Any:
        limits = executor.limits()  # whichever scheduler runs the stage, not SLURM's commands directly
        free = limits.free_slots
        if free is not None:
            queued = len(limits.jobs)
            limits.limits.append(Limit("pipeline", f"the pipeline's later stages ({slots} slot(s) kept)",
                                       queued + max(0, free - slots), queued))
        return limits

    return read
