"""Per-case Dice and HD95, scored on the CPU whatever device the prediction is on."""

from __future__ import annotations

import pytest
import torch

from hpc_runner.inference.case_metrics import case_metrics


class OnCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA, as a prediction on the GPU does; ``.cpu()`` gives the plain one."""

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", 0)

    def cpu(self, *args, **kwargs) -> torch.Tensor:
        return self.as_subclass(torch.Tensor)


def two_cubes() -> tuple[torch.Tensor, torch.Tensor]:
    label = torch.zeros(1, 1, 16, 16, 16)
    label[..., 4:10, 4:10, 4:10] = 1
    pred = torch.zeros_like(label)
    pred[..., 5:11, 4:10, 4:10] = 1
    return pred, label


@pytest.mark.filterwarnings("ignore:.*always_return_as_numpy:FutureWarning")  # MONAI calls itself so
def test_a_case_on_the_gpu_is_scored_on_the_cpu_and_never_densely(monkeypatch):
    import monai.metrics.utils as mu

    def dense(*args, **kwargs):  # MONAI's path for CUDA tensors (cuCIM, or scipy on a host copy without it)
        raise AssertionError("a dense distance transform of the whole volume")

    monkeypatch.setattr(mu, "monai_distance_transform_edt", dense)
    pred, label = two_cubes()
    on_cpu = case_metrics(pred, label, 2)
    on_gpu = case_metrics(pred.as_subclass(OnCuda), label.as_subclass(OnCuda), 2)
    assert on_gpu == on_cpu
    assert on_cpu["dice"] == pytest.approx(5 / 6) and on_cpu["hd95"] == pytest.approx(1.0)
