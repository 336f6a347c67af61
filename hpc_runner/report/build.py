"""``report DIR``: write the report of a sweep dir or of a run dir, whichever DIR is."""

from __future__ import annotations

from pathlib import Path

from hpc_runner.errors import UserError
from hpc_runner.pages.run_report import Report, report_run
from hpc_runner.records.rundir import RUN_FILE
from hpc_runner.report.sweep_report import report_sweep
from hpc_runner.report.sweepdata import is_sweep_dir


def build_report(path: str | Path, each_run: bool = False) -> Report:
    """Write the report of a sweep dir or a run dir, whichever ``path`` is."""
    path = Path(path)
    if is_sweep_dir(path):
        return report_sweep(path, each_run)
    if (path / RUN_FILE).is_file():
        return report_run(path)
    raise not_a_report_dir(path)


def not_a_report_dir(path: str | Path) -> UserError:
    """Return the error for a dir with neither run.yaml nor sweep.yaml (``report`` names both)."""
    return UserError(
        "not a run dir or a sweep dir",
        where=str(path),
        expected="a folder with run.yaml (hpc-runner run/submit) or sweep.yaml (hpc-runner sweep)",
    )
