"""gpu_transforms reaches the Trainer (a Trainer argument, or `hpc-runner run --gpu_transforms`) and leaves
the training it does unchanged: on the CPU, where the device tail runs on the "copied" batch, every loss and
the Dice of the example bundle are the ones of the run without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from monai.data import Dataset
from monai.transforms import Compose, RandFlipd
from torch import nn

from hpc_runner.data import ThreadDataLoader
from hpc_runner.engine.trainer import Trainer
from hpc_runner.engine.trainer_args import GPU_TRANSFORMS_ENV, gpu_transforms_wanted
from hpc_runner.errors import ConfigError
from hpc_runner.records.metrics_log import read_metrics

BUNDLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
TINY = ["--num_train", "4", "--num_val", "2", "--image_size", "16", "--max_epochs", "2", "--val_interval", "1"]
ITEMS = [{"image": torch.randn(1, 6, 6), "label": torch.randn(1, 6, 6)} for _ in range(4)]


def trainer(out: Path, loader, **kw) -> Trainer:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Conv2d(2, 1, 1))
    return Trainer(net, torch.optim.Adam(net.parameters()), nn.MSELoss(), loader, max_epochs=2, device="cpu",
                   output_dir=out, progress=False, seed=3, **kw)


def flip_loader() -> ThreadDataLoader:
    data = Dataset(ITEMS, Compose([RandFlipd(("image", "label"), prob=0.5, spatial_axis=0)]))
    return ThreadDataLoader(data, batch_size=2, shuffle=True, num_workers=2, use_thread_workers=True, seed=3)


def test_the_trainer_argument_decides_and_the_environment_decides_when_it_is_unset(monkeypatch):
    monkeypatch.delenv(GPU_TRANSFORMS_ENV, raising=False)
    assert gpu_transforms_wanted(None) is False
    monkeypatch.setenv(GPU_TRANSFORMS_ENV, "1")
    assert gpu_transforms_wanted(None) is True and gpu_transforms_wanted(False) is False
    with pytest.raises(ConfigError, match="gpu_transforms: true, false"):
        gpu_transforms_wanted("yes")


def test_gpu_transforms_with_a_loader_that_cannot_defer_is_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="ThreadDataLoader, not DataLoader"):
        trainer(tmp_path, torch.utils.data.DataLoader(ITEMS, batch_size=2), gpu_transforms=True)


def test_a_trainer_with_gpu_transforms_trains_as_one_without(tmp_path, capsys):
    off = trainer(tmp_path / "off", flip_loader()).run()
    on = trainer(tmp_path / "on", flip_loader(), gpu_transforms=True).run()
    assert "gpu_transforms: RandFlipd run on cpu after the copy" in capsys.readouterr().out
    assert (on["gpu_transforms"], off["gpu_transforms"]) == (True, False)
    steps = [[r["loss"] for r in read_metrics(tmp_path / d / "metrics.jsonl") if r["kind"] == "iter"]
             for d in ("off", "on")]
    assert steps[0] == steps[1] and len(steps[0]) == 4


@pytest.mark.slow  # two real runs of the example bundle (~15 s on a 2-core VM)
def test_run_gpu_transforms_is_recorded_and_leaves_the_example_bundles_dice_unchanged(cli, tmp_path):
    data = tmp_path / "data"
    results, stdout = {}, {}
    for name, flag in (("off", []), ("on", ["--gpu_transforms"])):
        out = tmp_path / name
        res = cli("run", "training", "--bundle", str(BUNDLE), "--output_dir", str(out), "--dataset_dir", str(data),
                  *TINY, *flag, cwd=tmp_path)
        assert res.returncode == 0, res.stderr[-2000:]
        results[name], stdout[name] = out, res.stdout
    on, off = results["on"], results["off"]
    assert "gpu_transforms: RandFlipd, RandRotate90d run on cpu after the copy" in stdout["on"]
    assert "hpc-runner: gpu_transforms" not in stdout["off"]
    record = yaml.safe_load((on / "run.yaml").read_text())
    assert record["env"]["HPCR"].get(GPU_TRANSFORMS_ENV) == "1"
    assert GPU_TRANSFORMS_ENV not in yaml.safe_load((off / "run.yaml").read_text())["env"]["HPCR"]
    summary = {d: json.loads((d / "summary.json").read_text()) for d in (on, off)}
    assert summary[on]["gpu_transforms"] is True and summary[off]["gpu_transforms"] is False
    # on the CPU the same transforms run on the same tensors with the same seeds, only later: bit-identical
    assert summary[on]["final_metric"] == summary[off]["final_metric"]
    losses = {d: [r["loss"] for r in read_metrics(d / "metrics.jsonl") if r["kind"] == "iter"] for d in (on, off)}
    assert losses[on] == losses[off] and len(losses[on]) == 4
