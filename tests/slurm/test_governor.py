"""The submission governor: never more jobs queued than the QOS allows; the rest wait and are topped up.

The SLURM tests set ``MaxSubmitJobsPerUser`` on the local cluster's QOS ``hpcr-limited``
(scripts/local-slurm.sh creates it) and reset it afterwards; SLURM itself enforces the limit.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from hpc_runner.jobs.governor import Backoff, group_tasks, outside_the_job, plan_arrays
from hpc_runner.scheduler.slurm.limits import read_limits
from hpc_runner.sweep.submission import top_up

ROOT = Path(__file__).resolve().parents[2]
TINY = str(Path(__file__).parent / "data" / "tiny_point")  # its run prints one line
QOS = "hpcr-limited"
CTLD_LOG = Path(os.environ.get("LOCAL_SLURM_DIR", "/tmp/hpcr-slurm")) / "log" / "slurmctld.log"


def _record(sweep: Path) -> dict:
    return json.loads((sweep / "sweep.yaml").read_text())


def _queued(cluster) -> list[str]:
    """The user's jobs in the QOS, one per array task, pending or running (what MaxSubmitJobsPerUser counts)."""
    return cluster.run("squeue", "-h", "-r", "-q", QOS, "-u", read_limits({}).user, "-o", "%i").stdout.split()


def _wait_for_empty_qos(cluster, timeout: float = 120) -> None:
    """Wait until no job of the user is in the QOS: an earlier test's last tasks may still be ending."""
    deadline = time.monotonic() + timeout
    while _queued(cluster):
        assert time.monotonic() < deadline, f"jobs of another test stay in the QOS: {_queued(cluster)}"
        time.sleep(0.5)


def _refusals_in_ctld_log() -> int:
    return CTLD_LOG.read_text(errors="replace").count("QOSMaxSubmitJobPerUserLimit") if CTLD_LOG.is_file() else 0


class QueueSampler(threading.Thread):
    """Counts the user's jobs in the QOS every 0.2 s until stopped; keeps the largest count seen."""

    def __init__(self, cluster) -> None:
        super().__init__(daemon=True)
        self.cluster, self.most, self.samples, self.error = cluster, 0, 0, None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.most = max(self.most, len(_queued(self.cluster)))
                self.samples += 1
                self.stop.wait(0.2)
        except Exception as exc:  # the test reads it: a sampler that died must fail the test
            self.error = exc


def _wait_until_done(cluster, sweep: Path, n: int, timeout: float) -> dict:
    """Wait until no point waits and every point's run.yaml says completed (or the time is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = _record(sweep)
        waiting = [p for p in record["points"] if p["submit"] == "waiting"]
        done = sum(1 for p in record["points"] if _status(sweep / p["dir"]) == "completed")
        if not waiting and done == n:
            return record
        time.sleep(2)
    return _record(sweep)


def _status(run_dir: Path) -> str | None:
    import yaml

    try:
        return (yaml.safe_load((run_dir / "run.yaml").read_text()) or {}).get("status")
    except (OSError, yaml.YAMLError):
        return None


# ---------------------------------------------------------------- planning, no cluster


def test_points_are_grouped_into_tasks_of_k_in_index_order():
    assert group_tasks([0, 1, 2, 3, 4], 2) == [[0, 1], [2, 3], [4]]
    assert group_tasks([7, 3, 9], 1) == [[7], [3], [9]]


def test_arrays_are_cut_at_the_free_slots_then_at_max_array_size():
    assert plan_arrays(300, 50, 1001) == ([50], 250)
    assert plan_arrays(2500, None, 1001) == ([1001, 1001, 498], 0)
    assert plan_arrays(30, 25, 10) == ([10, 10, 5], 5)
    assert plan_arrays(5, 0, 10) == ([], 5)


def test_sbatch_from_inside_a_job_sees_none_of_the_jobs_slurm_variables(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    monkeypatch.setenv("SLURMD_NODENAME", "vm")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    monkeypatch.setenv("SBATCH_ACCOUNT", "mine")  # the user's own: SLURM sets no SBATCH_* in a job
    with outside_the_job():
        seen = subprocess.run(["env"], capture_output=True, text=True).stdout.splitlines()
    assert "SLURM_CONF=/etc/slurm/slurm.conf" in seen and "SBATCH_ACCOUNT=mine" in seen
    assert not [v for v in seen if v.startswith(("SLURM_JOB_ID", "SLURM_ARRAY", "SLURMD_"))]
    assert os.environ["SLURM_JOB_ID"] == "77" and os.environ["SLURMD_NODENAME"] == "vm"  # put back


def test_pack_options_are_checked_before_anything_is_written(offline_cli):
    out = offline_cli("sweep", "--bundle", TINY, "--cluster", "slurm", "--output_dir", "sw", "--sweep", "seed=1,2",
                      "--pack", "2", "--pack-parallel", "3")
    assert out.returncode == 2 and "--pack-parallel 3 does not fit --pack 2" in out.stderr
    assert not (offline_cli.cwd / "sw").exists()


def test_dry_run_shows_the_tasks_of_a_packed_sweep(offline_cli):
    out = offline_cli("sweep", "--bundle", TINY, "--cluster", "slurm", "--output_dir", "sw", "--dry-run",
                      "--sweep", "seed=range(7)", "--pack", "3")
    assert out.returncode == 0, out.stderr
    assert "1 array(s) of at most 3 tasks" in out.stdout and "3 task(s) of 3 point(s), 3 submitted now" in out.stdout
    assert "#SBATCH --array=0-2" in out.stdout and "points 0-6" in out.stdout


# ---------------------------------------------------------------- the real local SLURM


def _sweep_300_under_max_submit_50(slurm_cluster, qos_limit, cli, pack: int) -> None:
    """The issue's test: 300 points, MaxSubmitJobsPerUser=50; the sweep's tasks top up the queue as they end."""
    tasks = -(-300 // pack)
    qos_limit(50)
    _wait_for_empty_qos(slurm_cluster)
    refusals_before = _refusals_in_ctld_log()
    sampler = QueueSampler(slurm_cluster)
    sampler.start()
    t0 = time.monotonic()
    try:
        out = cli("sweep", "--bundle", TINY, "--cluster", "testcluster", "--slurm", f"qos={QOS}",
                  "--output_dir", "sw", "--sweep", "seed=range(300)", "--pack", str(pack))
        assert out.returncode == 0, out.stderr
        assert "50 submitted now" in out.stdout, out.stdout
        assert f"{300 - 50 * pack} point(s) wait" in out.stdout, out.stdout
        assert "MaxSubmitJobsPerUser=50 of QOS hpcr-limited" in out.stdout, out.stdout
        record = _wait_until_done(slurm_cluster, cli.cwd / "sw", 300, timeout=2400)
    finally:
        sampler.stop.set()
        sampler.join()
    wall = time.monotonic() - t0
    assert sampler.error is None, sampler.error
    done = [p["index"] for p in record["points"] if _status(cli.cwd / "sw" / p["dir"]) == "completed"]
    assert len(done) == 300, f"{len(done)} of 300 completed after {wall:.0f} s: {_record(cli.cwd / 'sw')['points']}"
    assert sampler.samples > 100 and 1 <= sampler.most <= 50, (sampler.most, sampler.samples)
    subs = record["submissions"]
    assert not [s for s in subs if s.get("refused")], [s["refused"] for s in subs if s.get("refused")]
    assert _refusals_in_ctld_log() == refusals_before
    sbatch_calls = sum(s["sbatch_calls"] for s in subs)
    assert cli.calls()["sbatch"] == sbatch_calls + 1  # + the pre-flight's --test-only; top-ups from jobs included
    assert sum(a["size"] for s in subs for a in s["arrays"]) == tasks and record["state"] == "submitted"
    assert len({p["job_id"] for p in record["points"]}) == tasks
    print(f"\n300 points in {tasks} tasks, MaxSubmitJobsPerUser=50: {wall:.0f} s, {sbatch_calls} sbatch calls, "
          f"at most {sampler.most} queued ({sampler.samples} samples)")


@pytest.mark.slow
@pytest.mark.slurm
@pytest.mark.skipif(not os.environ.get("HPCR_LONG_TESTS"), reason="22 min on 2 cores (300 jobs importing torch); "
                    "set HPCR_LONG_TESTS=1 to run it")
def test_300_unpacked_points_with_max_submit_50_all_complete_and_never_more_than_50_queued(
    slurm_cluster, qos_limit, cli
):
    """Unpacked: every point is one array task, 250 wait and are topped up one by one."""
    _sweep_300_under_max_submit_50(slurm_cluster, qos_limit, cli, pack=1)


@pytest.mark.slow
@pytest.mark.slurm
def test_packed_sweep_with_a_small_limit_completes_and_records_the_pack(slurm_cluster, qos_limit, cli):
    qos_limit(4)
    _wait_for_empty_qos(slurm_cluster)
    sampler = QueueSampler(slurm_cluster)
    sampler.start()
    t0 = time.monotonic()
    try:
        out = cli("sweep", "--bundle", TINY, "--cluster", "testcluster", "--slurm", f"qos={QOS}",
                  "--output_dir", "sw", "--sweep", "seed=range(36)", "--pack", "6")
        assert out.returncode == 0, out.stderr
        assert "24 submitted now in tasks of 6 point(s)" in out.stdout and "12 point(s) wait" in out.stdout
        record = _wait_until_done(slurm_cluster, cli.cwd / "sw", 36, timeout=900)
    finally:
        sampler.stop.set()
        sampler.join()
    assert sampler.error is None and 1 <= sampler.most <= 4, (sampler.error, sampler.most)
    assert record["pack"] == {"points": 6, "parallel": 1}
    jobs = [p["job_id"] for p in record["points"]]
    assert all(jobs) and len(set(jobs)) == 6  # 6 tasks (4, then 2 topped up); a task's 6 points share its job id
    assert [jobs.count(j) for j in dict.fromkeys(jobs)] == [6] * 6
    assert not [s for s in record["submissions"] if s.get("refused")]
    print(f"\n36 points --pack 6, MaxSubmitJobsPerUser=4: {time.monotonic() - t0:.0f} s")


@pytest.mark.slow
@pytest.mark.slurm
def test_a_refused_sbatch_backs_off_and_submits_when_a_slot_frees_then_cancel_stops_the_waiting(
    slurm_cluster, qos_limit, cli
):
    """A real refusal: between the governor's count and its sbatch another job takes the last slot; during
    the back-off that job goes, and the retry is accepted. Then cancel turns the still waiting points into
    cancelled, so no task of the sweep submits them later."""
    qos_limit(2)
    _wait_for_empty_qos(slurm_cluster)
    res = slurm_cluster.run("sbatch", "--parsable", "-H", f"--qos={QOS}", "--array=0-1", "-o", "/dev/null",
                            f"--chdir={cli.cwd}", "--wrap", "true")
    assert res.returncode == 0, res.stderr
    held = res.stdout.strip()
    assert len(_queued(slurm_cluster)) == 2  # both slots taken before the sweep
    extra: list[str] = []
    try:
        out = cli("sweep", "--bundle", TINY, "--cluster", "testcluster", "--slurm", f"qos={QOS}",
                  "--output_dir", "sw", "--sweep", "seed=range(3)")
        assert out.returncode == 0, out.stderr
        assert "0 submitted now" in out.stdout and "3 point(s) wait" in out.stdout, out.stdout
        assert [p["submit"] for p in _record(cli.cwd / "sw")["points"]] == ["waiting"] * 3
        slurm_cluster.run("scancel", f"{held}_1")  # one slot frees
        slurm_cluster.wait_for_jobs([f"{held}_1"], timeout=30)

        def racing_reader(executor):  # the count is right, then another job takes the slot before our sbatch
            limits = executor.limits()
            if not extra:
                res = slurm_cluster.run("sbatch", "--parsable", "-H", f"--qos={QOS}", "-o", "/dev/null",
                                        f"--chdir={cli.cwd}", "--wrap", "true")
                assert res.returncode == 0, res.stderr
                extra.append(res.stdout.strip())
            return limits

        slept: list[float] = []

        def sleep(seconds: float) -> None:  # during the back-off the racing job goes
            slept.append(seconds)
            slurm_cluster.run("scancel", extra[0])
            slurm_cluster.wait_for_jobs(extra, timeout=30)

        refusals_before = _refusals_in_ctld_log()
        logs: list[str] = []
        sent = top_up(cli.cwd / "sw", logs.append, backoff=Backoff((0.5, 1.0), sleep), limits_reader=racing_reader)
        assert sent == 1 and slept == [0.5], logs
        assert _refusals_in_ctld_log() > refusals_before  # SLURM really refused the first sbatch
        record = _record(cli.cwd / "sw")
        top = record["submissions"][-1]
        assert top["reason"] == "top-up" and top["sbatch_calls"] == 2 and len(top["refused"]) == 1
        assert "QOSMaxSubmitJobPerUserLimit" in top["refused"][0]["message"]
        assert [p["submit"] for p in record["points"]] == ["submitted", "waiting", "waiting"]
        job = record["points"][0]["job_id"]

        cancelled = cli("cancel", "sw")
        assert cancelled.returncode == 0, cancelled.stderr
        assert "2 waiting point(s) will not be submitted" in cancelled.stdout
        record = _record(cli.cwd / "sw")
        assert [p["submit"] for p in record["points"][1:]] == ["cancelled"] * 2
        slurm_cluster.wait_for_jobs([job], timeout=60)
        assert top_up(cli.cwd / "sw") == 0  # what a task of the sweep would do now: nothing waits
    finally:
        slurm_cluster.run("scancel", held, *extra)
