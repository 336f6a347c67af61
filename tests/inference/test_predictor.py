"""The inference/evaluation loop: voxel-equal outputs, resume, damaged outputs, shards, metrics."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from hpc_runner.errors import ConfigError
from hpc_runner.inference.inputs import inference_datalist
from hpc_runner.inference.manifest import OutputManifest
from hpc_runner.inference.nifti import read_nifti
from hpc_runner.inference.predictor import Predictor, evaluate, infer
from tests.inference.conftest import AFFINE, make_unet, make_volumes

ROI = (32, 32, 32)


def _loader(items: list[dict], keys: tuple[str, ...] = ("image",)):
    from monai.data import Dataset
    from monai.transforms import Compose, EnsureChannelFirstd, EnsureTyped, LoadImaged, ScaleIntensityd

    from hpc_runner.data import ThreadDataLoader

    transform = Compose([LoadImaged(keys=list(keys), image_only=True), EnsureChannelFirstd(keys=list(keys)),
                         ScaleIntensityd(keys="image"), EnsureTyped(keys=list(keys))])
    return ThreadDataLoader(Dataset(items, transform), batch_size=1, num_workers=0)


def _predictor(tmp_path: Path, model_pt: Path, items: list[dict], **kw) -> Predictor:
    from monai.inferers import SlidingWindowInferer

    keys = ("image", "label") if kw.get("label_key") else ("image",)
    kw.setdefault("output_dir", tmp_path / "run")
    return Predictor(make_unet(seed=9), _loader(items, keys), tmp_path / "preds", ckpt=model_pt,
                     inferer=SlidingWindowInferer(ROI, sw_batch_size=2, overlap=0.25), device="cpu", **kw)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    return make_volumes(tmp_path_factory.mktemp("vols"), 4, size=40)


def _reference(image_path: Path) -> np.ndarray:
    """The label map computed without the Predictor: plain sliding_window_inference and argmax."""
    import nibabel as nib
    from monai.inferers import sliding_window_inference

    net = make_unet(0)  # the weights model_pt holds
    x = np.asarray(nib.load(image_path).dataobj, dtype=np.float32)
    x = (x - x.min()) / (x.max() - x.min())  # ScaleIntensity
    with torch.no_grad():
        logits = sliding_window_inference(torch.from_numpy(x)[None, None], ROI, 2, net, overlap=0.25)
    return torch.argmax(torch.softmax(logits, 1), dim=1)[0].numpy().astype(np.uint8)


@pytest.mark.slow  # trains, or builds the Charliecloud image: CI runs it, the quick loop does not
def test_predictions_are_voxel_equal_to_plain_sliding_window_inference_with_the_input_affine(
        tmp_path: Path, model_pt: Path, data) -> None:
    images, _ = data
    summary = infer(_predictor(tmp_path, model_pt, inference_datalist(images)))
    assert summary["written"] == summary["count"] == 4 and summary["skipped"] == 0
    for i in range(4):
        array, affine = read_nifti(tmp_path / "preds" / f"case_{i:03d}_seg.nii.gz")
        assert array.dtype == np.uint8
        np.testing.assert_array_equal(array, _reference(images / f"case_{i:03d}.nii.gz"))
        np.testing.assert_allclose(affine, AFFINE)
    rows = list(csv.DictReader((tmp_path / "run" / "cases.csv").open()))
    assert [r["case"] for r in rows] == [f"case_{i:03d}" for i in range(4)]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["written"] == 4


def test_a_resumed_run_writes_nothing_new(tmp_path: Path, model_pt: Path, data) -> None:
    images, _ = data
    items = inference_datalist(images)
    infer(_predictor(tmp_path, model_pt, items))
    outputs = sorted((tmp_path / "preds").glob("*.nii.gz"))
    stamps = [p.stat().st_mtime_ns for p in outputs]
    summary = infer(_predictor(tmp_path, model_pt, items))
    assert (summary["written"], summary["skipped"], summary["count"]) == (0, 4, 4)
    assert [p.stat().st_mtime_ns for p in sorted((tmp_path / "preds").glob("*.nii.gz"))] == stamps
    assert len(list(csv.DictReader((tmp_path / "run" / "cases.csv").open()))) == 4


def test_a_truncated_output_is_named_and_written_again(tmp_path: Path, model_pt: Path, data) -> None:
    images, _ = data
    items = inference_datalist(images)
    infer(_predictor(tmp_path, model_pt, items))
    damaged = tmp_path / "preds" / "case_002_seg.nii.gz"
    good = damaged.read_bytes()
    damaged.write_bytes(good[: len(good) // 2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = infer(_predictor(tmp_path, model_pt, items))
    assert any(str(damaged) in str(w.message) for w in caught)
    assert (summary["written"], summary["skipped"]) == (1, 3)
    assert damaged.read_bytes() == good  # equal input gives equal bytes


def test_shards_write_every_case_exactly_once(tmp_path: Path, model_pt: Path, data) -> None:
    images, _ = data
    counts = []
    for shard in range(3):
        items = inference_datalist(images, shard_index=shard, num_shards=3)
        s = infer(_predictor(tmp_path, model_pt, items, shard_index=shard, num_shards=3,
                             output_dir=tmp_path / f"run{shard}"))
        counts.append(s["written"])
    assert counts == [2, 1, 1]
    assert sorted(p.name for p in (tmp_path / "preds").glob("*.nii.gz")) == [f"case_{i:03d}_seg.nii.gz"
                                                                             for i in range(4)]
    assert sorted(p.name for p in (tmp_path / "preds").glob("manifest*.jsonl")) == [
        f"manifest-{s:03d}-of-003.jsonl" for s in range(3)]
    assert sorted(OutputManifest.read_all(tmp_path / "preds")) == [f"case_{i:03d}" for i in range(4)]


def test_evaluation_dice_equals_monai_dice_metric_and_survives_a_resume(tmp_path: Path, model_pt: Path,
                                                                        data) -> None:
    from monai.metrics import DiceMetric
    from monai.networks.utils import one_hot

    images, labels = data
    items = inference_datalist(images, labels)
    summary = evaluate(_predictor(tmp_path, model_pt, items, label_key="label"))
    rows = {r["case"]: r for r in csv.DictReader((tmp_path / "run" / "cases.csv").open())}
    metric = DiceMetric(include_background=False, reduction="none")
    for item in items:
        pred, _ = read_nifti(tmp_path / "preds" / f"{item['case']}_seg.nii.gz")
        truth, _ = read_nifti(Path(item["label"]))
        value = metric(one_hot(torch.from_numpy(pred.astype(np.int64))[None, None], 2),
                       one_hot(torch.from_numpy(truth.astype(np.int64))[None, None], 2))
        assert float(rows[item["case"]]["dice"]) == pytest.approx(float(value), abs=1e-6)
    assert summary["metrics"]["dice"]["mean"] == pytest.approx(
        np.mean([float(r["dice"]) for r in rows.values()]), abs=1e-9)
    assert all(r["hd95"] != "" for r in rows.values()) or summary["cases_without_value"]
    again = evaluate(_predictor(tmp_path, model_pt, items, label_key="label"))  # a resumed shard
    assert again["skipped"] == 4 and again["metrics"] == summary["metrics"]


def test_inference_outputs_are_evaluated_not_skipped_when_the_metrics_are_missing(
        tmp_path: Path, model_pt: Path, data) -> None:
    images, labels = data
    infer(_predictor(tmp_path, model_pt, inference_datalist(images)))
    s = evaluate(_predictor(tmp_path, model_pt, inference_datalist(images, labels), label_key="label"))
    assert s["skipped"] == 0 and s["metrics"]["dice"]["missing"] == 0


def test_an_empty_class_gives_none_and_says_so(tmp_path: Path, model_pt: Path, data, capsys) -> None:
    import nibabel as nib

    images, _ = data
    empty = tmp_path / "empty_labels"
    empty.mkdir()
    for i in range(4):
        nib.save(nib.Nifti1Image(np.zeros((40, 40, 40), np.uint8), AFFINE), empty / f"case_{i:03d}.nii.gz")
    s = evaluate(_predictor(tmp_path, model_pt, inference_datalist(images, empty), label_key="label",
                            write_predictions=False))
    assert s["metrics"]["dice"] == {"mean": None, "median": None, "missing": 4}
    assert "empty" in capsys.readouterr().out
    assert not list((tmp_path / "preds").glob("*.nii.gz"))


def test_evaluate_without_labels_is_refused(tmp_path: Path, model_pt: Path, data) -> None:
    with pytest.raises(ConfigError, match="label_key"):
        evaluate(_predictor(tmp_path, model_pt, inference_datalist(data[0])))


def test_a_label_with_more_classes_than_the_network_predicts_names_the_case():
    from hpc_runner.inference.case_metrics import case_metrics

    pred = torch.zeros(1, 1, 4, 4, 4)
    label = torch.zeros(1, 1, 4, 4, 4)
    label[0, 0, 0, 0, 0] = 3  # e.g. one value per object, not a binary mask
    with pytest.raises(ValueError, match=r"case 'c007' has values 0\.\.3, but the network predicts 2 classes"):
        case_metrics(pred, label, 2, case="c007")


def test_a_stop_signal_ends_the_run_after_the_current_case_and_the_requeued_run_skips_it(
    tmp_path: Path, model_pt: Path, data
) -> None:
    """SIGUSR2 (SLURM's time-limit warning) stops inference at a case boundary, with every write done,
    as Preempted (so the job is requeued); the next run skips the finished case."""
    import os
    import signal

    from hpc_runner.engine.stop import Preempted, clear_stop, install_stop_handlers

    images, _ = data
    items = inference_datalist(images)
    restore = install_stop_handlers()
    try:
        os.kill(os.getpid(), signal.SIGUSR2)
        with pytest.raises(Preempted) as stopped:
            infer(_predictor(tmp_path, model_pt, items))
    finally:
        restore()
        clear_stop()
    assert stopped.value.checkpoint == str(tmp_path / "preds" / "manifest-000-of-001.jsonl")
    assert [p.name for p in (tmp_path / "preds").glob("*.nii.gz")] == ["case_000_seg.nii.gz"]
    summary = infer(_predictor(tmp_path, model_pt, items))
    assert (summary["written"], summary["skipped"]) == (3, 1)
