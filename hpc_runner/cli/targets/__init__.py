"""What ``status``, ``resume``, ``cancel``, ``collect`` and ``report`` are pointed at, opened once.

``open_target(DIR)`` decides what DIR is (a pipeline dir here; a run, sweep or tune dir in jobs/targets.py's
``load_target``, the one place for those three) and returns an object whose methods are the commands'
operations, so each command module parses its arguments and makes one call. What differs between the kinds is a
method of each class (these here for the commands, those of jobs/targets.py for the layers below: report,
pipeline), never a comparison of kinds. The methods delegate to the functions that do the work; the command
modules keep what they print."""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from hpc_runner.cli.pipeline import cancel_main, collect_main, report_main, resume_main, status_main
from hpc_runner.cli.targets.points_collect import collect_cases, collect_points, collect_tune
from hpc_runner.cli.targets.points_resume import resume_run_dir, resume_sweep_dir, resume_tune_dir
from hpc_runner.cli.targets.points_status import show_points
from hpc_runner.jobs.cancel import cancel_target
from hpc_runner.jobs.targets import NotATarget, RunTarget, SweepTarget, TuneTarget, load_target
from hpc_runner.pages.run_report import report_run
from hpc_runner.pipeline.record import is_pipeline_dir
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import RecordError
from hpc_runner.report.sweep_report import report_sweep
from hpc_runner.sweep.submission import top_up as top_up_sweep
from hpc_runner.tune.summary import render, summarize


class CommandTarget(ABC):
    """A dir the commands are pointed at: a run, sweep, tune or pipeline dir."""

    path: Path

    @abstractmethod
    def status(self, args: argparse.Namespace) -> int:
        """``status DIR``: print where everything stands; return the exit code."""

    @abstractmethod
    def resume(self, args: argparse.Namespace) -> int:
        """``resume DIR``: submit again what failed or never ran; return the exit code."""

    @abstractmethod
    def cancel(self, args: argparse.Namespace) -> int:
        """``cancel DIR``: cancel what is still queued or running; return the exit code."""

    @abstractmethod
    def collect(self, args: argparse.Namespace) -> int:
        """``collect DIR``: write the results tables; return the exit code."""

    @abstractmethod
    def report(self, args: argparse.Namespace) -> int:
        """``report DIR``: write the plots and report.html; return the exit code."""


class PointsCommands(CommandTarget):
    """The commands of a dir with points (run, sweep, tune): its points' states (jobs/targets.py) do the work."""

    def top_up(self, log: Callable[[str], None] = print) -> int:
        """Submit the points that wait for a free submit slot; return how many went (none wait in a run dir)."""
        return 0

    def status(self, args: argparse.Namespace) -> int:
        """Print the points' states (cli/status.py), topping up the waiting ones unless --no-submit."""
        return show_points(args, self.readable())

    def cancel(self, args: argparse.Namespace) -> int:
        """Cancel the queued and running jobs of the points (one call to the scheduler)."""
        out = cancel_target(self.readable())
        print(f"hpc-runner: {out.message}")
        return 0

    def collect(self, args: argparse.Namespace) -> int:
        """Write results.csv and results.md (cli/collect.py), then what this kind adds to them."""
        return self.collect_more(collect_points(args, self.readable()), args.out)

    def report(self, args: argparse.Namespace) -> int:
        """Write the PNG plots and report.html of the dir."""
        report = self.write_report(each_run=args.runs)
        print(f"hpc-runner: wrote {len(report.pngs)} PNG plot(s) and the {report.kind} report {report.html}")
        print(f"  open: file://{report.html.resolve()}")
        return 0

    def readable(self) -> Any:
        """Return this target for a command that needs its record (a run checks that its run.yaml was read)."""
        return self

    def collect_more(self, states: list[Any], out: str | None) -> int:
        """Write what this kind adds to the results table; return the exit code."""
        return 0

    @abstractmethod
    def write_report(self, each_run: bool) -> Any:
        """Write the report of the dir; return it (hpc_runner.report's Report)."""

    def right_size_again(self) -> str:
        """Return how status words the next submission with the suggested resources (before the options)."""
        return "("

    def print_summary(self, as_json: bool) -> None:
        """Print what status shows after the points' table (a tune: its trials' summary)."""


@dataclass
class Run(RunTarget, PointsCommands):
    """A run dir (run.yaml): one point."""

    unreadable: RecordError | None = None  # a damaged run.yaml: report still reads what it can, nothing else runs

    @classmethod
    def open(cls, path: Path) -> Run:
        """Return the run at ``path``; a damaged run.yaml is named by the first command that needs it."""
        try:
            return cls.load(path)
        except RecordError as exc:  # report never needed the record: it reads what it can, as it always did
            return cls(path, [], unreadable=exc)

    def readable(self) -> Run:
        """Return this run; raise the error of its run.yaml when that could not be read."""
        if self.unreadable is not None:
            raise self.unreadable
        return self

    def resume(self, args: argparse.Namespace) -> int:
        """Resubmit the run when it failed (cli/resume.py)."""
        return resume_run_dir(args, self.readable())

    def write_report(self, each_run: bool) -> Any:
        """Write the run's report (its own plots: ``each_run`` is for sweeps)."""
        return report_run(self.path)


class Sweep(SweepTarget, PointsCommands):
    """A sweep dir (sweep.yaml): many points; a sharded one (``submit --shards``) also merges its cases."""

    def top_up(self, log: Callable[[str], None] = print) -> int:
        """Submit the waiting points into the free submit slots (the governor's one step, sweep/submission.py)."""
        return top_up_sweep(self.path, log)

    def resume(self, args: argparse.Namespace) -> int:
        """Resubmit the failed and missing points (cli/resume.py)."""
        return resume_sweep_dir(args, self)

    def collect_more(self, states: list[Any], out: str | None) -> int:
        """A sharded sweep merges its shards' cases.csv into one table (1 when a shard has none)."""
        assert self.record is not None  # a sweep dir always has its sweep.yaml
        if self.record.data.get("shards"):
            return collect_cases(self, states, out)
        return 0

    def write_report(self, each_run: bool) -> Any:
        """Write the sweep's report (``each_run``: each point's own report too, linked)."""
        return report_sweep(self.path, each_run)

    def right_size_again(self) -> str:
        """Return the sweep command that applies the suggestion."""
        return f"hpc-runner sweep ... --right-size {self.path}   (or "


class Tune(TuneTarget, Sweep):
    """A tune dir: a sweep whose trials its workers claim; resume restarts workers, collect adds tune.md."""

    def resume(self, args: argparse.Namespace) -> int:
        """Restart the tune's workers (cli/resume.py)."""
        return resume_tune_dir(args, self)

    def collect_more(self, states: list[Any], out: str | None) -> int:
        """Write tune.md and tune.json (trials, best, rungs, importances) and print the summary."""
        collect_tune(self, out)
        return super().collect_more(states, out)

    def print_summary(self, as_json: bool) -> None:
        """Print the trials' summary: counts, best so far, rungs, importances."""
        summary = summarize(self.path)
        print(dumps_json({"tune": summary.to_json()}, default=str) if as_json else render(summary))


@dataclass
class Pipeline(CommandTarget):
    """A pipeline dir (pipeline.yaml): its stages, each a run, sweep or tune dir of its own (cli/pipeline.py)."""

    path: Path
    kind: ClassVar[str] = "pipeline"  # for people (messages), never compared

    def status(self, args: argparse.Namespace) -> int:
        """Print every stage's state (``--all``: each search's points too)."""
        return status_main(args)

    def resume(self, args: argparse.Namespace) -> int:
        """Queue again only the stages that failed or never ran."""
        return resume_main(args)

    def cancel(self, args: argparse.Namespace) -> int:
        """Cancel every stage still queued or running."""
        return cancel_main(args)

    def collect(self, args: argparse.Namespace) -> int:
        """Write pipeline.md and pipeline.json (the chain)."""
        return collect_main(args)

    def report(self, args: argparse.Namespace) -> int:
        """Write report.html of the chain, each stage's own report linked."""
        return report_main(args)


def open_target(path: str | Path, unknown: Callable[[Path], Exception] | None = None) -> CommandTarget:
    """Return the pipeline, sweep, tune or run dir at ``path`` as the object the commands call.

    A dir that is none of these raises jobs/targets.py's NotATarget (exit 2), or ``unknown(path)`` when a
    command names what it expected its own way (``report``)."""
    if is_pipeline_dir(path):
        return Pipeline(Path(path))
    try:
        target = load_target(path, run=Run.open, sweep=Sweep.of_record, tune=Tune.of_record)
    except NotATarget:
        if unknown is None:
            raise
        raise unknown(Path(path)) from None
    assert isinstance(target, PointsCommands)
    return target

