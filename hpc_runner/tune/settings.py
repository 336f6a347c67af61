"""The ``tune`` section of sweep.yaml: what every worker reads before it asks for a trial."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.tune.study import DIRECTIONS, make_pruner, make_sampler

TUNE_KEY = "tune"


@dataclass
class TuneSettings:
    """The search: its space (the --space options), budget, metric and Optuna's sampler and pruner."""

    space: list[str]
    trials: int
    metric: str
    direction: str | None = None  # None until tune_dir settles it (tune/direction.py); sweep.yaml always has one
    pruner: str = "asha"
    sampler: str = "tpe"
    seed: int | None = None
    pruner_options: dict[str, Any] = field(default_factory=dict)
    sampler_options: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        """Raise UserError on a budget, direction, sampler or pruner that cannot work (the space separately)."""
        if not isinstance(self.trials, int) or isinstance(self.trials, bool) or self.trials < 1:
            raise UserError(f"--trials {self.trials} is not a number of trials", expected="--trials N with N >= 1")
        if not self.metric:
            raise UserError("no --metric given", expected="the trainer's metric_name, e.g. --metric val_dice")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**32):
            raise UserError(f"--sampler-seed {self.seed} is not a seed Optuna takes",
                            expected="0 <= --sampler-seed < 2**32")
        if self.direction not in DIRECTIONS:
            raise UserError(f"unknown direction '{self.direction}'", expected="--direction maximize|minimize")
        make_sampler(self.sampler, self.seed, **self.sampler_options)
        make_pruner(self.pruner, **self.pruner_options)

    def to_record(self) -> dict[str, Any]:
        """Return the section as written in sweep.yaml."""
        return asdict(self)

    @classmethod
    def from_record(cls, data: Any, where: str = "sweep.yaml") -> TuneSettings:
        """Read the section back; raise ClusterError when the sweep dir is not a tune."""
        if not isinstance(data, dict) or not {"space", "trials", "metric"} <= set(data):
            raise ClusterError(f"no '{TUNE_KEY}' section with space, trials and metric", where=where,
                               expected="a sweep dir made by hpc-runner tune")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)
