"""``open_target(DIR)`` (hpc_runner/cli/targets.py) decides once what status, resume, cancel, collect and report
were given: a run, sweep, tune or pipeline dir, each a class whose methods are the commands' operations. Real
dirs: a sweep submitted to the in-memory cluster, a tune's record, a run's run.yaml, a pipeline's record file."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from hpc_runner.cli import main
from hpc_runner.cli.targets import Pipeline, Run, Sweep, Tune, open_target
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.targets import NotATarget, RunTarget, SweepTarget, TuneTarget, load_target
from hpc_runner.report.watch import watch_status
from tests.jobs.test_governor import _sweep
from tests.sweep.test_logic_in_memory import new_sweep

MEMORY = {"profile": "mem", "settings": {"executor": "memory", "time": 10, "mem_gb": 1}}


def run_dir(folder: Path, status: str = "completed") -> Path:
    """A run dir as ``hpc-runner submit`` leaves it once its job ended (the in-memory cluster's profile)."""
    folder.mkdir(parents=True)
    rec = {"status": status, "created": "2026-11-27T10:00:00+00:00",
           "job": {"id": "7", "submitted": "2026-11-27T10:00:00+00:00", "cluster": MEMORY}}
    (folder / "run.yaml").write_text(yaml.safe_dump(rec))
    return folder


def tune_dir(folder: Path, trials: int = 3) -> Path:
    """A tune dir whose trials no worker has claimed yet (its record's tune section, no worker submitted)."""
    _sweep(folder, trials)
    with sr.locked(folder) as ledger:
        ledger.data["tune"] = {"metric": "val_dice", "direction": "maximize", "trials": trials}
        ledger.data["cluster"] = MEMORY
    return folder


def test_each_dir_opens_as_its_own_class(make_cluster, tmp_path: Path) -> None:
    make_cluster()
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "pipeline.yaml").write_text("kind: hpc-runner pipeline\n")
    opened = {name: open_target(path) for name, path in {
        "run": run_dir(tmp_path / "run"), "sweep": new_sweep(tmp_path, 2), "tune": tune_dir(tmp_path / "tune"),
        "pipeline": tmp_path / "study"}.items()}
    assert {n: type(t) for n, t in opened.items()} == {"run": Run, "sweep": Sweep, "tune": Tune,
                                                       "pipeline": Pipeline}
    assert {n: t.kind for n, t in opened.items()} == {n: n for n in opened}
    # the layers below the CLI see the same objects as the targets of jobs/targets.py
    assert isinstance(opened["run"], RunTarget) and isinstance(opened["tune"], TuneTarget)
    assert isinstance(opened["sweep"], SweepTarget) and isinstance(opened["tune"], SweepTarget)
    assert type(load_target(tmp_path / "tune")) is TuneTarget and type(load_target(tmp_path / "run")) is RunTarget
    # reading again keeps the class: status polls with it
    assert [type(opened[n].reload()) for n in ("run", "sweep", "tune")] == [Run, Sweep, Tune]


def test_what_differs_between_kinds_is_asked_of_the_target(make_cluster, tmp_path: Path) -> None:
    make_cluster()
    run, sweep, tune = (open_target(p) for p in (run_dir(tmp_path / "run"), new_sweep(tmp_path, 3),
                                                 tune_dir(tmp_path / "tune")))
    assert [t.title(3) for t in (run, sweep, tune)] == ["run", "sweep of 3 points", "sweep of 3 points"]
    assert [t.hints_resume for t in (run, sweep, tune)] == [False, True, True]
    assert [t.right_sizes for t in (run, sweep, tune)] == [True, True, False]
    assert run.top_up() == 0 and run.pending_retries([]) == set()
    assert sweep.right_size_again().startswith("hpc-runner sweep ... --right-size") and run.right_size_again() == "("
    # a tune's trials that no worker has claimed wait for one: none is queued, so they have not started
    states, _ = tune.states()
    assert [s.state for s in states] == ["NOT-STARTED"] * 3 and tune.pending_retries(states) == set()
    (run_state,), _ = run.states()
    assert run_state.state == "COMPLETED"


def test_status_of_each_kind_through_the_cli(make_cluster, tmp_path: Path, capsys) -> None:
    cluster = make_cluster()
    sweep = new_sweep(tmp_path, 2)
    for job in cluster.queued():
        cluster.finish(job)
    assert main(["status", str(sweep), "--no-submit"]) == 0
    out = capsys.readouterr().out
    assert f"sweep of 2 points in {sweep}" in out and "COMPLETED 2" in out
    run = run_dir(tmp_path / "run", status="failed")
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"run in {run}" in out and "resubmit the failed ones" not in out  # a run is resumed as itself
    watched = watch_status(open_target(sweep), 0.01, stream=io.StringIO(), max_polls=1,
                           top_up=lambda t: t.top_up(lambda line: None))
    assert watched.finished and [s.state for s in watched.states] == ["COMPLETED"] * 2
    assert main(["status", str(sweep), "--watch", "--interval", "0.01"]) == 0  # every point final: one poll
    assert f"sweep of 2 points in {sweep}" in capsys.readouterr().out


def test_a_dir_that_is_none_of_these_is_refused_as_before(tmp_path: Path, capsys) -> None:
    with pytest.raises(NotATarget, match="not a sweep dir or a run dir"):
        open_target(tmp_path)
    for command in ("status", "resume", "cancel", "collect"):
        assert main([command, str(tmp_path)]) == 2
        assert "not a sweep dir or a run dir" in capsys.readouterr().err
    assert main(["report", str(tmp_path)]) == 2  # report names what it reads its own way, as it always did
    assert "not a run dir or a sweep dir" in capsys.readouterr().err


def test_a_damaged_run_yaml_opens_but_only_report_goes_on(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "run.yaml").write_text("status: [completed\n")
    target = open_target(folder)  # report reads what it can of such a run (report/rundata.py)
    assert isinstance(target, Run) and target.unreadable is not None
    assert main(["status", str(folder)]) == 2
    assert "run.yaml" in capsys.readouterr().err
    assert main(["report", str(folder)]) == 0 and (folder / "report.html").is_file()
