"""Behaviour beyond MONAI's own tests, compared in this process (fast): MONAI's Python function against
hpc-runner's CLI entry ``main(argv)`` in the same working dir."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hpc_runner.cli import main
from tests.monai_commands.conftest import DATA, assert_same_torchscript, save_random_checkpoint


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with MONAI's test configs under data/ (and fixture_workflows importable)."""
    shutil.copytree(DATA, tmp_path / "data", ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(DATA))
    return tmp_path


@pytest.mark.slow  # two traces and two forward passes at the metadata's 160^3
def test_tracing_without_input_shape_takes_the_shape_from_metadata(here: Path, capsys) -> None:
    from monai.bundle import ckpt_export

    save_random_checkpoint(here / "model.pt")
    ckpt_export("network_def", filepath="monai", ckpt_file="model.pt", meta_file="data/metadata.json",
                config_file="data/inference.json", use_trace=True)
    assert main(["ckpt_export", "network_def", "--filepath", "ours", "--ckpt_file", "model.pt", "--meta_file",
                 "data/metadata.json", "--config_file", "data/inference.json", "--use_trace"]) == 0
    assert "exported to file: ours." in capsys.readouterr().out
    # a name without suffix gets .ts; traced at the metadata's 160^3, it runs at that shape
    assert_same_torchscript(here / "monai.ts", here / "ours.ts", ["inference.json"], shape=(1, 1, 160, 160, 160))


def test_a_run_dir_stands_for_its_model_pt(here: Path) -> None:
    from monai.bundle import ckpt_export

    run_dir = here / "runs" / "seg" / "2026-11-25_10-00-00"
    save_random_checkpoint(run_dir / "model.pt")
    assert main(["ckpt_export", "network_def", "--filepath", "ours.ts", "--config_file", "data/inference.json",
                 "--ckpt_file", "runs/seg/2026-11-25_10-00-00"]) == 0
    ckpt_export("network_def", filepath="monai.ts", ckpt_file=str(run_dir / "model.pt"),
                config_file="data/inference.json")
    assert_same_torchscript(here / "monai.ts", here / "ours.ts", ["inference.json"])


def test_a_run_dir_without_model_pt_exports_its_newest_checkpoint(here: Path) -> None:
    import torch
    from monai.bundle import ConfigParser

    parser = ConfigParser()
    parser.read_config("data/inference.json")
    net = parser.get_parsed_content("network_def")
    ckpts = here / "run" / "checkpoints"
    ckpts.mkdir(parents=True)
    torch.save({"format": 1, "step": 4, "network": net.state_dict()}, ckpts / "ckpt_00000004.pt")
    torch.save({"format": 1, "step": 2, "network": {}}, ckpts / "ckpt_00000002.pt")
    assert main(["ckpt_export", "--filepath", "ours.ts", "--config_file", "data/inference.json",
                 "--ckpt_file", "run"]) == 0
    torch.save(net.state_dict(), here / "ref.pt")
    assert main(["ckpt_export", "--filepath", "ref.ts", "--config_file", "data/inference.json",
                 "--ckpt_file", "ref.pt"]) == 0
    assert_same_torchscript(here / "ref.ts", here / "ours.ts", ["inference.json"])


def test_run_workflow_reports_missing_properties_and_runs_anyway(here: Path, capsys) -> None:
    """MONAI never checks properties in run_workflow; with --workflow_type hpc-runner reports what lacks."""
    from monai.bundle import run_workflow

    (here / "tiny.json").write_text(json.dumps({"trainer": {"_target_": "fixture_workflows.Runnable42", "val": 42},
                                                "training": "$@trainer.run()"}))
    run_workflow(run_id="training", config_file="tiny.json", meta_file="data/metadata.json", workflow_type="train")
    assert "runnable 42 ran" in capsys.readouterr().out
    with pytest.warns(UserWarning, match="lacks properties") as warned:
        assert main(["run_workflow", "--run_id", "training", "--config_file", "tiny.json", "--meta_file",
                     "data/metadata.json", "--workflow_type", "train"]) == 0
    assert "runnable 42 ran" in capsys.readouterr().out
    text = next(str(w.message) for w in warned if "lacks properties" in str(w.message))
    for prop in ("bundle_root (required; config id 'bundle_root')", "device", "dataset_dir", "trainer",
                 "max_epochs"):
        assert prop in text


def test_a_pythonic_workflow_lacking_a_required_property_is_reported(here: Path, capsys) -> None:
    import nibabel as nib
    import numpy as np
    from monai.bundle import run_workflow

    nib.save(nib.Nifti1Image(np.zeros((16, 16, 16), "float32"), np.eye(4)), str(here / "image.nii"))
    argv = {"workflow_name": "fixture_workflows.PythonicWithoutInferer", "workflow_type": "infer",
            "properties_path": "data/python_workflow_properties.json", "meta_file": "data/metadata.json",
            "filename": "image.nii"}
    run_workflow(**argv, output_dir="monai")  # MONAI does not check
    with pytest.warns(UserWarning, match="lacks properties.*inferer"):
        assert main(["run_workflow", *[f"--{k}={v}" for k, v in argv.items()], "--output_dir", "ours"]) == 0
    assert (here / "ours" / "image" / "image_seg.nii.gz").is_file()
    assert (here / "monai" / "image" / "image_seg.nii.gz").is_file()


def test_trust_leaves_out_monais_code_in_config_warning(here: Path, recwarn) -> None:
    (here / "tiny.json").write_text(json.dumps({"run": "$print('hello')"}))
    assert main(["run_workflow", "--config_file", "tiny.json", "--meta_file", "data/metadata.json"]) == 0
    assert any("parsing config_file" in str(w.message) for w in recwarn.list)
    recwarn.clear()
    assert main(["run_workflow", "--config_file", "tiny.json", "--meta_file", "data/metadata.json", "--trust"]) == 0
    assert not any("parsing config_file" in str(w.message) for w in recwarn.list)
