"""Packed sweep tasks on the real local SLURM: K points in one job, one after another or P at a time.

The sweep dir is made by the real CLI (`hpc-runner sweep --hold`, its held array cancelled at once);
each test then submits `run_sweep_task` for some of its points through submitit, as the governor does
for `--pack K`, and records the task's job id on those points under the sweep lock.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from hpc_runner.jobs import ledger as sr

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

PROFILE = "packcluster"
# a bundle whose run prints its x, sleeps, and fails when x == fail_x
TRAIN_YAML = """\
x: 0
fail_x: -1
sleep_s: 0.5
output_dir: .
sleep: "$__import__('time').sleep"
path: "$__import__('pathlib').Path"
run:
  - "$print('point x =', @x, flush=True)"
  - "$@sleep(@sleep_s)"
  - "$1 // (@x - @fail_x)"
  - "$@path(@output_dir).joinpath('done.txt').write_text(str(@x))"
"""
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """The tiny bundle, with the example bundle's metadata."""
    b = tmp_path / "tinypack"
    (b / "configs").mkdir(parents=True)
    (b / "configs" / "train.yaml").write_text(TRAIN_YAML)
    (b / "configs" / "metadata.json").write_text((ROOT / "bundles/synthetic_seg/configs/metadata.json").read_text())
    return b


def make_sweep(cli, slurm_cluster, bundle: Path, name: str, *args: str) -> Path:
    """A sweep dir written by the real CLI; its held array is cancelled (the test submits the tasks)."""
    # the local cluster's GPUs are stand-ins; SLURM_CPU_BIND=cores binds each step to its CPUs, as clusters with
    # task/affinity do: a packed step given fewer CPUs than its task would show (each slot binds to its own)
    cli.write_profile(PROFILE, "extends: slurm\ncpus_per_task: 1\ntime: 10\nsignal_delay_s: 20\n"
                      "env: {HPCR_FAKE_GPUS: \"1\", SLURM_CPU_BIND: cores}\n")
    res = cli("sweep", "--bundle", str(bundle), "--cluster", PROFILE, "--hold", "--output_dir", name, *args)
    assert res.returncode == 0, res.stdout + res.stderr
    sweep = cli.cwd / name
    record = json.loads((sweep / sr.SWEEP_FILE).read_text())
    held = sorted({p["job_id"].split("_")[0] for p in record["points"] if p.get("job_id")})
    if held:
        slurm_cluster.run("scancel", *held)
        slurm_cluster.wait_for_jobs(held, timeout=60)
    return sweep


def submit_task(cli, sweep: Path, indices: list[int], parallel: int = 1, **slurm) -> str:
    """Submit one packed task of ``indices`` as the governor would; return its job id."""
    from hpc_runner.jobs.task import run_sweep_task
    from hpc_runner.scheduler.profiles import load_profile
    from hpc_runner.scheduler.slurm.executor import make_executor, slurm_parameters, submit_one

    profile = load_profile(PROFILE, slurm, environ=cli.env)
    params = slurm_parameters(profile, job_name="hpcr-pack-test", chdir=str(cli.cwd))
    executor = make_executor(profile, sweep / sr.JOB_FOLDER, params)
    clock = {"signal_delay_s": profile.get("signal_delay_s")}  # what the governor gives each task
    with sr.locked(sweep) as ledger:  # the task reads its points' job ids under this lock
        record = ledger.record
        points = [{"index": i, "dir": record.points[i]["dir"],
                   "overrides": record.effective_overrides(record.points[i])} for i in indices]
        job = submit_one(executor, run_sweep_task, str(sweep.resolve()), points, None,
                         {"cluster": PROFILE, "sweep": str(sweep.resolve()), "clock": clock}, parallel)
        for i in indices:
            if ledger.points[i].get("submit") == sr.SUBMITTED:  # its held array was cancelled by make_sweep
                ledger.retry(i)
            ledger.submit(i, job.job_id)
    return job.job_id


def run_record(sweep: Path, index: int) -> dict:
    """run.yaml of a point."""
    return yaml.safe_load((sweep / "points" / f"{index:04d}" / "run.yaml").read_text()) or {}


def finish(slurm_cluster, sweep: Path, job: str, timeout: float = 240) -> str:
    """Wait for the task; return its final sacct state."""
    slurm_cluster.wait_for_jobs([job], timeout=timeout)
    return slurm_cluster.sacct_states([job]).get(job, "?")


def test_four_points_two_at_a_time_each_on_its_own_gpu_and_cpu(cli, slurm_cluster, bundle):
    sweep = make_sweep(cli, slurm_cluster, bundle, "par", "--sweep", "x=1,2,4,5", "--sleep_s", "1")
    job = submit_task(cli, sweep, [0, 1, 2, 3], parallel=2, cpus_per_task=2, gres="gpu:2")
    state = finish(slurm_cluster, sweep, job)
    assert state == "COMPLETED", slurm_cluster.explain(sweep, [job])
    recs = [run_record(sweep, i) for i in range(4)]
    assert [r["status"] for r in recs] == ["completed"] * 4
    by_slot: dict[int, set] = {}
    for r in recs:
        assert r["pack"]["task"] == job and r["pack"]["parallel"] == 2
        assert r["binding"]["gpus"] == r["pack"]["gpus"] and len(r["binding"]["gpus"]) == 1
        assert r["cpus"]["count"] == 1  # the thread budget saw the slot's share, not the job's 2 CPUs
        by_slot.setdefault(r["pack"]["slot"], set()).add(
            (tuple(r["binding"]["gpus"]), r["binding"]["cpus"], r["host"]["pid"]))
    assert sorted(by_slot) == [0, 1]
    # one long-lived worker per slot: the same GPU, CPU mask and process for each of its points
    assert all(len(v) == 1 for v in by_slot.values()), by_slot
    (gpu0, cpus0, pid0), (gpu1, cpus1, pid1) = (next(iter(by_slot[s])) for s in (0, 1))
    assert {gpu0, gpu1} == {("0",), ("1",)}
    assert {cpus0, cpus1} == {"0", "1"} and pid0 != pid1
    for i, x in enumerate((1, 2, 4, 5)):  # each point's print is in its own log, not only the task's
        log = (sweep / "points" / f"{i:04d}" / "log.txt").read_text()
        assert f"point x = {x}" in log and log.count("point x =") == 1


def test_a_failed_point_does_not_stop_the_others_in_a_sequential_pack(cli, slurm_cluster, bundle):
    sweep = make_sweep(cli, slurm_cluster, bundle, "seq", "--sweep", "x=1,2,3,4", "--fail_x", "3")
    job = submit_task(cli, sweep, [0, 1, 2, 3])
    state = finish(slurm_cluster, sweep, job)
    assert state == "FAILED", slurm_cluster.explain(sweep, [job])
    recs = [run_record(sweep, i) for i in range(4)]
    assert [r["status"] for r in recs] == ["completed", "completed", "failed", "completed"]
    assert "ZeroDivisionError" in (sweep / "points/0002/error.txt").read_text()
    assert not (sweep / "points/0002/done.txt").exists() and (sweep / "points/0003/done.txt").read_text() == "4"
    # one process for the whole task: the imports are paid once
    assert len({r["host"]["pid"] for r in recs}) == 1
    assert all(r["job"]["id"] == job and r["pack"]["slot"] == 0 for r in recs)
    task_log = "".join(f.read_text() for f in (sweep / sr.JOB_FOLDER).glob(f"{job}_*_log.*"))
    assert f"task {job} runs 4 of 4 point(s)" in task_log and "1 of 4 point(s) failed" in task_log


def test_a_time_limited_pack_returns_the_points_it_cannot_finish(cli, slurm_cluster, bundle):
    # a 120 s job whose stop signal comes 20-50 s before the end: no point starts later than 120 - 20 - 60
    # s minus its length, so points of ~10 s run until t = 30-40 s and the rest go back long before the
    # signal (which would make the task checkpoint and requeue instead)
    sweep = make_sweep(cli, slurm_cluster, bundle, "clock", "--sweep", "x=1,2,4,5,6", "--sleep_s", "10")
    job = submit_task(cli, sweep, [0, 1, 2, 3, 4], time=2)
    state = finish(slurm_cluster, sweep, job, timeout=180)
    assert state == "COMPLETED", slurm_cluster.explain(sweep, [job])
    record = sr.SweepRecord.load(sweep)
    done = [i for i in range(5) if run_record_or_empty(sweep, i).get("status") == "completed"]
    returned = [i for i in range(5) if record.points[i].get("returns")]
    assert done and returned, (done, returned)
    assert sorted(done + returned) == list(range(5))  # every point ran or went back: none lost
    assert done == list(range(len(done)))  # in order: the first ones ran
    task_log = "".join(f.read_text() for f in (sweep / sr.JOB_FOLDER).glob(f"{job}_*_log.out"))
    assert task_log.count("hpc-runner: task ") == 1, task_log  # ran once: no stop signal, no requeue
    assert f"{len(returned)} point(s) go back to the sweep as waiting" in task_log
    for i in returned:
        p = record.points[i]
        assert p["job_id"] != job  # waiting (None), or already sent again by the governor's top-up
        assert p["submit"] == sr.WAITING or p["job_id"], p
        assert not (sweep / p["dir"] / "done.txt").exists() or p["job_id"]
    _cancel_resubmitted(slurm_cluster, record, job)


def run_record_or_empty(sweep: Path, index: int) -> dict:
    """run.yaml of a point, or {} when the point never started."""
    path = sweep / "points" / f"{index:04d}" / "run.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def _cancel_resubmitted(slurm_cluster, record, job: str) -> None:
    """Jobs the top-up submitted for the returned points belong to this test: cancel them."""
    others = sorted({p["job_id"] for p in record.points if p.get("job_id") and p["job_id"] != job})
    if others:
        slurm_cluster.run("scancel", *others)
        time.sleep(0.5)


def test_a_stop_signal_checkpoints_the_running_point_and_requeues_the_task_once(
    cli, slurm_cluster, dataset_dir, tmp_path
):
    # two tiny training runs (32 steps each); USR2 while the first trains: it checkpoints, the second
    # does not start, the task is requeued once, then the first resumes and the second runs
    train = ["--num_train", "8", "--num_val", "1", "--image_size", "16", "--batch_size", "1", "--max_epochs", "4",
             "--val_interval", "1", "--dataset_dir", str(dataset_dir), "--cache_dir", str(tmp_path / "cache")]
    sweep = make_sweep(cli, slurm_cluster, ROOT / "bundles" / "synthetic_seg", "stop",
                       "--sweep", "learning_rate=1e-3,2e-3", *train)
    job = submit_task(cli, sweep, [0, 1])
    metrics = sweep / "points/0000/metrics.jsonl"
    deadline = time.monotonic() + 180
    while not (metrics.is_file() and '"iter"' in metrics.read_text()):
        assert time.monotonic() < deadline, slurm_cluster.explain(sweep, [job])
        time.sleep(0.1)
    slurm_cluster.run("scancel", "--signal=USR2", job)
    state = finish(slurm_cluster, sweep, job, timeout=300)
    assert state == "COMPLETED", slurm_cluster.explain(sweep, [job])
    first, second = run_record(sweep, 0), run_record(sweep, 1)
    assert first["status"] == second["status"] == "completed"
    assert first["attempts"] == 2 and second["attempts"] == 1  # the second never started before the stop
    task_log = "".join(f.read_text() for f in (sweep / sr.JOB_FOLDER).glob(f"{job}_*_log.out"))
    # two runs of the task (one requeue), both with both points: the first was stopped, not completed
    assert task_log.count("runs 2 of 2 point(s)") == 2 and task_log.count("hpc-runner: task ") == 2, task_log
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if '"iter"' in line]
    assert steps == list(range(1, 33))  # resumed from the checkpoint: every step once
    # the second point read the persistent data cache the first one filled
    assert "8 items, 0 computed, 8 already there" in (sweep / "points/0001/log.txt").read_text()
