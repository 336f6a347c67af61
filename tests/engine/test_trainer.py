"""The Trainer's device-facing decisions on a CPU: a resume loads to the CPU whatever the device, model.pt
holds CPU tensors, DDP options are checked. ``meta`` and fake CUDA tensors stand in for a GPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpc_runner.engine.seeding import restore_rng
from hpc_runner.engine.trainer import Trainer
from hpc_runner.errors import ConfigError

ITEMS = [{"image": torch.randn(1, 6, 6), "label": torch.randn(1, 6, 6)} for _ in range(4)]


def trainer(out, device=None, **kw) -> Trainer:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.Conv2d(2, 1, 1))
    if device is not None:
        net.to(device)  # as a bundle does (`$@network_def.to(@device)`), before the optimizer is made on it
    loader = torch.utils.data.DataLoader(ITEMS, batch_size=1)
    return Trainer(net, torch.optim.Adam(net.parameters()), nn.MSELoss(), loader, max_epochs=1, device=device,
                   output_dir=out, progress=False, **kw)


@pytest.mark.filterwarnings("ignore:.*to a meta parameter:UserWarning")  # meta weights take no values
def test_a_resume_on_another_device_keeps_the_random_states_and_adams_step_on_the_cpu(tmp_path):
    # a checkpoint mid-epoch (step 2 of 4), written by a CPU run
    trainer(tmp_path, checkpoint_interval=2).run()
    for late in sorted((tmp_path / "checkpoints").glob("*.pt"))[1:]:
        late.unlink()
    resumed = trainer(tmp_path, device="meta")  # `meta` stands in for the GPU: map_location=device moved all there
    rng, path = resumed._resume()
    assert path.endswith("ckpt_00000002.pt") and resumed.batch_in_epoch == 2
    tensors = [rng["torch"], rng["numpy"][1]]
    assert all(t.device.type == "cpu" for t in tensors), [t.device for t in tensors]
    restore_rng(rng)  # needs CPU tensors: set_rng_state takes a CPU ByteTensor, NumPy's keys a .numpy()
    states = list(resumed.optimizer.state.values())
    assert states and all(s["step"].device.type == "cpu" for s in states)  # foreach Adam .item()s a CUDA step
    assert all(s["exp_avg"].device.type == "meta" for s in states)  # moments follow the parameters


def test_model_pt_is_written_from_cpu_copies_of_the_weights():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from hpc_runner.engine.trainer import cpu_state_dict

    with FakeTensorMode(allow_non_fake_inputs=True):  # CUDA tensors without a GPU
        net = nn.Linear(3, 2, device="meta")
        net.weight = nn.Parameter(torch.empty(2, 3, device="cuda"))
        net.bias = nn.Parameter(torch.empty(2, device="cuda"))
        assert net.weight.device.type == "cuda"
        weights = cpu_state_dict(net)
    assert {k: v.device.type for k, v in weights.items()} == {"weight": "cpu", "bias": "cpu"}


def test_model_pt_loads_without_map_location(tmp_path):
    trainer(tmp_path).run()
    locations = []
    torch.load(tmp_path / "model.pt", weights_only=True,
               map_location=lambda storage, loc: locations.append(loc) or storage)
    assert locations and set(locations) == {"cpu"}


def test_ddp_options_are_the_ones_ddp_takes_and_device_ids_stay_the_trainers():
    from hpc_runner.engine.trainer import ddp_options

    assert ddp_options({"find_unused_parameters": True, "static_graph": False}) == {
        "find_unused_parameters": True, "static_graph": False}
    assert ddp_options(None) == {}
    with pytest.raises(ConfigError, match="unknown DistributedDataParallel option"):
        ddp_options({"device_ids": [0]})
    with pytest.raises(ConfigError, match="find_unused_parameters"):
        trainer(None, ddp={"find_unused_paramters": True})


class _Countdown:
    """A metric whose value falls at each validation (4, 3, 2): its best is the last under min, the first under max."""

    def __init__(self) -> None:
        self.value = 5.0

    def reset(self) -> None:
        pass

    def __call__(self, y_pred, y) -> None:
        pass

    def aggregate(self) -> torch.Tensor:
        self.value -= 1
        return torch.tensor(self.value)


@pytest.mark.parametrize(("mode", "best", "epoch"), [("max", 4.0, 1), ("min", 2.0, 3)])
def test_metric_mode_decides_which_validation_is_best(tmp_path, mode, best, epoch):
    import json

    loader = torch.utils.data.DataLoader(ITEMS[:1], batch_size=1)
    t = trainer(tmp_path, val_loader=loader, metric=_Countdown(), metric_name="val_loss", metric_mode=mode)
    t.max_epochs = 3
    t.run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["best_metric"], summary["best_epoch"], summary["metric_mode"]) == (best, epoch, mode)


def test_a_metric_mode_that_means_nothing_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"metric_mode: max .* or min"):
        trainer(tmp_path, metric_mode="minimize")


def test_amp_on_the_cpu_warns_once_per_process_that_it_is_slow(tmp_path, monkeypatch):
    from hpc_runner.engine import trainer_args

    monkeypatch.setattr(trainer_args, "_amp_on_cpu_warned", False)
    with pytest.warns(RuntimeWarning, match="slower than float32") as caught:
        trainer(tmp_path / "a", device="cpu", amp=True)
        trainer(tmp_path / "b", device="cpu", amp=True)  # a sweep's second Trainer: no second warning
    assert len([w for w in caught if "autocast" in str(w.message)]) == 1
    monkeypatch.setattr(trainer_args, "_amp_on_cpu_warned", False)
    assert not trainer_args.warn_amp_on_cpu(False, "cpu") and not trainer_args.warn_amp_on_cpu(True, "cuda")
