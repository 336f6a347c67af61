"""``hpc-runner submit NAME ...`` for MONAI's bundle commands, before anything reaches a scheduler: the
pre-flight refuses what would fail in the job, --dry-run prints the sbatch script, a local profile runs it here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from hpc_runner.cli import main
from tests.monai_commands.conftest import DATA, load_torchscript, save_random_checkpoint


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with MONAI's test configs under data/ and model.pt."""
    shutil.copytree(DATA, tmp_path / "data", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    save_random_checkpoint(tmp_path / "model.pt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(DATA))
    return tmp_path


EXPORT = ["ckpt_export", "network_def", "--filepath", "out/model.ts", "--config_file", "data/inference.json",
          "--meta_file", "data/metadata.json"]


@pytest.mark.parametrize(("change", "words"), [
    (["--ckpt_file", "nowhere.pt"], "not found"),
    (["--ckpt_file", "model.pt", "--net_id", "net"], "'net' is not in the config"),
    (["--ckpt_file", "model.pt", "--config_file", "data/missing.json"], "does not exist"),
])
def test_the_preflight_refuses_an_export_that_would_fail_and_queues_nothing(here: Path, capsys, change, words):
    (here / "out").mkdir()
    argv = ["submit", *EXPORT[:-4], *change, "--meta_file", "data/metadata.json", "--cluster", "slurm"]
    if "--config_file" not in change:
        argv += ["--config_file", "data/inference.json"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (here / "runs").exists()


def test_the_preflight_refuses_an_output_folder_that_does_not_exist(here: Path, capsys) -> None:
    assert main(["submit", *EXPORT, "--ckpt_file", "model.pt", "--cluster", "slurm"]) == 2
    assert "mkdir -p out" in capsys.readouterr().err


def test_the_preflight_refuses_a_workflow_lacking_required_properties(here: Path, capsys) -> None:
    (here / "tiny.json").write_text(json.dumps({"training": "$print('hi')"}))
    assert main(["submit", "run_workflow", "--run_id", "training", "--config_file", "tiny.json", "--meta_file",
                 "data/metadata.json", "--workflow_type", "train", "--cluster", "slurm"]) == 2
    err = capsys.readouterr().err
    assert "lacks properties" in err and "bundle_root" in err and "nothing was submitted" in err


def test_dry_run_prints_the_job_and_writes_nothing(here: Path, capsys) -> None:
    (here / "out").mkdir()
    assert main(["submit", *EXPORT, "--ckpt_file", "model.pt", "--cluster", "slurm", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH" in out and "-m hpc_runner job " in out and "/jobs/job-ID.json" in out
    assert not (here / "runs").exists() and not (here / "out" / "model.ts").exists()


def test_a_local_profile_runs_the_command_here_and_records_it(here: Path, capsys) -> None:
    (here / "out").mkdir()
    assert main(["submit", *EXPORT, "--ckpt_file", "model.pt", "--key_in_ckpt", "", "--cluster", "local",
                 "--job-dir", "jobs/export"]) == 0
    assert "ckpt_export done; job folder jobs/export" in capsys.readouterr().out
    record = yaml.safe_load((here / "jobs" / "export" / "command.yaml").read_text())
    assert record["command"] == "ckpt_export" and record["job"]["id"] == "local"
    assert record["argv"][:3] == ["network_def", "--config_file", "data/inference.json"]
    assert "--key_in_ckpt" in record["argv"]
    _, meta, _ = load_torchscript(here / "out" / "model.ts", [])
    assert meta["version"] == "0.1.0"


def test_positionals_after_an_ordinary_entry_are_refused(here: Path, capsys) -> None:
    assert main(["submit", "training", "extra", "--config_file", "data/inference.json", "--cluster", "local"]) == 2
    assert "unexpected extra" in capsys.readouterr().err
