"""Fixtures for the SLURM command tests: the CLI in a fresh process, counted scheduler calls, tiny runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from warm_python import WARM

from hpc_runner.scheduler.slurm import limits_cache

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
COUNTED = ("sbatch", "sacct", "squeue", "scancel")


@dataclass
class Cli:
    """Runs ``python -m hpc_runner ...`` as a user would, in a new process, with counted scheduler calls."""

    env: dict[str, str]
    calls_file: Path
    cwd: Path
    offline: bool = False
    counted: tuple[str, ...] = COUNTED  # the scheduler's commands counted (tests/gridengine: qsub, qstat, ...)

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run one command; return its exit code and output."""
        env = dict(self.env)
        if "SLURM_CONF" in os.environ and not self.offline:  # exported by the slurm_cluster fixture
            env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        return WARM.run("hpc_runner", list(args), cwd=self.cwd, env=env, timeout=timeout)

    def calls(self) -> dict[str, int]:
        """Return how many times each scheduler command ran since the last reset."""
        words = self.calls_file.read_text().split() if self.calls_file.exists() else []
        return {name: words.count(name) for name in self.counted}

    def reset(self) -> None:
        """Forget the counted calls."""
        self.calls_file.unlink(missing_ok=True)

    def apart(self, folder: Path) -> Cli:
        """This CLI with a counter of its own: the jobs and background commands started through this one
        keep logging into its file, so counting one command while they still run needs a fresh one."""
        calls = folder / "scheduler-calls.txt"
        shims = make_shims(folder / "shims", calls, self.counted)
        rest = self.env["PATH"].split(os.pathsep, 1)[1]  # without this CLI's own shims
        return replace(self, env={**self.env, "PATH": f"{shims}{os.pathsep}{rest}"}, calls_file=calls)

    def write_profile(self, name: str, text: str) -> Path:
        """Write a user cluster profile into this CLI's $HPCR_CLUSTER_PATH."""
        path = Path(self.env["HPCR_CLUSTER_PATH"]) / f"{name}.yaml"
        path.write_text(text)
        return path


def make_shims(folder: Path, calls_file: Path, counted: tuple[str, ...] = COUNTED) -> Path:
    """Wrappers for sbatch/sacct/squeue/scancel (``counted``) that log each call, then run the real command."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in counted:
        real = shutil.which(name)
        if real is None:
            continue
        (folder / name).write_text(f'#!/bin/sh\necho {name} >> {calls_file}\nexec {real} "$@"\n')
        (folder / name).chmod(0o755)
    return folder


def make_cli(folder: Path, counted: tuple[str, ...] = COUNTED) -> Cli:
    """A Cli working in ``folder`` with an empty profile path, a private config home and counted calls."""
    calls = folder / "scheduler-calls.txt"
    shims = make_shims(folder / "shims", calls, counted)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_")}
    env.update(
        PATH=f"{shims}{os.pathsep}{env.get('PATH', '')}",
        XDG_CONFIG_HOME=str(folder / "config-home"),
        HPCR_CLUSTER_PATH=str(folder / "clusters"),
        PYTHONPATH=str(ROOT),
    )
    (folder / "clusters").mkdir(exist_ok=True)
    cli = Cli(env, calls, folder, counted=counted)
    cli.write_profile(TEST_PROFILE, "extends: slurm\ncpus_per_task: 1\ntime: 10\narray_parallelism: 4\n")
    return cli


TEST_PROFILE = "testcluster"  # the local cluster's default partition, 1 CPU, 10 minutes


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The CLI for one test, with the user profile `testcluster`."""
    return make_cli(tmp_path)


OFFLINE_MAX_ARRAY_SIZE = 3


@pytest.fixture
def offline_cli(tmp_path: Path) -> Cli:
    """The CLI on a machine without a cluster: scontrol reports MaxArraySize=3, sbatch and srun fail loudly.

    For the fast tests of --dry-run and of bad input: they must never reach sbatch.
    """
    calls = tmp_path / "scheduler-calls.txt"
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        f"#!/bin/sh\necho scontrol >> {calls}\necho 'MaxArraySize            = {OFFLINE_MAX_ARRAY_SIZE}'\n"
    )
    for name in ("sbatch", "srun", "sacct", "squeue", "scancel"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} >> {calls}\necho '{name} must not run' >&2\nexit 99\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_") and k != "SLURM_CONF"}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        XDG_CONFIG_HOME=str(tmp_path / "config-home"),
        HPCR_CLUSTER_PATH=str(tmp_path / "clusters"),
        PYTHONPATH=str(ROOT),
    )
    (tmp_path / "clusters").mkdir()
    return Cli(env, calls, tmp_path, offline=True)


@pytest.fixture(scope="session")
def dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shared folder for the tiny synthetic dataset (the first job writes it, atomically per file)."""
    return tmp_path_factory.mktemp("synthetic_seg")


@pytest.fixture(scope="session")
def tiny(dataset_dir: Path) -> list[str]:
    """Overrides that make the example bundle train in a few seconds on one CPU."""
    return ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1",
            "--val_interval", "1", "--batch_size", "1", "--dataset_dir", str(dataset_dir)]


@pytest.fixture(scope="session")
def cli_factory():
    """``make_cli(folder)`` for module-scoped fixtures (test modules cannot import from conftest)."""
    return make_cli


LIMITED_QOS = "hpcr-limited"


def _user_limits_shown(cluster) -> str:
    """slurmctld's view of the QOS's per-user limits (``MaxSubmitJobsPU=<limit>(<used>)`` per user)."""
    return cluster.run("scontrol", "show", "assoc_mgr", "flags=qos", f"qos={LIMITED_QOS}").stdout


@pytest.fixture
def qos_limit(slurm_cluster):
    """``qos_limit(n)`` sets MaxSubmitJobsPerUser=n on hpcr-limited (and waits until slurmctld knows); reset after."""
    if LIMITED_QOS not in slurm_cluster.run("sacctmgr", "-nP", "show", "qos", "format=Name").stdout.split():
        pytest.skip(f"no QOS {LIMITED_QOS}: restart the cluster with the current scripts/local-slurm.sh")
    if "No Users" in _user_limits_shown(slurm_cluster):
        # slurmctld prints per-user QOS limits only for users who have submitted in the QOS; on a fresh
        # cluster nobody has, so one held job (cancelled at once) makes the limit observable.
        job = slurm_cluster.run("sbatch", "--parsable", "--hold", f"--qos={LIMITED_QOS}", "-o", "/dev/null",
                                "--wrap", "true").stdout.strip()
        slurm_cluster.run("scancel", job)

    def set_limit(n: int) -> None:
        res = slurm_cluster.run("sacctmgr", "-i", "modify", "qos", LIMITED_QOS, "set", f"MaxSubmitJobsPerUser={n}")
        assert res.returncode == 0 or "Nothing modified" in res.stdout + res.stderr, res.stderr
        want = f"MaxSubmitJobsPU={'N' if n < 0 else n}("
        deadline = time.monotonic() + 20
        while want not in (text := _user_limits_shown(slurm_cluster)):
            if time.monotonic() > deadline:
                pytest.fail(f"slurmctld did not take MaxSubmitJobsPerUser={n} on {LIMITED_QOS}: {text}")
            time.sleep(0.2)
        # as after an admin's change and a refusal: sacctmgr's answers kept by earlier commands are dropped
        shutil.rmtree(limits_cache.folder(), ignore_errors=True)

    yield set_limit
    set_limit(-1)
