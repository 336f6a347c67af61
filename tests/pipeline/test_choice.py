"""A stage from a select stage takes the chosen weights and values, written into its config before it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import Override
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.engine.runner import prepare_run
from hpc_runner.errors import UserError
from hpc_runner.pipeline.choice import apply_choice, choice_values

BUNDLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"


@pytest.fixture
def prepared(tmp_path):
    """The evaluate stage's run dir as the pipeline queues it: the weights are a placeholder."""
    cfg = load_bundle_config(BUNDLE, entry="evaluate", cli_overrides=[
        Override("ckpt", str(tmp_path / "best" / "chosen"), "pipeline", "placeholder")])
    run_dir, _ = prepare_run(cfg, "evaluate", tmp_path / "test")
    return run_dir.path


def choice(tmp_path: Path, **params) -> dict:
    return {"stage": "best", "from": "search", "point": 1, "run_dir": str(tmp_path / "search" / "points" / "0001"),
            "params": params}


def test_the_choice_is_written_into_the_prepared_config_with_the_ids_it_has(tmp_path, prepared):
    chosen = choice(tmp_path, learning_rate=0.004, **{"network_def::channels": [4, 8, 16, 32]})
    applied = apply_choice(prepared, chosen, "ckpt")
    config = yaml.safe_load((prepared / "config.yaml").read_text())
    assert config["ckpt"] == chosen["run_dir"]
    assert config["network_def"]["channels"] == [4, 8, 16, 32]  # the network matches the chosen weights
    assert "learning_rate" not in config  # an id of the training only
    assert applied["not_in_config"] == ["learning_rate"]
    record = yaml.safe_load((prepared / "run.yaml").read_text())
    assert record["pipeline"]["choice"]["point"] == 1 and record["status"] == "prepared"
    overrides = yaml.safe_load((prepared / "overrides.yaml").read_text())
    assert {o["id"]: o["value"] for o in overrides if o["source"] == "pipeline"} == {
        "network_def::channels": [4, 8, 16, 32], "ckpt": chosen["run_dir"]}


def test_the_job_reads_the_rewritten_config_back_as_the_same_config(tmp_path, prepared):
    apply_choice(prepared, choice(tmp_path, **{"network_def::channels": [4, 8, 16, 32]}), "ckpt")
    before = (prepared / "config.yaml").read_text()
    cfg, _ = load_recorded_config(prepared)  # what run_recorded does when the stage's job starts
    prepare_run(cfg, "evaluate", prepared)  # refuses a run dir that holds a different config
    assert (prepared / "config.yaml").read_text() == before


def test_a_value_the_stage_sets_itself_is_not_taken_from_the_choice(tmp_path):
    config = {"network_def": {"channels": [8, 16]}, "ckpt": "x"}
    taken, skipped = choice_values(config, {"params": {"network_def::channels": [1, 2], "lr": 1}},
                                   own={"network_def::channels"})
    assert taken == {} and skipped == ["lr"]


def test_a_choice_the_config_cannot_take_is_refused_and_the_config_left_as_it_was(tmp_path, prepared):
    before = (prepared / "config.yaml").read_text()
    with pytest.raises(UserError):
        apply_choice(prepared, choice(tmp_path, **{"network_def::channels": "not a list"}), "ckpt")
    assert (prepared / "config.yaml").read_text() == before
