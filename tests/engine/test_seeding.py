"""Random states across a resume on any device, per rank and per GPU; CUBLAS_WORKSPACE_CONFIG for determinism."""

from __future__ import annotations

import io
import os

import pytest
import torch
import yaml

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.engine.runner import prepare_run
from hpc_runner.engine.seeding import (
    CUBLAS_VARIABLE,
    capture_rng,
    cublas_workspace_decision,
    cuda_state_for_device,
    restore_rng,
    rng_for_rank,
)


def test_random_states_loaded_onto_another_device_cannot_be_restored():
    """What a checkpoint loaded with map_location=<the GPU> did (``meta`` stands in for it on a CPU)."""
    buf = io.BytesIO()
    torch.save({"rng": capture_rng()}, buf)
    buf.seek(0)
    on_device = torch.load(buf, map_location="meta", weights_only=True)["rng"]
    with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
        restore_rng(on_device)  # keys.numpy() of NumPy's state, as on CUDA
    with pytest.raises(TypeError, match=r"RNG state must be a torch\.ByteTensor"):
        torch.set_rng_state(on_device["torch"])
    buf.seek(0)
    restore_rng(torch.load(buf, map_location="cpu", weights_only=True)["rng"])  # loaded to the CPU: fine


def test_a_rank_restores_its_own_states_and_is_told_when_the_checkpoint_has_only_rank_0s():
    states = [{"who": r} for r in range(3)]
    assert rng_for_rank({"rng": states[0], "rng_by_rank": states}, 2, 3) == ({"who": 2}, None)
    single, note = rng_for_rank({"rng": states[0]}, 1, 2)  # a checkpoint written before the states were per rank
    assert single == {"who": 0} and "rank 1 continues from rank 0's" in note
    assert rng_for_rank({"rng": states[0], "rng_by_rank": states}, 1, 2)[1].startswith("the checkpoint kept")
    assert rng_for_rank({"rng": states[0], "rng_by_rank": states[:1]}, 0, 1) == ({"who": 0}, None)


def test_the_cuda_state_goes_to_the_current_gpu_and_an_old_list_never_indexes_past_the_gpus_seen():
    one = torch.zeros(16, dtype=torch.uint8)
    assert cuda_state_for_device(one, current=3) is one  # this format: the saving rank's current GPU
    old = [torch.full((16,), i, dtype=torch.uint8) for i in range(4)]  # get_rng_state_all() of a 4-GPU process
    assert torch.equal(cuda_state_for_device(old, current=1), old[1])
    assert cuda_state_for_device(old[:1], current=1) is None  # set_rng_state_all raised IndexError here
    assert cuda_state_for_device(None, current=0) is None


def test_cublas_workspace_config_is_set_for_a_deterministic_run_before_cuda_starts_and_a_users_value_kept():
    assert cublas_workspace_decision({}, deterministic=False, cuda_started=False) == (None, None)
    value, line = cublas_workspace_decision({}, deterministic=True, cuda_started=False)
    assert value == ":4096:8" and "set CUBLAS_WORKSPACE_CONFIG=:4096:8 before CUDA started" in line
    assert cublas_workspace_decision({CUBLAS_VARIABLE: ":16:8"}, True, True) == (
        None, "deterministic: CUBLAS_WORKSPACE_CONFIG=:16:8 (set before the run)")
    value, line = cublas_workspace_decision({}, deterministic=True, cuda_started=True)
    assert value is None and "may not be deterministic" in line


def test_a_deterministic_bundle_gets_the_variable_before_it_is_built_and_run_yaml_records_it(
        tiny_bundle, tmp_path, monkeypatch):
    monkeypatch.delenv(CUBLAS_VARIABLE, raising=False)
    cfg = load_bundle_config(bundle=str(tiny_bundle), environ={},
                             cli_overrides=parse_cli_overrides(["--+trainer::deterministic", "true"]))
    run_dir, _ = prepare_run(cfg, None, tmp_path / "run")
    record = yaml.safe_load((run_dir.path / "run.yaml").read_text())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # on a GPU machine an earlier test of this worker started CUDA: too late to set it, and it says so
        assert record["deterministic"][CUBLAS_VARIABLE] is None
        assert "may not be deterministic" in record["deterministic"]["note"]
        return
    assert record["deterministic"][CUBLAS_VARIABLE] == ":4096:8"
    assert os.environ[CUBLAS_VARIABLE] == ":4096:8"
