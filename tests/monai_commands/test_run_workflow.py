"""run_workflow: the run_workflow scenarios of MONAI's test_integration_bundle_run and test_bundle_workflow
through both runners (a ConfigWorkflow, a bundle's scripts/ package, a Python workflow class, a
PythonicWorkflow with --workflow_type), and hpc-runner's property check before the run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.monai_commands.conftest import Workspace

pytestmark = pytest.mark.slow
SHAPE = (64, 64, 64)
TINY_META = {"version": "0.1.0", "monai_version": "1.1.0", "pytorch_version": "2.3.0", "numpy_version": "1.22.2"}


def _image(path: Path) -> None:
    import nibabel as nib
    import numpy as np

    nib.save(nib.Nifti1Image(np.random.default_rng(0).random(SHAPE).astype("float32"), np.eye(4)), str(path))


def _segmentation(path: Path):
    from monai.transforms import LoadImage

    return LoadImage(image_only=True)(str(path))


def assert_both_run(both, *printed: str) -> None:
    """Both exit 0 and print ``printed``; hpc-runner reports no missing property."""
    assert both.monai.code == 0 and both.hpcr.code == 0, both.explain()
    for text in printed:
        assert text in both.monai.stdout and text in both.hpcr.stdout, both.explain()
    assert "lacks properties" not in both.hpcr.stderr, both.explain()


def test_tiny_config_runs_the_run_id(workspace: Workspace) -> None:
    (workspace.path / "tiny_config.json").write_text(json.dumps(
        {"trainer": {"_target_": "fixture_workflows.Runnable42", "val": 42}, "training": "$@trainer.run()"}))
    (workspace.path / "tiny_meta.json").write_text(json.dumps(TINY_META))
    both = workspace.run_both("run_workflow", "--run_id", "training", "--config_file", "tiny_config.json",
                              "--meta_file", "tiny_meta.json")
    assert_both_run(both, "runnable 42 ran")


def test_the_bundles_scripts_package_imports(workspace: Workspace) -> None:
    (workspace.path / "tiny_config.json").write_text(json.dumps({
        "imports": ["$import scripts"],
        "trainer": {"_target_": "fixture_workflows.CallOnRun", "func": "$scripts.tiny_test"},
        "training": "$@trainer.run()",
    }))
    (workspace.path / "tiny_meta.json").write_text(json.dumps(TINY_META))
    scripts = workspace.path / "scripts"
    scripts.mkdir()
    (scripts / "test_scripts_fold.py").write_text("def tiny_test():\n    print('successfully added scripts fold!')\n")
    (scripts / "__init__.py").write_text("from .test_scripts_fold import tiny_test\n")
    both = workspace.run_both("run_workflow", "--run_id", "training", "--config_file", "tiny_config.json",
                              "--meta_file", "tiny_meta.json")
    assert_both_run(both, "successfully added scripts fold!")


def test_a_customized_workflow_class_by_dotted_path(workspace: Workspace) -> None:
    _image(workspace.path / "image.nii")
    both = workspace.run_both("run_workflow", "--workflow_name", "fixture_workflows.SegmentOneImage",
                              "--filename", "image.nii", "--output_dir", "out")
    assert_both_run(both)
    seg = [_segmentation(side.cwd / "out" / "image" / "image_seg.nii.gz") for side in (both.monai, both.hpcr)]
    assert tuple(seg[0].shape[-3:]) == SHAPE and (seg[0] == seg[1]).all()


def test_an_inference_config_workflow_with_its_properties_checked(workspace: Workspace) -> None:
    """MONAI's test_inference_config through the CLI: --workflow_type infer, config overrides, a logging file."""
    _image(workspace.path / "image.nii")
    both = workspace.run_both(
        "run_workflow", "--workflow_type", "infer", "--config_file", "data/inference.json", "--meta_file",
        "data/metadata.json", "--logging_file", "data/logging.conf", "--network", "$@network_def.to(@device)",
        "--dataset#_target_", "Dataset", "--dataset#data", "[{'image': 'image.nii'}]", "--dataloader#num_workers",
        "0", "--postprocessing#transforms#2#output_postfix", "seg", "--output_dir", "out",
    )
    assert_both_run(both, "json_test", "test_in_line_json", "prediction shape:")
    seg = [_segmentation(side.cwd / "out" / "image" / "image_seg.nii.gz") for side in (both.monai, both.hpcr)]
    assert tuple(seg[1].shape[-3:]) == SHAPE
    assert seg[0].shape == seg[1].shape  # MONAI's test checks the shape (its network_def is random: no content)


def test_a_pythonic_workflow_with_its_property_file(workspace: Workspace) -> None:
    _image(workspace.path / "image.nii")
    both = workspace.run_both(
        "run_workflow", "--workflow_name", "fixture_workflows.PythonicSegment", "--workflow_type", "infer",
        "--properties_path", "data/python_workflow_properties.json", "--meta_file", "data/metadata.json",
        "--filename", "image.nii", "--output_dir", "out",
    )
    assert_both_run(both)
    seg = [_segmentation(side.cwd / "out" / "image" / "image_seg.nii.gz") for side in (both.monai, both.hpcr)]
    assert (seg[0] == seg[1]).all()
