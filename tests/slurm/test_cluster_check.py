"""`hpc-runner cluster check` on the local SLURM (scripts/local-slurm.sh): the findings written into the profile,
each injected fault found and named in one line, and the workaround used by the next submission.

The faults are injected through SLURM's own configuration, without touching the daemons other tests share:
- accounting off: the commands read a copy of slurm.conf with AccountingStorageType=accounting_storage/none (sacct
  then says "Slurm accounting storage is disabled"), as on a site without slurmdbd;
- requeue refused: the profile's sbatch options carry --no-requeue (Requeue=0 in the job's record, as JobRequeue=0
  gives a job that does not ask), so `scontrol requeue` refuses;
- task/affinity: the step is bound (SLURM_CPU_BIND=cores) to one CPU of the two per task asked (srun
  --cpus-per-task=1, as before SLURM 22.05 fixed what srun inherits);
- no scratch folder: SLURM_JOB_TMPDIR (the job's own folder, as job_container/tmpfs names it) is a folder the node
  does not have (a TMPDIR that cannot be made is not one: slurmstepd sets it to /tmp, which the check then finds);
- a setup line that fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hpc_runner.scheduler.profiles import load_profile
from hpc_runner.scheduler.site_findings import NO_STAGING, uses_workaround
from tests.slurm.conftest import make_cli

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# a 2-minute limit, the stop signal 30 s before it: each check job lasts about a minute and a half
BUNDLE = str(Path(__file__).resolve().parents[2] / "bundles/synthetic_seg")
BASE = "extends: slurm\ncpus_per_task: 1\nsignal_delay_s: 30\n"


def _profile(cli, name: str, extra: str = "") -> Path:
    return cli.write_profile(name, BASE + extra)


def _checked(path: Path) -> dict:
    return yaml.safe_load(path.read_text())["checked"]


def _findings(path: Path) -> dict:
    parts = _checked(path)["partitions"]
    assert len(parts) == 1, parts
    return next(iter(parts.values()))["findings"]


def _failed_lines(out: str) -> list[str]:
    return [ln.strip() for ln in out.splitlines() if ln.strip().startswith("FAILED ")]


# A healthy partition and the five faults in three checks, each finding its own of them (a check's findings are
# independent: a fault shows in its own line), run at once, one `cluster check` process each, as three users of
# one site would: each check job waits about a minute and a half for its stop signal, so one after another they
# took 9 minutes of CI. The three jobs ask 1 + 1 + 2 CPUs, the local cluster's 4: one wave (six checks of 7 CPUs
# ran in two, 187 s).
NOACCT = "noacct_norequeue"  # its commands read a slurm.conf copy without accounting (below); sbatch --no-requeue
BOUND = "bound_noscratch_badsetup"  # a step bound to 1 CPU of 2, no scratch folder, a setup line that fails
CHECKS = {
    "local": "",
    NOACCT: "sbatch: {no-requeue: true}\n",
    BOUND: "cpus_per_task: 2\nsrun_args: ['--cpus-per-task=1']\n"
           "env: {SLURM_CPU_BIND: cores, SLURM_JOB_TMPDIR: /nonexistent/hpcr-scratch}\n"
           "setup: ['export HPCR_OK=1', 'module-not-here load cuda']\n",
}


@dataclass
class Checked:
    """One `cluster check NAME` that ran: its exit code, output and profile file."""

    returncode: int
    stdout: str
    stderr: str
    path: Path


def _without_accounting(folder: Path) -> Path:
    """A copy of the cluster's slurm.conf (and gres.conf) with AccountingStorageType=accounting_storage/none."""
    conf = Path(os.environ["SLURM_CONF"]).read_text()
    off = re.sub(r"(?m)^AccountingStorageType=.*$", "AccountingStorageType=accounting_storage/none", conf)
    copy = folder / "etc" / "slurm.conf"
    copy.parent.mkdir(parents=True)
    copy.write_text(off)
    (copy.parent / "gres.conf").write_text((Path(os.environ["SLURM_CONF"]).parent / "gres.conf").read_text())
    return copy


@pytest.fixture(scope="module")
def checks(slurm_cluster, tmp_path_factory) -> tuple[object, dict[str, Checked]]:
    """Every profile of CHECKS checked at once (cold `python -m hpc_runner` processes: the warm one runs one
    command at a time); the CLI they share, for the submissions that follow."""
    folder = tmp_path_factory.mktemp("cluster-check")
    cli = make_cli(folder)
    paths = {name: _profile(cli, name, extra) for name, extra in CHECKS.items()}
    no_accounting = _without_accounting(folder)
    procs = {}
    for name in CHECKS:
        env = dict(cli.env, SLURM_CONF=str(no_accounting) if name == NOACCT else os.environ["SLURM_CONF"])
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "hpc_runner", "cluster", "check", name, "--timeout", "400"]
            + (["--partition", "small"] if name == "local" else []),
            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        done[name] = Checked(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), paths[name])
    return cli, done


def test_cluster_check_writes_the_findings_of_a_healthy_partition(checks, slurm_cluster):
    cli, done = checks
    res = done["local"]
    assert res.returncode in (0, 1), res.stderr  # 1: a check failed (named below), the findings written anyway
    found = _findings(res.path)
    assert found["accounting"]["ok"] is True, found["accounting"]
    assert found["stop_signal"]["ok"] is True and found["stop_signal"]["signal"] == "SIGUSR2"
    assert 0 < found["stop_signal"]["before_limit_s"] <= 30 + 60
    assert found["requeue"]["ok"] is True, found["requeue"]
    assert found["setup"]["ok"] is None and found["imports"]["ok"] is True
    assert found["queue_wait"]["seconds"] >= 0 and found["shm"]["ok"] is not None
    assert re.match(r"\d{4}-\d\d-\d\dT", _checked(res.path)["date"])
    shown = cli("cluster", "show", "local")
    assert "# checked " in shown.stdout and "partition small" in shown.stdout
    left = slurm_cluster.run("squeue", "-h", "-t", "PENDING,RUNNING", "-n", "hpcr-cluster-check", "-o", "%i")
    assert not left.stdout.strip(), left.stdout  # the requeued attempts are cancelled once they said so


def test_accounting_off_is_found_and_the_next_status_asks_the_queue(checks):
    cli, done = checks
    res = done[NOACCT]
    assert res.returncode == 1, res.stdout + res.stderr
    lines = _failed_lines(res.stdout)
    assert any(ln.startswith("FAILED accounting: no accounting for job") and "states from the queue" in ln
               for ln in lines), res.stdout
    assert _findings(res.path)["accounting"]["workaround"] == "states from the queue and the jobs' exit files"
    sub = cli("submit", "training", "--bundle", BUNDLE, "--cluster", NOACCT, "--dry-run")
    assert "accounting failed" in sub.stderr and "using: states from the queue" in sub.stderr


def test_requeue_refused_is_found_and_the_next_job_resubmits(checks):
    cli, done = checks
    res = done[NOACCT]
    assert res.returncode == 1, res.stdout + res.stderr
    found = _findings(res.path)
    assert found["requeue_flag"]["ok"] is False and "Requeue=0" in found["requeue_flag"]["detail"]
    assert found["requeue"]["ok"] is False and found["requeue"]["workaround"] == "resubmit instead of requeue"
    assert any(ln.startswith("FAILED requeue") for ln in _failed_lines(res.stdout))
    dry = cli("submit", "training", "--bundle", BUNDLE, "--cluster", NOACCT, "--dry-run")
    assert "HPCR_REQUEUE=resubmit" in dry.stdout  # the job is told not to ask: it ends with its checkpoint
    assert "using: resubmit instead of requeue" in dry.stderr


def test_a_step_bound_to_fewer_cpus_than_asked_is_found(checks):
    _, done = checks
    res = done[BOUND]
    assert res.returncode == 1, res.stdout + res.stderr
    found = _findings(res.path)["cpu_binding"]
    assert found["ok"] is False and "bound to 1 CPU(s) of the 2 asked" in found["detail"]
    assert any(ln.startswith("FAILED cpu_binding") for ln in _failed_lines(res.stdout))


def test_no_scratch_folder_is_found_and_staging_is_off(checks):
    cli, done = checks
    res = done[BOUND]
    assert res.returncode == 1, res.stdout + res.stderr
    found = _findings(res.path)["scratch"]
    assert found["ok"] is False and "no scratch folder" in found["detail"] and found["workaround"] == "staging off"
    assert any(ln.startswith("FAILED scratch: no scratch folder") for ln in _failed_lines(res.stdout))
    os.environ["HPCR_CLUSTER_PATH"] = cli.env["HPCR_CLUSTER_PATH"]
    try:
        assert uses_workaround(load_profile(BOUND).settings, NO_STAGING)
    finally:
        os.environ.pop("HPCR_CLUSTER_PATH")


def test_a_setup_line_that_fails_is_named(checks):
    _, done = checks
    res = done[BOUND]
    assert res.returncode == 1, res.stdout + res.stderr
    found = _findings(res.path)["setup"]
    assert found["ok"] is False and found["failed_line"] == 2 and "module-not-here" in found["detail"]
    assert any(ln.startswith("FAILED setup: setup line 2 failed") for ln in _failed_lines(res.stdout))


def test_the_check_is_bounded_and_cancels_its_jobs(cli, slurm_cluster):
    path = _profile(cli, "held", "sbatch: {begin: now+1hour}\n")  # never starts within the timeout
    res = cli("cluster", "check", "held", "--timeout", "5", timeout=120)
    assert res.returncode == 1 and "cancelled" in res.stderr
    assert "still queued at the timeout" in _findings(path)["job"]["detail"]
    left = slurm_cluster.run("squeue", "-h", "-t", "PENDING,RUNNING", "-n", "hpcr-cluster-check", "-o", "%i %j")
    assert not [ln for ln in left.stdout.splitlines() if ln.strip()], left.stdout
