"""Read-only commands are read-only for every kind of dir (issue 32): ``status --no-submit`` leaves every file's
bytes and mtime, and the set of files, of a run, sweep or tune dir as they were (a pipeline dir:
tests/pipeline/test_pipeline_in_memory.py); ``collect --out ELSEWHERE`` too; ``report`` adds its page and plots and
changes nothing else. ``collect`` has no top-up, so no ``--no-submit``: it never submits. Each dir is one a plain
``status`` would write to (a point waiting for a slot, a failure a --retry rule sends again), so the snapshot is shown
to see a write. Through the CLI in this process, against the in-memory cluster."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution

from hpc_runner.cli import main
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.tune import trials
from hpc_runner.tune.study import journal_path, open_study, read_study
from hpc_runner.tune.submit import send_workers
from tests.cli.test_open_target import MEMORY, run_dir
from tests.sweep.test_logic_in_memory import SETTINGS, job_of, new_sweep

Snapshot = dict[str, tuple[int, int, str | None]]
REPORT = ("report.html", "plots")  # what `report` writes into the dir it is given
TABLES = ("results.csv", "results.md", "tune.md", "tune.json", "cases.csv", "cases.md")  # `collect` without --out


def snapshot(folder: Path) -> Snapshot:
    """Every path under ``folder`` (``.``: the folder itself): its mode, mtime (ns) and, for a file, its bytes'
    hash (a link: its target). A lock file made and removed again shows as the mtime of its folder."""
    out: Snapshot = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            data: str | None = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            data = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        out[str(path.relative_to(folder))] = (st.st_mode, st.st_mtime_ns, data)
    return out


def changed(before: Snapshot, after: Snapshot, outputs: tuple[str, ...] = ()) -> list[str]:
    """Return the paths that changed (made, removed, written, touched), leaving out the command's own outputs
    (paths with a component named in ``outputs``) and the folders that received one."""
    diff = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    own = {p for p in diff if set(Path(p).parts) & set(outputs)}
    parents = {str(parent) for p in own for parent in Path(p).parents}
    return sorted(diff - own - parents)


def run_all(folder: Path, tmp_path: Path, capsys, outputs: tuple[str, ...] = REPORT) -> None:
    """``status --no-submit`` (plain and --json --all), ``collect --out`` elsewhere and ``report``: nothing of
    ``folder`` changes but the report's own files."""
    before = snapshot(folder)
    for args in (["status", str(folder), "--no-submit"], ["status", str(folder), "--no-submit", "--json", "--all"]):
        assert main(args) == 0, capsys.readouterr()
        assert changed(before, snapshot(folder)) == [], args
    for polling in ("--wait", "--watch"):  # each poll would top up without --no-submit
        code = main(["status", str(folder), "--no-submit", polling, "--interval", "0.01", "--timeout", "0.05"])
        assert code in (0, 1)  # 1: not every point ended well when the timeout came
        assert changed(before, snapshot(folder)) == [], polling
    assert main(["collect", str(folder), "--out", str(tmp_path / "tables"), "--quiet"]) == 0, capsys.readouterr()
    assert changed(before, snapshot(folder)) == [] and (tmp_path / "tables" / sr.RESULTS_CSV).is_file()
    assert main(["report", str(folder)]) == 0, capsys.readouterr()
    after = snapshot(folder)
    assert changed(before, after, outputs) == [] and "report.html" in after
    capsys.readouterr()


def test_a_run_dir_is_left_as_it_was_by_status_collect_and_report(make_cluster, tmp_path: Path, capsys) -> None:
    make_cluster()
    folder = run_dir(tmp_path / "run", status="failed")
    (folder / "metrics.jsonl").write_text('{"epoch": 0, "loss": 1.0}\n')
    run_all(folder, tmp_path, capsys)
    before = snapshot(folder)
    assert main(["status", str(folder)]) == 0  # a run has no top-up: plain status writes nothing either
    assert changed(before, snapshot(folder)) == []


def test_a_sweep_dir_is_left_as_it_was_by_status_no_submit_collect_and_report(make_cluster, tmp_path: Path,
                                                                             capsys) -> None:
    cluster = make_cluster(max_submit=3)
    folder = new_sweep(tmp_path, 4, retry={"OUT_OF_MEMORY": "mem*2"})  # 3 queued, 1 waits for a slot
    cluster.advance(0)
    cluster.finish(job_of(folder, 0), "OUT_OF_MEMORY")  # a --retry rule sends it again at the next top-up
    cluster.finish(job_of(folder, 1))
    sbatch = cluster.calls["sbatch"]
    run_all(folder, tmp_path, capsys)
    assert cluster.calls["sbatch"] == sbatch
    before = snapshot(folder)
    assert main(["status", str(folder)]) == 0  # the top-up: the retry and the waiting point go, sweep.yaml says so
    assert "sweep.yaml" in changed(before, snapshot(folder)) and cluster.calls["sbatch"] > sbatch


def tune_dir(folder: Path) -> Path:
    """A tune dir as its worker leaves it after two trials: sweep.yaml with the trials claimed and finished, one
    worker queued on the in-memory cluster, the Optuna journal with the values reported."""
    tune = {"space": ["x=uniform(0,1)"], "metric": "val_dice", "direction": "maximize", "trials": 3,
            "sampler": "random", "pruner": "none"}
    folder.mkdir(parents=True)
    sr.write_new(sr.SweepRecord(folder, {"kind": sr.KIND, "version": 1, "submissions": [], "state": sr.TUNE,
                                         "tune": tune, "cluster": MEMORY}, sr.new_trials(3)))
    out = Submitted(folder)
    send_workers(folder, [0], executor_for(ClusterProfile("mem", [], SETTINGS)), reason="tune", out=out,
                 preflight=False)
    study = open_study(folder, "maximize", "random", "none")
    for value in (0.3, 0.6):
        trial = study.ask({"x": FloatDistribution(0, 1)})
        trial.report(value, 1)
        study.tell(trial, value)
        with trials.locked(folder) as ledger:
            point = ledger.claim_trial(0, out.job_ids[0], trial.params, trial)
            assert point is not None
            ledger.finish_trial(point["index"], trials.COMPLETED, value, 1, None)
    return folder


def test_a_tune_dir_and_its_journal_are_left_as_they_were(make_cluster, tmp_path: Path, capsys) -> None:
    make_cluster()
    folder = tune_dir(tmp_path / "tune")
    lines = journal_path(folder).read_text().splitlines()
    run_all(folder, tmp_path, capsys)  # it used to append a create-study line under the journal's lock each time
    assert journal_path(folder).read_text().splitlines() == lines
    before = snapshot(folder)
    assert main(["status", str(folder)]) == 0  # a tune's trials never wait for a slot: no top-up writes either
    assert "best so far: trial 1 (point 0001) val_dice 0.6" in capsys.readouterr().out
    assert main(["collect", str(folder), "--quiet"]) == 0  # into the dir: its tables, nothing else
    assert changed(before, snapshot(folder), TABLES) == []


def test_the_study_is_read_without_making_a_journal_or_writing_to_it(tmp_path: Path) -> None:
    assert read_study(tmp_path) is None and list(tmp_path.iterdir()) == []  # no journal: none is made
    study = open_study(tmp_path, "maximize", "random", "none")
    study.tell(study.ask({"x": FloatDistribution(0, 1)}), 0.5)
    before = snapshot(tmp_path)
    read = read_study(tmp_path)
    assert [t.value for t in read.get_trials()] == [0.5] and read.direction == optuna.study.StudyDirection.MAXIMIZE
    with pytest.raises(RuntimeError, match="opened read-only"):
        read.ask()  # a write to the journal is refused, not made
    assert changed(before, snapshot(tmp_path)) == []
