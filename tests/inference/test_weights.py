"""load_weights: a model.pt, a trainer checkpoint, a run dir, a folder of runs; refusals name the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from hpc_runner.engine.checkpoint import save_checkpoint
from hpc_runner.errors import UserError
from hpc_runner.inference.weights import load_weights
from tests.inference.conftest import make_unet


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_a_model_pt_file_loads_its_state_dict(model_pt: Path) -> None:
    net = make_unet(seed=5)
    assert load_weights(net, model_pt) == model_pt
    assert _same(net, make_unet(0))


def test_a_trainer_checkpoint_gives_its_network_part(tmp_path: Path) -> None:
    path = save_checkpoint(tmp_path / "checkpoints", 7, {"network": make_unet(1).state_dict(), "optimizer": {}})
    net = make_unet(seed=5)
    assert load_weights(net, path) == path
    assert _same(net, make_unet(1))


def test_a_run_dir_without_model_pt_uses_its_newest_checkpoint_that_loads(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "checkpoints", 1, {"network": make_unet(1).state_dict()})
    newest = save_checkpoint(tmp_path / "checkpoints", 2, {"network": make_unet(2).state_dict()})
    net = make_unet(seed=5)
    assert load_weights(net, tmp_path).name == newest.name
    assert _same(net, make_unet(2))
    newest.write_bytes(newest.read_bytes()[:100])  # damaged outside our atomic writes
    assert load_weights(net, tmp_path).name == "ckpt_00000001.pt"
    assert _same(net, make_unet(1))


def test_a_folder_of_runs_uses_the_newest_run_with_a_model_pt(tmp_path: Path, capsys) -> None:
    for name, seed, mtime in (("old", 1, 1_000_000), ("new", 2, 2_000_000)):
        (tmp_path / name).mkdir()
        torch.save(make_unet(seed).state_dict(), tmp_path / name / "model.pt")
        os.utime(tmp_path / name / "model.pt", (mtime, mtime))
    (tmp_path / "inference-run").mkdir()  # a newer run without weights (an inference run dir) is passed over
    net = make_unet(seed=5)
    assert load_weights(net, tmp_path) == tmp_path / "new" / "model.pt"
    assert _same(net, make_unet(2))
    assert str(tmp_path / "new") in capsys.readouterr().out


def test_missing_weights_are_refused_naming_the_path_and_the_id(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_weights(make_unet(), tmp_path / "nope.pt")
    text = err.value.paragraph()
    assert str(tmp_path / "nope.pt") in text and "'ckpt'" in text and "Expected a model.pt" in text


def test_a_folder_without_weights_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty-run").mkdir()
    with pytest.raises(UserError, match=r"holds no model\.pt"):
        load_weights(make_unet(), tmp_path)


def test_weights_of_another_network_are_refused_with_the_cause(tmp_path: Path) -> None:
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "model.pt")
    with pytest.raises(UserError) as err:
        load_weights(make_unet(), tmp_path / "model.pt")
    assert "cannot be loaded" in str(err.value) and "RuntimeError" in str(err.value)
