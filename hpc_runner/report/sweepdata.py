"""What a report needs from a sweep dir: the states and results rows of ``hpc-runner status``/``collect``,
and each point's run data. States come from the sweep tracking code (one scheduler call), not from here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.jobs.ledger import SWEEP_FILE
from hpc_runner.jobs.targets import SweepTarget, load_target
from hpc_runner.pages.rundata import RunData, load_run
from hpc_runner.sweep.collect import result_rows


@dataclass
class SweepData:
    """A sweep dir, read: the tracking target, point states, results rows and each point's run data."""

    path: Path
    target: Any  # hpc_runner.jobs.targets.Target
    states: list[Any]  # hpc_runner.jobs.states.PointState, in point order
    answer: Any  # hpc_runner.jobs.states.SchedulerAnswer
    columns: list[str]
    rows: list[dict[str, Any]]
    runs: dict[int, RunData] = field(default_factory=dict)

    @property
    def param_ids(self) -> list[str]:
        """Return the swept ids, in axis order."""
        return list(self.target.param_ids)

    @staticmethod
    def effective(state: Any) -> dict[str, Any]:
        """Return a point's swept values with the fixes given on resume on top."""
        return {**state.params, **state.extra}

    @property
    def bundle(self) -> str:
        """Return the bundle name recorded in sweep.yaml."""
        return str(self.target.record.data.get("bundle") or self.path.name)


def is_sweep_dir(path: str | Path) -> bool:
    """True when ``path`` holds a sweep record."""
    return (Path(path) / SWEEP_FILE).is_file()


def load_sweep(path: str | Path) -> SweepData:
    """Read a sweep dir: states (one scheduler call), results rows, and every point's run dir that exists."""
    target = load_target(path)
    if not isinstance(target, SweepTarget):  # a tune dir is a sweep too
        raise UserError("not a sweep dir", where=str(path), expected="a folder with sweep.yaml (hpc-runner sweep)")
    states, answer = target.states()
    states = sorted(states, key=lambda s: s.index)
    columns, rows = result_rows(target, states, answer)  # with what each point's job used
    data = SweepData(Path(path), target, states, answer, columns, rows)
    for st in states:
        if st.run_dir.is_dir():
            data.runs[st.index] = load_run(st.run_dir)
    return data
