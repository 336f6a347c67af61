"""The sweep's results file (jobs/results.py): each point's job appends one line when the point ends; collect reads
that one file instead of every run dir, and reads a point's run dir only where the file has no usable line of its
current hand-off (none yet, cut short, garbage, oversized, an earlier job's), so no result is ever lost."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from hpc_runner.cli.targets import open_target
from hpc_runner.cli.targets.points_collect import collect_points
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs import states
from hpc_runner.jobs import task as sweep_task
from hpc_runner.jobs.job import RunFailed
from hpc_runner.jobs.results import (
    MAX_LINE_BYTES,
    RESULTS_FILE,
    PointResult,
    ResultsFile,
    RunFigures,
    append_result,
    handoff_of,
    record_point_result,
)
from hpc_runner.jobs.targets import load_target
from hpc_runner.records.rundir import RunDir, now_iso
from hpc_runner.scheduler.executor import SchedulerAnswer
from hpc_runner.scheduler.job_env import own_job_id
from hpc_runner.scheduler.job_state import FROM_NOWHERE
from hpc_runner.scheduler.memory.executor import MemoryExecutor
from hpc_runner.sweep import collect
from tests.sweep.test_logic_in_memory import new_sweep

FAILS = 3  # the point whose run fails


def _summary(index: int) -> dict[str, Any]:
    return {"status": "completed", "epochs": 2, "steps": 8, "final_loss": 0.25, "metric_name": "dice",
            "final_metric": 0.5 + index / 10, "best_metric": 0.6 + index / 10, "best_epoch": 2, "wall_s": 3.5,
            "per_epoch": [{"loss": 1.0}] * 2}


def _fake_point(sweep_dir: str, index: int, point_dir: str, overrides: dict, entry: Any = None,
                job_record: Any = None, pack: Any = None) -> dict[str, Any]:
    """What run_sweep_point leaves in the run dir (run.yaml final, summary.json), without training anything."""
    Path(point_dir).mkdir(parents=True, exist_ok=True)
    status = "failed" if index == FAILS else "completed"
    RunDir(point_dir).write_yaml("run.yaml", {"status": status, "entry": "training", "ended": now_iso(),
                                              "job": {"id": own_job_id() or "local"}})
    if status == "failed":
        raise RunFailed("ValueError: boom")
    (Path(point_dir) / "summary.json").write_text(json.dumps(_summary(index)))
    return {"status": "completed", "run_dir": point_dir}


@pytest.fixture
def ended_sweep(make_cluster, tmp_path, monkeypatch) -> tuple[Any, Path]:
    """A 5-point sweep whose tasks ran on the in-memory cluster (point 3 failed): each appended its line."""
    cluster = make_cluster()
    monkeypatch.setattr(sweep_task, "run_sweep_point", _fake_point)
    path = new_sweep(tmp_path, 5)
    for job_id in [p["job_id"] for p in sr.SweepRecord.load(path).points]:
        cluster.run(job_id)
    return cluster, path


def _collect(path: Path, out: Path) -> str:
    out.mkdir()
    collect_points(argparse.Namespace(out=str(out), quiet=True), open_target(path))
    return (out / sr.RESULTS_CSV).read_text() + (out / sr.RESULTS_MD).read_text()


def _forget_jobs(monkeypatch) -> None:
    """The scheduler's accounting no longer knows the jobs (purged, or asked past its window)."""
    monkeypatch.setattr(MemoryExecutor, "query", lambda self, job_ids, since=None: SchedulerAnswer({}, FROM_NOWHERE))


def _no_run_dir_reads(monkeypatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a run dir was read")

    for module, name in ((collect, "_summary"), (collect, "shared_bytes_of"), (states, "_status_and_job"),
                         (states, "run_status"), (states, "_state_from_record")):
        monkeypatch.setattr(module, name, refuse)


def test_each_point_that_ends_appends_one_line_of_its_hand_off(ended_sweep) -> None:
    _, path = ended_sweep
    record = sr.SweepRecord.load(path)
    lines = ResultsFile(path).lines()
    assert len(lines) == 5 and (path / RESULTS_FILE).read_bytes().count(b"\n") == 5
    for p in record.points:
        got = ResultsFile(path).of(p)
        assert got is not None and (got.job, got.handoff) == handoff_of(p) == (p["job_id"], 1)
        assert got.status == ("failed" if p["index"] == FAILS else "completed")
        assert got.summary() == ({} if p["index"] == FAILS else
                                 {k: v for k, v in _summary(p["index"]).items() if k in RunFigures.__annotations__})


def test_collect_reads_the_results_file_and_no_run_dir_and_its_table_is_the_run_dirs(ended_sweep, tmp_path,
                                                                                    monkeypatch) -> None:
    _forget_jobs(monkeypatch)
    from_dirs = tmp_path / "from-dirs"
    (path := ended_sweep[1]).joinpath(RESULTS_FILE).rename(tmp_path / "aside")
    table = _collect(path, from_dirs)  # a sweep without the file: every run dir read, as before
    states_before = [(s.state, s.source) for s in load_target(path).states(ResultsFile(path))[0]]
    (tmp_path / "aside").rename(path / RESULTS_FILE)
    with monkeypatch.context() as m:
        _no_run_dir_reads(m)
        assert _collect(path, tmp_path / "from-file") == table
        target = load_target(path)
        got = target.states(target.results)[0]
    assert [s.state for s in got] == [s for s, _ in states_before]
    assert {s.source for s in got} == {RESULTS_FILE} and {src for _, src in states_before} == {"run.yaml"}
    status = load_target(path)  # status reads the run dirs it needs, never the whole file
    assert [(s.state, s.source) for s in status.states()[0]] == states_before and status.results.note() is None
    assert status.results._lines is None
    assert table.count("COMPLETED") == 8 and table.count("FAILED") == 2 and ",0.6," in table


def _lines(path: Path) -> list[bytes]:
    return (path / RESULTS_FILE).read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize("damage", ["cut", "garbage", "oversized", "wrong types", "unknown summary key"])
def test_a_damaged_line_is_skipped_and_its_point_read_from_its_run_dir(ended_sweep, tmp_path, monkeypatch,
                                                                       capsys, damage) -> None:
    _forget_jobs(monkeypatch)
    _, path = ended_sweep
    table = _collect(path, tmp_path / "whole")
    lines = _lines(path)
    victim = json.loads(lines[1])
    if damage == "cut":  # the last line, cut short by a job killed while writing it
        lines = [*lines[:1], *lines[2:], lines[1][: len(lines[1]) // 2]]
    elif damage == "garbage":
        lines[1] = b"\x00\xff not json {\n"
    elif damage == "oversized":  # valid JSON, but longer than any line the writer writes
        lines[1] = json.dumps({**victim, "pad": "x" * MAX_LINE_BYTES}).encode() + b"\n"
    elif damage == "wrong types":
        lines[1] = json.dumps({**victim, "status": ["completed"], "handoff": "1"}).encode() + b"\n"
    else:
        lines[1] = json.dumps({**victim, "summary": {**victim["summary"], "per_epoch": [1]}}).encode() + b"\n"
    (path / RESULTS_FILE).write_bytes(b"".join(lines))
    target = load_target(path)
    point = target.points[victim["index"]]
    assert target.results.of(point) is None and len(target.results.lines()) == 4
    assert _collect(path, tmp_path / "damaged") == table  # the run dir said the same: nothing lost
    assert "damaged line(s) skipped" in capsys.readouterr().out


def test_a_point_missing_from_the_file_is_read_from_its_run_dir(ended_sweep, tmp_path, monkeypatch) -> None:
    _forget_jobs(monkeypatch)
    _, path = ended_sweep
    table = _collect(path, tmp_path / "whole")
    lines = _lines(path)
    missing = json.loads(lines[2])["index"]
    (path / RESULTS_FILE).write_bytes(b"".join(lines[:2] + lines[3:]))  # its job was killed before it appended
    target = load_target(path)
    got = {s.index: s for s in target.states(target.results)[0]}
    assert got[missing].source == "run.yaml" and {s.source for i, s in got.items() if i != missing} == {RESULTS_FILE}
    assert _collect(path, tmp_path / "one-missing") == table


def test_a_line_of_an_earlier_hand_off_is_not_used_once_the_point_is_sent_again(ended_sweep) -> None:
    _, path = ended_sweep
    with sr.locked(path) as ledger:  # resume: the failed point goes to a new job
        ledger.retry(FAILS)
        ledger.submit(FAILS, "9999_0")
    record = sr.SweepRecord.load(path)
    assert ResultsFile(path).of(record.points[FAILS]) is None  # its line names job 1 of the point, not job 2
    assert ResultsFile(path).of(record.points[0]) is not None


def _append_many(sweep_dir: str, worker: int, count: int) -> None:
    for i in range(count):
        index = worker * count + i
        figures = RunFigures(metric_name="dice", epochs=2, final_metric=index / 1000)
        assert append_result(sweep_dir, PointResult(index, f"{worker}_{i}", 1, "completed", figures, 10 * index))


def test_concurrent_appends_of_four_processes_lose_no_line(tmp_path) -> None:
    ctx = multiprocessing.get_context("spawn")  # as separate as the jobs of a sweep: no lock state inherited
    workers = [ctx.Process(target=_append_many, args=(str(tmp_path), w, 200)) for w in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    data = (tmp_path / RESULTS_FILE).read_bytes()
    assert data.count(b"\n") == 800 and data.endswith(b"\n")
    results = ResultsFile(tmp_path)
    lines = results.lines()
    assert results.skipped == 0 and len(lines) == 800
    assert sorted(r.index for r in lines.values()) == list(range(800))
    assert all(r.shared_bytes == 10 * r.index and r.figures.final_metric == r.index / 1000 for r in lines.values())


def test_after_a_cut_line_the_next_append_starts_a_line_of_its_own(tmp_path) -> None:
    (tmp_path / RESULTS_FILE).write_bytes(b'{"index": 0, "job": "1_0", "hand')  # a job killed mid-write
    assert append_result(tmp_path, PointResult(1, "1_1", 1, "completed"))
    results = ResultsFile(tmp_path)
    assert [r.index for r in results.lines().values()] == [1] and results.skipped == 1


def test_a_planted_link_is_never_followed_and_the_point_is_read_from_its_run_dir(tmp_path, capsys) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    sweep = tmp_path / "sweep"
    run_dir = sweep / "points" / "0000"
    run_dir.mkdir(parents=True)
    RunDir(run_dir).write_yaml("run.yaml", {"status": "completed", "job": {"id": "5_0"}})
    os.symlink(outside, sweep / RESULTS_FILE)
    assert record_point_result(sweep, 0, ("5_0", 1), run_dir) is None  # the task goes on
    assert outside.read_text() == "mine\n" and "not a regular file" in capsys.readouterr().out
    assert ResultsFile(sweep).of({"index": 0, "job_id": "5_0", "jobs": ["5_0"]}) is None


def test_no_line_is_written_for_a_run_that_has_not_ended_or_is_another_jobs(tmp_path) -> None:
    run_dir = tmp_path / "points" / "0000"
    run_dir.mkdir(parents=True)
    RunDir(run_dir).write_yaml("run.yaml", {"status": "running", "job": {"id": "5_0"}})
    assert record_point_result(tmp_path, 0, ("5_0", 1), run_dir) is None
    RunDir(run_dir).write_yaml("run.yaml", {"status": "completed", "job": {"id": "4_0"}})
    assert record_point_result(tmp_path, 0, ("5_0", 1), run_dir) is None
    (run_dir / "summary.json").write_text(json.dumps({"final_metric": "high"}))  # not a figure a line can hold
    RunDir(run_dir).write_yaml("run.yaml", {"status": "completed", "job": {"id": "5_0"}})
    assert record_point_result(tmp_path, 0, ("5_0", 1), run_dir) is None
    assert not (tmp_path / RESULTS_FILE).exists()
