"""Every loop that calls the scheduler is bounded, failed calls included (issue 32): each sbatch call of a sweep,
queued, refused by a limit or failed, is counted in sweep.yaml against one budget (``max_submit_calls``, by default
N x (1 + max_returns + max_retries)); a sweep that spent it submits nothing more, whatever tops it up, and status
says so; ``resume --max-submit-calls`` raises it. A tune's workers count in the same budget. Against the in-memory
cluster, on a site whose QOS submit limit squeue and sacctmgr do not show, so that sbatch refuses every time."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.cli import main
from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import Backoff
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.scheduler.memory.executor import MemoryCluster
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.submission import top_up
from hpc_runner.tune.submit import send_workers
from tests.cli.test_open_target import MEMORY
from tests.cli.test_read_only import changed, snapshot, tune_dir
from tests.sweep.test_logic_in_memory import SETTINGS, job_of, new_sweep

NO_WAIT = Backoff(sleep=lambda seconds: None)  # the back-off's 1+2+4+8 s between refusals, skipped


def hide_the_limits(cluster: MemoryCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """The QOS submit limit still refuses at sbatch, but the limits read before it say nothing of it (a site whose
    sacctmgr the user may not read): the governor counts no free slot, so it tries, and is refused, every time."""
    real = cluster.limits

    def hidden(settings):
        limits = real(settings)
        limits.limits = []
        limits.recount()
        return limits

    monkeypatch.setattr(cluster, "limits", hidden)


def test_a_qos_limit_that_refuses_every_time_stops_the_sbatch_calls_at_the_sweeps_budget(
        make_cluster, tmp_path: Path, monkeypatch, capsys) -> None:
    cluster = make_cluster(max_submit=2)
    path = new_sweep(tmp_path, 3, retry={"OUT_OF_MEMORY": "mem*2"})  # 2 queued (limits read), 1 waits
    with sr.locked(path) as ledger:
        ledger.data["cluster"] = MEMORY  # the profile `resume` takes again, as `hpc-runner sweep` records it
    record = sr.SweepRecord.load(path)
    budget = 3 * (1 + sr.MAX_RETURNS + sr.MAX_RETRIES)
    assert (record.submit_calls(), record.submit_call_budget(), cluster.calls["sbatch"]) == (1, budget, 1)
    hide_the_limits(cluster, monkeypatch)
    for _ in range(20):  # task ends, status, --watch ticks, resumes: each a top-up, each 5 refused calls before
        top_up(path, log=lambda line: None, backoff=NO_WAIT)
    record = sr.SweepRecord.load(path)
    assert cluster.calls["sbatch"] == budget == record.submit_calls()  # refused calls counted, none past it
    assert len(cluster.refused) == budget - 1 and record.submit_calls_left() == 0
    assert record.points[2]["submit"] == sr.WAITING and not record.points[2].get("job_id")

    cluster.max_submit = None  # the queue empties; still nothing goes: the budget is spent
    cluster.advance(0)
    cluster.finish(job_of(path, 0), "OUT_OF_MEMORY")  # its --retry rule is not applied either
    before = snapshot(path)
    assert main(["status", str(path)]) == 0
    out = capsys.readouterr()
    assert cluster.calls["sbatch"] == budget and changed(before, snapshot(path)) == []  # no lock, no write
    assert f"stopped submitting: the sweep made {budget} of its {budget} submit calls" in out.out
    assert "1 point(s) wait" in out.out and f"resume {path} --max-submit-calls N" in out.out
    assert "hpc-runner: 1 waiting point(s) not submitted" in out.out  # the top-up's own line

    assert main(["resume", str(path), "--max-submit-calls", str(budget + 2), "--no-preflight"]) == 0
    record = sr.SweepRecord.load(path)
    assert record.submit_call_budget() == budget + 2 and cluster.calls["sbatch"] == record.submit_calls()
    assert record.points[0]["retries"] == 1 and record.points[2]["submit"] == sr.SUBMITTED  # both went again


def test_resume_of_a_sweep_that_spent_its_budget_is_refused_before_anything_moves(make_cluster, tmp_path: Path,
                                                                                  capsys) -> None:
    cluster = make_cluster()
    path = new_sweep(tmp_path, 1)
    with sr.locked(path) as ledger:
        ledger.set_bound("max_submit_calls", 1)  # `sweep --max-submit-calls 1`: its first sbatch spent it
    cluster.advance(0)
    cluster.finish(job_of(path, 0), "FAILED")
    before = snapshot(path)
    assert main(["resume", str(path), "--no-preflight"]) == 2
    assert "made 1 of its 1 submit calls" in capsys.readouterr().err
    assert changed(before, snapshot(path)) == [] and cluster.calls["sbatch"] == 1


def test_a_tunes_workers_count_in_its_budget(make_cluster, tmp_path: Path) -> None:
    cluster = make_cluster()
    folder = tune_dir(tmp_path / "tune")  # its worker's array: one sbatch call
    assert sr.SweepRecord.load(folder).submit_calls() == 1 == cluster.calls["sbatch"]
    with sr.locked(folder) as ledger:
        ledger.set_bound("max_submit_calls", 1)
    executor = executor_for(ClusterProfile("mem", [], SETTINGS))
    with pytest.raises(ClusterError, match="made 1 of its 1 submit calls"):
        send_workers(folder, [1], executor, reason="resume", out=Submitted(folder), preflight=False)
    assert cluster.calls["sbatch"] == 1 and sr.SweepRecord.load(folder).submit_calls() == 1


def test_a_refused_worker_sbatch_is_counted_too(make_cluster, tmp_path: Path) -> None:
    cluster = make_cluster()
    folder = tune_dir(tmp_path / "tune")
    executor = executor_for(ClusterProfile("mem", [], {**SETTINGS, "mem_gb": 4096}))  # no node has that much
    with pytest.raises(ClusterError):
        send_workers(folder, [1], executor, reason="resume", out=Submitted(folder), preflight=False)
    assert sr.SweepRecord.load(folder).submit_calls() == 2 == cluster.calls["sbatch"]
