"""Which values the pre-flight checks as input paths: only those the run reads as paths (a false positive is worse
than a miss)."""

from __future__ import annotations

import json
from pathlib import Path

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.input_paths import input_paths, looks_like_path
from hpc_runner.config.preflight import config_problems

META = {"name": "paths", "version": "0.1.0"}


def bundle(root: Path, config: dict) -> Path:
    """A bundle whose train.json is ``config``."""
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.json").write_text(json.dumps(config))
    (root / "configs" / "metadata.json").write_text(json.dumps(META))
    return root


def problems(root: Path, entry: str | None = "run") -> list[tuple[str | None, str]]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the free-form metadata warning
        cfg = load_bundle_config(root, environ={})
    return [(p.id_path, p.message) for p in config_problems(cfg, cwd=root, entry=entry) if "input" in p.message]


def test_a_key_named_images_inside_a_plain_mapping_is_no_path(tmp_path: Path) -> None:
    """The issue's case: NPZDictItemDataset(keys={"images": "image", "segs": "label"}) is not refused."""
    root = bundle(tmp_path / "b", {
        "bundle_root": ".",
        "npz": {"_target_": "NPZDictItemDataset", "npzfile": "$@bundle_root + '/data.npz'",
                "keys": {"images": "image", "segs": "label"}},
        "run": ["$print(@npz)"],
    })
    assert problems(root) == []


def test_a_path_named_argument_of_a_component_is_checked(tmp_path: Path) -> None:
    root = bundle(tmp_path / "b", {
        "loader": {"_target_": "CheckpointLoader", "load_path": str(tmp_path / "gone.pt"), "load_dict": {}},
        "run": ["$print(@loader)"],
    })
    assert problems(root) == [("loader::load_path", f"the input '{tmp_path / 'gone.pt'}' does not exist")]


def test_a_dir_id_handed_to_glob_is_an_input_and_one_only_written_to_is_not(tmp_path: Path) -> None:
    root = bundle(tmp_path / "b", {
        "image_dir": str(tmp_path / "no-images"),
        "cache_dir": str(tmp_path / "made-by-the-dataset"),
        "files": "$sorted(glob.glob(@image_dir + '/*.nii.gz'))",
        "dataset": {"_target_": "PersistentDataset", "data": "@files", "transform": None, "cache_dir": "@cache_dir"},
        "run": ["$print(len(@dataset))"],
    })
    assert problems(root) == [("image_dir", f"the input '{tmp_path / 'no-images'}' does not exist")]


def test_files_in_a_datasets_literal_data_are_checked_through_references_into_the_metadata(tmp_path: Path) -> None:
    (tmp_path / "a.nii.gz").write_bytes(b"x")
    root = bundle(tmp_path / "b", {
        "dataset": {"_target_": "Dataset", "data": "@_meta_#datalist", "transform": None},
        "run": ["$print(@dataset)"],
    })
    meta = {**META, "datalist": [{"image": str(tmp_path / "a.nii.gz"), "label": str(tmp_path / "b.nii.gz"),
                                  "spacing": "1.5"}]}
    (root / "configs" / "metadata.json").write_text(json.dumps(meta))
    assert problems(root) == [("_meta_::datalist::0::label", f"the input '{tmp_path / 'b.nii.gz'}' does not exist")]


def test_bare_words_are_no_paths_unless_the_name_says_folder(tmp_path: Path) -> None:
    assert not looks_like_path("image") and looks_like_path("data/x") and looks_like_path("model.pt")
    root = bundle(tmp_path / "b", {"dataset_dir": "data", "ckpt": "latest", "run": ["$print(@dataset_dir, @ckpt)"]})
    assert problems(root) == [("dataset_dir", "the input folder 'data' does not exist")]


def test_paths_only_the_other_entry_reads_are_not_checked(tmp_path: Path) -> None:
    root = bundle(tmp_path / "b", {
        "dataset_dir": str(tmp_path / "train-data"),
        "images": str(tmp_path / "test-images"),
        "training": ["$print(@dataset_dir)"],
        "inferring": ["$print(@images)"],
    })
    assert [p for p, _ in problems(root, "training")] == ["dataset_dir"]
    assert [p for p, _ in problems(root, "inferring")] == ["images"]


def test_a_disabled_component_s_paths_are_not_read(tmp_path: Path) -> None:
    root = bundle(tmp_path / "b", {
        "loader": {"_target_": "CheckpointLoader", "_disabled_": "$not @finetune", "load_path": "/no/model.pt",
                   "load_dict": {}},
        "finetune": False,
        "run": ["$print(@loader)"],
    })
    assert problems(root) == []
    assert [p.id_path for p in input_paths({"x": {"_target_": "X", "load_path": "/a.pt"}})] == ["x::load_path"]


def test_a_broken_component_the_entry_never_uses_is_not_refused(tmp_path: Path) -> None:
    """mednist_reg's `display` entry: MONAI runs it although another id names a target MONAI 1.6 renamed."""
    root = bundle(tmp_path / "b", {
        "imports": ["$import os"],
        "first": "$os.getcwd()",
        "loss_metric": {"_target_": "IgniteMetric", "metric_fn": None},
        # `display` resolves trainer#loss_function only, never the trainer whose handlers use loss_metric
        "trainer": {"_target_": "SupervisedTrainer", "loss_function": {"_target_": "torch.nn.MSELoss"},
                    "key_train_metric": "@loss_metric"},
        "display": ["$print(@first, @trainer#loss_function)"],
        "run": ["$print(@trainer)"],
    })
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_bundle_config(root, environ={})
    assert config_problems(cfg, cwd=root, entry="display") == []
    [problem] = config_problems(cfg, cwd=root, entry="run")
    assert problem.id_path == "loss_metric::_target_" and "'IgniteMetric' cannot be imported" in problem.message
