"""`hpc-runner run`: entries, run records, failures that keep what was written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


def test_run_records_config_overrides_command_and_environment(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "run1"
    res = cli("run", "--bundle", str(tiny_bundle), "--max_epochs", "1", "--output_dir", str(out),
              cwd=tmp_path, env={"HPCR__checkpoint_interval": "3", "SLURM_CPUS_PER_TASK": "2"})
    assert res.returncode == 0, res.stderr
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["max_epochs"] == 1 and config["checkpoint_interval"] == 3
    assert config["output_dir"] == str(out.resolve())
    overrides = yaml.safe_load((out / "overrides.yaml").read_text())
    by_id = {o["id"]: o for o in overrides}
    assert by_id["max_epochs"]["source"] == "cli"
    assert by_id["checkpoint_interval"]["origin"] == "HPCR__checkpoint_interval"
    assert by_id["max_epochs"]["replaced"].endswith("train.yaml:3")
    record = yaml.safe_load((out / "run.yaml").read_text())
    assert record["status"] == "completed" and record["entry"] == "run"
    assert record["command"]["argv"][1:3] == ["run", "--bundle"]
    job = record["scheduler"]  # scheduler/job_env.py job_record: the scheduler whose variables were there
    assert job["name"] == "slurm" and job["cpus"] == 2
    assert job["variables"]["SLURM_CPUS_PER_TASK"] == "2"  # CI's own SLURM_CONF may sit beside it
    assert all(key.startswith("SLURM_") for key in job["variables"])
    assert record["env"]["HPCR"] == {"HPCR__checkpoint_interval": "3"}
    assert {"python", "torch", "monai", "hpc-runner"} <= set(record["versions"])
    assert record["host"]["hostname"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["steps"] == 6 and 0 <= summary["val_dice"] <= 1
    kinds = [json.loads(line)["kind"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("iter") == 6 and "val" in kinds and "epoch" in kinds
    assert "finalize ran" in (out / "log.txt").read_text()
    assert (out / "model.pt").is_file() and list((out / "checkpoints").glob("ckpt_*.pt"))


def test_legacy_training_entry_runs_the_training_id(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "training", "--bundle", str(tiny_bundle), "--max_epochs", "1", "--output_dir", "r",
              cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert yaml.safe_load((tmp_path / "r" / "run.yaml").read_text())["entry"] == "training"


def test_default_run_dir_is_runs_bundle_timestamp(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--max_epochs", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "runs" / "tiny2d").iterdir()
    assert (run_dir / "summary.json").is_file()
    assert f"run dir {Path('runs') / 'tiny2d' / run_dir.name}" in res.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["nope"], ["entry 'nope'", "run, training"]),
        (["--strict-ids", "--max_epoch", "2"], ["max_epoch", "Did you mean: max_epochs"]),
        (["--trainr::max_epochs", "2"], ["whose parent 'trainr' is not in the config"]),
        (["--max_epochs", "many"], ["a number", "train.yaml:3"]),
        (["--max_epochs", "[1,"], ["not valid YAML"]),
        (["--trainer::network", "@network"], ["'@network'", "trainer::network"]),
        (["--max_epochs", "@max_epochs"], ["circular reference"]),
        (["--output_dir", "${env:NOT_SET_ANYWHERE}"], ["NOT_SET_ANYWHERE", "output_dir"]),
    ],
)
def test_bad_input_exits_2_with_one_paragraph(tiny_bundle: Path, tmp_path: Path, cli, args, needles) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), *args, cwd=tmp_path)
    assert res.returncode == 2
    err = res.stderr.strip()
    assert err.startswith("hpc-runner run: error:") and "\n" not in err and "Traceback" not in err
    for needle in needles:
        assert needle in err
    assert not (tmp_path / "runs").exists()  # nothing half-written


def test_missing_and_broken_files_exit_2(tmp_path: Path, cli) -> None:
    res = cli("run", "--config_file", str(tmp_path / "missing.yaml"), cwd=tmp_path)
    assert res.returncode == 2 and "missing.yaml: config file not found" in res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    res = cli("config", "--config_file", str(bad), cwd=tmp_path)
    assert res.returncode == 2 and f"{bad}:2:" in res.stderr


def test_a_missing_metadata_field_is_one_warning_line_not_a_refusal(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    meta = tiny_bundle / "configs" / "metadata.json"
    data = json.loads(meta.read_text())
    del data["authors"]
    meta.write_text(json.dumps(data))
    res = cli("config", "--bundle", str(tiny_bundle), cwd=tmp_path)  # MONAI's run never validates metadata
    assert res.returncode == 0, res.stderr
    [line] = [ln for ln in res.stderr.splitlines() if "metadata.json" in ln]
    assert line.startswith("hpc-runner: warning:") and "'authors' is missing" in line


def test_debug_shows_the_traceback(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "--debug", "--strict-ids", "--bundle", str(tiny_bundle), "--max_epoch", "2", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" in res.stderr


def test_a_run_that_fails_later_keeps_its_checkpoints_and_records_the_error(
    tiny_bundle: Path, tmp_path: Path, cli
) -> None:
    out = tmp_path / "r"
    # the learning rate explodes the loss in epoch 2; checkpoints of epoch 1 must survive
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", str(out), "--lr_scheduler::gamma", "1e6",
              "--checkpoint_interval", "0", cwd=tmp_path)
    assert res.returncode == 1
    assert "run failed" in res.stderr and "error.txt" in res.stderr
    record = yaml.safe_load((out / "run.yaml").read_text())
    assert record["status"] == "failed" and record["error"]["type"]
    assert "Traceback" in (out / "error.txt").read_text()
    ckpts = sorted((out / "checkpoints").glob("ckpt_*.pt"))
    assert ckpts, "the epoch-end checkpoint written before the failure is kept"
    import torch

    state = torch.load(ckpts[-1], weights_only=True)
    assert state["epoch"] >= 1
    assert "finalize ran" in (out / "log.txt").read_text()  # finalize runs even after a failure


def test_instantiation_error_names_the_failing_id(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--+network_def::chanels", "3", "--output_dir", "r",
              cwd=tmp_path)
    assert res.returncode == 1
    assert "while resolving id 'network_def'" in res.stderr


@pytest.mark.slow  # several training runs in a row: the full suite's, not the inner loop's
def test_a_job_of_a_run_submitted_with_safe_checks_safe_again(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    """A job (or a requeue) imports the bundle's code when it starts, so --safe is checked then too."""
    run = tmp_path / "r"
    res = cli("run", "--bundle", str(tiny_bundle), "--output_dir", str(run), "--max_epochs", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    record = yaml.safe_load((run / "run.yaml").read_text())
    (run / "run.yaml").write_text(yaml.safe_dump({**record, "safe": True}))  # as `submit --safe` records it
    code = f"from hpc_runner.engine.runner import run_recorded; print(run_recorded({str(run)!r}).status)"
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env=cli.env)
    # the bundle's $ expressions and scripts.tiny are refused before any of its code runs
    assert res.returncode != 0 and "--safe refuses" in res.stderr and "scripts.tiny" in res.stderr, res.stdout
    assert "finalize ran" not in res.stdout


def test_run_refuses_an_added_id_nothing_references_with_the_option_it_looks_like(tiny_bundle: Path, tmp_path: Path,
                                                                                  cli) -> None:
    # 6ca9a4e warned and trained every epoch of max_epochs: --max_epoch could not change the run
    res = cli("run", "--bundle", str(tiny_bundle), "--max_epoch", "2", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "did you mean --max_epochs?" in res.stderr and "nothing in it references" in res.stderr
    assert not (tmp_path / "runs").exists()


def test_run_keeps_an_added_id_that_the_config_references(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("config", "--bundle", str(tiny_bundle), "--my_epochs", "1", "--max_epochs", "@my_epochs",
              "--format", "json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.config.overrides import parse_cli_overrides

    cfg = load_bundle_config(tiny_bundle, cli_overrides=parse_cli_overrides(["--my_epochs", "1", "--max_epochs",
                                                                             "@my_epochs"]), refuse_unused_ids=True)
    assert cfg.config["my_epochs"] == 1
