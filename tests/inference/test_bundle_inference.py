"""The example bundle's inference.yaml/evaluate.yaml: with hpc-runner, with MONAI's runner, refused early."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from warm_python import WARM

from tests.inference.conftest import make_volumes

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "bundles" / "synthetic_seg"
CONFIGS = BUNDLE / "configs"


def _cfg(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def test_the_three_configs_define_the_same_network() -> None:
    train = _cfg("train.yaml")["network_def"]
    assert _cfg("inference.yaml")["network_def"] == train
    assert _cfg("evaluate.yaml")["network_def"] == train


def test_entries_are_declarative_calls_without_dollar() -> None:
    for name, entry, target in (("inference.yaml", "inference", "infer"), ("evaluate.yaml", "evaluate", "evaluate")):
        cfg = _cfg(name)
        assert cfg[entry] == cfg["run"][0] == {"_target_": f"hpc_runner.inference.predictor.{target}",
                                                "predictor": "@predictor"}


@pytest.fixture
def inputs(tmp_path: Path, model_pt: Path) -> dict[str, Path]:
    images, labels = make_volumes(tmp_path / "data", 2, size=32)
    return {"images": images, "labels": labels, "ckpt": model_pt.parent, "dataset": tmp_path / "data"}


@pytest.mark.slow
def test_a_missing_ckpt_or_images_is_refused_before_anything_runs(cli, tmp_path: Path, inputs) -> None:
    base = ["run", "inference", "--config_file", str(CONFIGS / "inference.yaml"), "--output_dir", "out",
            "--dataset_dir", str(inputs["dataset"])]
    res = cli(*base, "--ckpt", "no/such/run", "--images", str(inputs["images"]), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "ckpt" in res.stderr and "no/such/run" in res.stderr and "does not exist" in res.stderr
    res = cli(*base, "--ckpt", str(inputs["ckpt"]), "--images", "no/such/folder", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "images" in res.stderr and "no/such/folder" in res.stderr
    assert not (tmp_path / "out").exists()


def _outputs(folder: Path) -> dict[str, np.ndarray]:
    from hpc_runner.inference.nifti import read_nifti

    return {p.name: read_nifti(p)[0] for p in sorted(folder.glob("*.nii.gz"))}


@pytest.mark.slow
def test_hpc_runner_and_monai_runner_give_voxel_equal_predictions(cli, tmp_path: Path, inputs) -> None:
    # --dataset_dir: the pre-flight checks it even when --images replaces its use (see docs/inference.md)
    args = ["--ckpt", str(inputs["ckpt"]), "--images", str(inputs["images"]), "--dataset_dir", str(inputs["dataset"])]
    res = cli("run", "inference", "--config_file", str(CONFIGS / "inference.yaml"), "--output_dir",
              str(tmp_path / "ours"), *args, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "inference of 2 case(s)" in res.stdout
    monai = WARM.run("monai.bundle", ["run", "inference", "--config_file", "configs/inference.yaml",
                                      "--meta_file", "configs/metadata.json", "--output_dir", str(tmp_path / "monai"),
                                      *args], cwd=BUNDLE, env=cli.env, timeout=300)
    assert monai.returncode == 0, monai.stdout + monai.stderr
    ours, theirs = _outputs(tmp_path / "ours" / "predictions"), _outputs(tmp_path / "monai" / "predictions")
    assert sorted(ours) == ["case_000_seg.nii.gz", "case_001_seg.nii.gz"] and sorted(theirs) == sorted(ours)
    for name in ours:
        np.testing.assert_array_equal(ours[name], theirs[name])
    summary = json.loads((tmp_path / "ours" / "summary.json").read_text())
    assert summary["written"] == 2 and summary["weights"] == str(inputs["ckpt"] / "model.pt")


@pytest.mark.slow
def test_evaluate_yaml_writes_per_case_metrics_and_a_summary_and_monai_runs_it_the_same(
    cli, tmp_path: Path, inputs
) -> None:
    """`run evaluate --bundle B` picks configs/evaluate.yaml; the default dataset it no longer uses is not
    checked (no --dataset_dir); MONAI's runner writes the same per-case table."""
    args = ["--ckpt", str(inputs["ckpt"]), "--images", str(inputs["images"]), "--labels", str(inputs["labels"])]
    res = cli("run", "evaluate", "--bundle", str(BUNDLE), "--output_dir", str(tmp_path / "ev"), *args, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert summary["count"] == 2 and set(summary["metrics"]) == {"dice", "hd95"}
    lines = (tmp_path / "ev" / "cases.csv").read_text().splitlines()
    assert lines[0].startswith("case,file,size,sha256,dice,hd95") and len(lines) == 3
    monai = WARM.run("monai.bundle", ["run", "evaluate", "--config_file", "configs/evaluate.yaml",
                                      "--meta_file", "configs/metadata.json", "--output_dir", str(tmp_path / "monai"),
                                      *args], cwd=BUNDLE, env=cli.env, timeout=300)
    assert monai.returncode == 0, monai.stdout + monai.stderr
    assert (tmp_path / "monai" / "cases.csv").read_text().splitlines() == lines
