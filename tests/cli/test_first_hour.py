"""A new user's first hour (issue 47): a cluster profile without a scheduler that answers, and the image."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


# the SLURM and Grid Engine clients: left off the PATH of a machine "without a scheduler", whatever it has installed
SCHEDULER_COMMANDS = frozenset({
    "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab", "sdiag",
    "sh5util", "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger", "sview",
    "qacct", "qalter", "qconf", "qdel", "qhold", "qhost", "qlogin", "qmod", "qrls", "qrsh", "qselect", "qstat", "qsub",
})


def _no_slurm(tmp_path: Path) -> dict[str, str]:
    """An environment with no scheduler client on PATH (links to /usr/bin and /bin less those), even on a machine
    that has SLURM installed, and no SLURM_CONF naming a controller."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for folder in (Path("/usr/bin"), Path("/bin")):
        for exe in folder.iterdir() if folder.is_dir() else ():
            link = bin_dir / exe.name
            if exe.name not in SCHEDULER_COMMANDS and not link.exists() and not link.is_symlink():
                link.symlink_to(exe)
    python_dir = os.path.dirname(os.path.realpath(os.sys.executable))
    return {"PATH": f"{python_dir}:{bin_dir}", "HPCR_CLUSTER_PATH": str(tmp_path / "clusters"),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "SLURM_CONF": str(tmp_path / "no-slurm.conf")}


def test_cluster_init_without_a_scheduler_says_to_copy_a_shipped_profile(cli, tmp_path: Path) -> None:
    # 6ca9a4e: "`sinfo` could not run" and nothing about what to do instead
    res = cli("cluster", "init", "mine", cwd=tmp_path, env=_no_slurm(tmp_path))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "cluster init mine --from jade" in res.stderr and "nothing was written" in res.stderr


def test_cluster_init_from_a_shipped_profile_copies_it_to_edit(cli, tmp_path: Path) -> None:
    (tmp_path / "clusters").mkdir()
    res = cli("cluster", "init", "mine", "--from", "jade", cwd=tmp_path, env=_no_slurm(tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    written = tmp_path / "clusters" / "mine.yaml"
    shipped = yaml.safe_load((ROOT / "hpc_runner" / "scheduler" / "profiles" / "jade.yaml").read_text())
    assert yaml.safe_load(written.read_text()) == shipped
    again = cli("cluster", "show", "mine", cwd=tmp_path, env=_no_slurm(tmp_path))
    assert again.returncode == 0 and "small" in again.stdout, again.stdout + again.stderr
    unknown = cli("cluster", "init", "other", "--from", "nope", cwd=tmp_path, env=_no_slurm(tmp_path))
    assert unknown.returncode == 2 and "jade" in unknown.stderr


def test_the_apptainer_definition_of_the_image_is_where_the_containers_page_says_and_the_page_has_no_test_internals(
) -> None:
    page = (ROOT / "docs" / "containers.md").read_text()
    definition = ROOT / "jobs" / "containers" / "hpc-runner.def"
    assert "jobs/containers/hpc-runner.def" in page and definition.is_file()
    text = definition.read_text()
    assert "Bootstrap: docker" in text and "hpc_runner" in text and "torch" in text
    assert "tests/" not in page and "pytest" not in page and "::test_" not in page
