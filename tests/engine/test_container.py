"""`--container IMAGE` (engine/container.py, cli/container_run.py): the decisions as plain functions with the exact
command line of each runtime (Apptainer and Singularity cannot be installed here: their lines are golden), then a
real Charliecloud image built on this machine (tests/conftest.py ``charliecloud_image``). The sweep on the local
SLURM, with a preempted point, is tests/slurm/test_container_sweep.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hpc_runner.engine.container import (
    ContainerSpec,
    Mounts,
    bind_list,
    check_image,
    config_binds,
    container_argv,
    container_env,
    container_spec,
    detect_runtime,
    missing_mount_points,
)
from hpc_runner.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "bundles" / "synthetic_seg"
TINY = ["--num_train", "4", "--num_val", "2", "--image_size", "16", "--max_epochs", "2", "--val_interval", "1"]
MOUNTS = Mounts(paths=("/scratch/u/runs/x", "/project/data"), cwd="/scratch/u",
                env={"HPCR_CONTAINED": "1", "SLURM_JOB_ID": "42"})
COMMAND = ["python3", "-m", "hpc_runner.engine.sandbox_job", "/scratch/u/runs/x", "training"]


@pytest.mark.parametrize("runtime, golden", [
    ("apptainer", ["apptainer", "exec", "--containall", "--cleanenv", "--no-home", "--nv",
                   "--bind=/scratch/u/runs/x:/scratch/u/runs/x", "--bind=/project/data:/project/data",
                   "--bind=/opt/site:/site", "--env=HPCR_CONTAINED=1", "--env=SLURM_JOB_ID=42", "--pwd=/scratch/u",
                   "--writable-tmpfs", "/images/monai.sif", *COMMAND]),
    ("singularity", ["singularity", "exec", "--containall", "--cleanenv", "--no-home", "--nv",
                     "--bind=/scratch/u/runs/x:/scratch/u/runs/x", "--bind=/project/data:/project/data",
                     "--bind=/opt/site:/site", "--env=HPCR_CONTAINED=1", "--env=SLURM_JOB_ID=42", "--pwd=/scratch/u",
                     "--writable-tmpfs", "/images/monai.sif", *COMMAND]),
    ("podman", ["podman", "run", "--rm", "--init", "--network=host", "--ipc=host", "--userns=keep-id",
                "--device=nvidia.com/gpu=all", "--volume=/scratch/u/runs/x:/scratch/u/runs/x",
                "--volume=/project/data:/project/data", "--volume=/opt/site:/site", "--env=HPCR_CONTAINED=1",
                "--env=SLURM_JOB_ID=42", "--workdir=/scratch/u", "--writable-tmpfs", "/images/monai.sif", *COMMAND]),
    ("charliecloud", ["ch-run", "--unset-env=*", "--bind=/scratch/u/runs/x:/scratch/u/runs/x",
                      "--bind=/project/data:/project/data", "--bind=/opt/site:/site", "--set-env=HOME=/tmp",
                      "--set-env=HPCR_CONTAINED=1",
                      "--set-env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                      "--set-env=SLURM_JOB_ID=42", "--cd=/scratch/u", "--writable-tmpfs", "/images/monai.sif", "--",
                      *COMMAND]),
])
def test_each_runtime_gets_its_exact_command_line(runtime: str, golden: list[str]) -> None:
    spec = ContainerSpec(image="/images/monai.sif", runtime=runtime, gpu="nv", binds=("/opt/site:/site",),
                         options=("--writable-tmpfs",))
    assert container_argv(spec, MOUNTS, COMMAND) == golden


def test_the_runtime_follows_the_image_and_the_environment_passed_in_is_short() -> None:
    assert detect_runtime(str(ROOT)) == "charliecloud"  # a folder
    assert detect_runtime("x.sqfs") == "charliecloud"
    assert detect_runtime("x.sif", which=lambda p: p == "singularity") == "singularity"
    assert detect_runtime("docker://monai:1.6", which=lambda p: p == "podman") == "podman"
    env = container_env({"PATH": "/host/bin", "HOME": "/home/u", "PYTHONPATH": "/x", "HPCR_CONFIG": "/home/u/c.yaml",
                         "SLURM_JOB_ID": "7", "SLURM_CONF": "/etc/slurm.conf", "OMP_NUM_THREADS": "2",
                         "AWS_SECRET_ACCESS_KEY": "k", "HPCR_PROFILE": "jade"})
    assert env == {"SLURM_JOB_ID": "7", "OMP_NUM_THREADS": "2", "HPCR_PROFILE": "jade", "HPCR_CONTAINED": "1"}


def test_a_wrong_container_block_or_image_is_bad_input_naming_where(tmp_path: Path) -> None:
    where = str(tmp_path / "jade.yaml")
    assert container_spec(None, None, None, where) is None
    for block, words in [("x.sif", "not a mapping"), ({"image": str(tmp_path), "gpu": "cuda"}, "gpu is 'cuda'"),
                         ({"image": str(tmp_path), "mounts": []}, "unknown key(s) mounts"),
                         ({"image": str(tmp_path), "binds": "/a:/b"}, "binds is"),
                         ({"image": str(tmp_path / "none.sif")}, "does not exist")]:
        with pytest.raises(UserError, match="container") as err:
            container_spec(None, None, block, where)
        assert words in str(err.value), err.value
    with pytest.raises(UserError, match="runtime 'docker'"):
        container_spec(str(tmp_path), "docker", None, "--container")
    # the option wins over the profile's image; the profile's binds and flags stay (only the user's profile has them)
    spec = container_spec(str(tmp_path), None, {"image": "/elsewhere.sif", "binds": ["/opt/site"]}, where)
    assert spec is not None and spec.image == str(tmp_path) and spec.binds == ("/opt/site",)


def test_every_path_of_the_config_is_bound_or_refused_naming_its_id(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    config = {"dataset_dir": str(tmp_path / "data"), "cache": {"dir": str(tmp_path / "cache" / "new")},
              "device": "/dev/null", "lib": "/usr/lib/x", "text": "not/a/path"}
    binds = config_binds(config, [str(tmp_path / "run"), str(tmp_path)])
    assert binds == [str(tmp_path)]  # all inside the working folder: one bind; /dev and /usr are the image's own
    with pytest.raises(UserError, match="id 'out::dir' names /nonexistent-top/x") as err:
        config_binds({"out": {"dir": "/nonexistent-top/x"}}, [])
    assert err.value.id_path == "out::dir"
    assert bind_list(["/", "/etc/passwd", str(tmp_path), str(tmp_path / "data")]) == [str(tmp_path)]


def test_a_charliecloud_folder_image_must_hold_each_bind_point(tmp_path: Path) -> None:
    image = tmp_path / "img"
    (image / "scratch").mkdir(parents=True)
    spec = ContainerSpec(image=str(image), runtime="charliecloud", binds=("/opt/site:/site",))
    assert missing_mount_points(spec, ["/scratch", "/tmp/run", "/work/u"]) == ["/work/u", "/site"]
    assert missing_mount_points(ContainerSpec(image="/x.sif", runtime="apptainer"), ["/work/u"]) == []


# ------------------------------------------------------------------ a real Charliecloud image

def _copy_example(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLE, bundle, ignore=shutil.ignore_patterns("data", "runs", "__pycache__", "MANIFEST"))
    return bundle


@pytest.mark.slow
def test_the_example_trains_inside_a_charliecloud_image_with_the_same_dice(
        tmp_path: Path, cli, charliecloud_image: Path) -> None:
    bundle = _copy_example(tmp_path)
    image = tmp_path / "image"  # a copy (hard links): this test changes it afterwards
    subprocess.run(["cp", "-al", str(charliecloud_image), str(image)], check=True)
    common = ["run", "--bundle", str(bundle), *TINY, "--dataset_dir", str(tmp_path / "data")]
    inside = cli(*common, "--container", str(image), "--output_dir", "runs/in", cwd=tmp_path)
    assert inside.returncode == 0, inside.stdout + inside.stderr
    here = cli(*common, "--output_dir", "runs/here", cwd=tmp_path)
    assert here.returncode == 0, here.stdout + here.stderr
    record = yaml.safe_load((tmp_path / "runs/in/run.yaml").read_text())
    assert record["container"]["runtime"] == "charliecloud" and record["container"]["torch"].startswith("2.")
    assert record["container"]["image"] == str(image) and record["container"]["fingerprint"].startswith("dir:")
    assert record["command"]["argv"][0].startswith("/opt/venv/")  # hpc-runner ran from the image's own venv
    dice = [json.loads((tmp_path / f"runs/{r}/summary.json").read_text())["final_metric"] for r in ("in", "here")]
    assert dice[0] == dice[1], dice
    # the image changes: going on in it, or re-running, is refused until the image is named again
    (image / "etc" / "changed-by-the-test").write_text("x")
    resumed = cli("run", "--resume", "runs/in", cwd=tmp_path)
    rerun = cli("rerun", "runs/in", "--output_dir", "runs/rerun", cwd=tmp_path)
    for proc in (resumed, rerun):
        assert proc.returncode == 2 and "changed since the run was made in it" in proc.stderr, proc.stderr
        assert f"--container {image}" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs/rerun").exists()
    accepted = cli("run", "--resume", "runs/in", "--container", str(image), cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr


@pytest.mark.slow  # trains, or builds the Charliecloud image: CI runs it, the quick loop does not
def test_a_missing_image_a_path_no_bind_covers_and_an_image_without_torch_are_exit_2_with_nothing_made(
        tmp_path: Path, cli, charliecloud_image: Path) -> None:
    bundle = _copy_example(tmp_path)
    base = ["run", "--bundle", str(bundle), *TINY, "--output_dir", "runs/x"]
    missing = cli(*base, "--container", str(tmp_path / "nope.sif"), cwd=tmp_path)
    outside = cli(*base, "--container", str(charliecloud_image), "--dataset_dir", "/nonexistent-top/data",
                  cwd=tmp_path)
    no_torch = tmp_path / "no-torch"  # the same image where python3 is Debian's, without the venv: no torch
    subprocess.run(["cp", "-al", str(charliecloud_image), str(no_torch)], check=True)
    (no_torch / "usr/local/bin/python3").unlink()
    torchless = cli(*base, "--container", str(no_torch), "--dataset_dir", str(tmp_path / "data"), cwd=tmp_path)
    for proc, words in [(missing, "does not exist"), (outside, "id 'dataset_dir' names /nonexistent-top/data"),
                        (torchless, "No module named 'torch'")]:
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1
    assert not (tmp_path / "runs").exists()
    assert os.path.isdir(charliecloud_image / "opt/venv")


def test_a_profiles_container_block_is_the_default_and_safe_with_a_container_is_refused(tmp_path: Path) -> None:
    import argparse

    from hpc_runner.cli.container_run import container_for
    from hpc_runner.scheduler.profile import ClusterProfile

    image = tmp_path / "img.sif"
    image.write_bytes(b"SIF")
    profile = ClusterProfile("myjade", [tmp_path / "myjade.yaml"],
                             {"container": {"image": str(image), "runtime": "singularity", "gpu": "nv"}})
    args = argparse.Namespace(container=None, container_runtime=None, safe=False)
    spec = container_for(args, profile)
    assert spec is not None and (spec.image, spec.runtime, spec.gpu) == (str(image), "singularity", "nv")
    assert spec.where == str(tmp_path / "myjade.yaml")
    with pytest.raises(UserError, match="--safe and a container together are not supported yet"):
        container_for(argparse.Namespace(container=None, container_runtime=None, safe=True), profile)
    assert container_for(args, ClusterProfile("slurm", [], {})) is None


def test_commands_that_do_not_run_in_an_image_refuse_a_profile_that_asks_for_one(tmp_path: Path) -> None:
    from hpc_runner.cli.container_run import refuse_container
    from hpc_runner.scheduler.profile import ClusterProfile

    profile = ClusterProfile("myjade", [tmp_path / "myjade.yaml"], {"container": {"image": "/images/m.sif"}})
    for what in ("tune", "pipeline", "submit ckpt_export"):
        with pytest.raises(UserError, match=f"{what} does not run in a container yet") as err:
            refuse_container(profile, what)
        assert "--scheduler-option container=null" in str(err.value)
    refuse_container(ClusterProfile("slurm", [], {"container": None}), "tune")  # no block: nothing to refuse


def test_a_runtime_missing_on_the_login_node_names_the_profiles_on_compute_setting(tmp_path: Path) -> None:
    # first hour, again (issue 47): "apptainer ... is not on PATH. Expected apptainer installed here" named no way out
    # on a JADE-like site, where the runtime is on the compute nodes only
    image = tmp_path / "monai.sif"
    image.write_bytes(b"SIF stand-in")
    spec = ContainerSpec(image=str(image), runtime="apptainer", path=str(tmp_path / "no-apptainer"), where="jade.yaml")
    with pytest.raises(UserError, match="is not on PATH") as err:
        check_image(spec, tmp_path / "cache", {}, str(tmp_path))
    assert "on: compute" in str(err.value) and "path:" in str(err.value), err.value
