"""MONAI compatibility: a model-zoo style bundle runs with hpc-runner; our example runs with monai.bundle."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from registry_helpers import EXAMPLE, TINY, ZOO, clean_env, out
from warm_python import WARM


@pytest.fixture
def spheres(tmp_path: Path) -> Path:
    """Four 32³ NIfTI volumes with labels (3 train, 1 val) in the layout the zoo bundle globs."""
    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    ensure_synthetic_volumes(tmp_path / "data", num_train=3, num_val=1, size=32)
    return tmp_path / "data"


def test_override_file_merges_over_train(cli) -> None:
    base = cli("config", "--bundle", ZOO, "--format", "json")
    merged = cli("config", "--bundle", ZOO, "--config_file", "configs/train.json,configs/multi_cpu_train.json",
                 "--format", "json")
    assert base.returncode == 0 and merged.returncode == 0, out(base) + out(merged)
    base, merged = json.loads(base.stdout), json.loads(merged.stdout)
    # `+train#handlers` extends the list; `train#dataloader#sampler` adds a nested id; `device` replaces
    assert [h["_target_"] for h in base["train"]["handlers"]] == ["ValidationHandler", "StatsHandler"]
    assert [h["_target_"] for h in merged["train"]["handlers"]] == ["ValidationHandler", "StatsHandler",
                                                                   "CheckpointSaver"]
    assert merged["train"]["handlers"][2]["final_filename"] == "final.pt"
    assert merged["train"]["dataloader"]["sampler"] == "@train::sampler"
    assert merged["train"]["dataloader"]["shuffle"] is False and base["train"]["dataloader"]["shuffle"] is True
    assert merged["device"] == "$torch.device('cpu')"
    assert merged["network"]["_target_"] == "torch.nn.parallel.DistributedDataParallel"
    assert merged["initialize"][1] == "$dist.is_initialized() or dist.init_process_group(backend='gloo')"
    assert merged["validate"]["postprocessing"] == base["train"]["postprocessing"]  # `%` macro expanded


@pytest.mark.slow
def test_zoo_bundle_runs_with_hpc_runner(cli, tmp_path: Path, spheres: Path) -> None:
    proc = cli("run", "--bundle", ZOO, "--dataset_dir", spheres, "--output_dir", tmp_path / "run", timeout=120)
    assert proc.returncode == 0, out(proc)
    run = tmp_path / "run"
    assert yaml.safe_load((run / "run.yaml").read_text())["status"] == "completed"
    log = (run / "log.txt").read_text()
    assert "Epoch: 2/2" in log and "val_mean_dice" in log  # SupervisedTrainer, ValidationHandler, MeanDice
    assert (run / "models" / "model.pt").is_file()  # CheckpointSaver of the evaluator, under output_dir


@pytest.mark.slow
def test_zoo_bundle_runs_with_the_multi_process_override(cli, tmp_path: Path, spheres: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = cli("run", "--bundle", ZOO, "--config_file", "configs/train.json,configs/multi_cpu_train.json",
               "--dataset_dir", spheres, "--output_dir", tmp_path / "run", timeout=120,
               RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    assert proc.returncode == 0, out(proc)
    assert (tmp_path / "run" / "models" / "final.pt").is_file()  # the handler the override merged in


@pytest.mark.slow
def test_example_bundle_runs_with_monai_bundle(tmp_path: Path) -> None:
    # MONAI needs nothing beyond the ids: fire turns --ID VALUE into overrides of top-level ids
    args = ["--config_file", EXAMPLE / "configs" / "train.yaml", "--meta_file", EXAMPLE / "configs" / "metadata.json",
            *TINY, "--dataset_dir", tmp_path / "data", "--output_dir", tmp_path / "out"]
    proc = WARM.run("monai.bundle", ["run", *map(str, args)], cwd=tmp_path, env=clean_env(tmp_path), timeout=120)
    assert proc.returncode == 0, out(proc)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["metric_name"] == "val_dice"
