"""Finding a bundle's files and validating its metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.errors import BundleError, ConfigError


def test_bundle_dir_picks_train_config_and_metadata(bundle: Path) -> None:
    cfg = load_bundle_config(bundle=str(bundle), environ={})
    assert cfg.config_files == [bundle / "configs" / "train.yaml"]
    assert cfg.meta["name"] == "tiny" and cfg.config["_meta_"]["version"] == "0.1.0"
    assert cfg.name == "tiny"


def test_an_entry_with_its_own_config_file_loads_that_file(bundle: Path) -> None:
    """`run inference --bundle B` loads configs/inference.json (the zoo's layout); other entries train.yaml."""
    (bundle / "configs" / "inference.json").write_text(json.dumps({"lr": 0.5, "inference": ["$print(1)"]}))
    cfg = load_bundle_config(bundle, entry="inference", environ={})
    assert [f.name for f in cfg.config_files] == ["inference.json"] and cfg.config["lr"] == 0.5
    assert [f.name for f in load_bundle_config(bundle, entry="training", environ={}).config_files] == ["train.yaml"]
    explicit = load_bundle_config(bundle, ["configs/train.yaml"], entry="inference", environ={}, check=False)
    assert [f.name for f in explicit.config_files] == ["train.yaml"]  # --config_file wins over the entry


def test_several_config_files_merge_in_order(bundle: Path) -> None:
    extra = bundle / "configs" / "fast.json"
    extra.write_text(json.dumps({"epochs": 1, "network_def#channels": [4, 8]}))
    cfg = load_bundle_config(bundle=str(bundle), config_files="configs/train.yaml,configs/fast.json", environ={})
    assert cfg.config["epochs"] == 1 and cfg.config["network_def"]["channels"] == [4, 8]
    assert cfg.locate("epochs") == f"{extra}:1"


def test_missing_required_metadata_field_is_one_warning_naming_file_and_field_and_the_config_loads(
    bundle: Path,
) -> None:
    meta_path = bundle / "configs" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["network_data_format"], meta["task"]
    meta_path.write_text(json.dumps(meta))
    with pytest.warns(UserWarning) as caught:
        cfg = load_bundle_config(bundle=str(bundle), environ={})
    notes = [str(w.message) for w in caught if "metadata" in str(w.message)]
    assert len(notes) == 1 and "\n" not in notes[0], notes  # one line, never a refusal (MONAI never validates)
    assert str(meta_path) in notes[0] and "is missing" in notes[0] and "1 more" in notes[0]
    assert cfg.meta["name"] == "tiny"


def test_free_form_metadata_as_monai_tests_write_it_loads_with_one_warning(bundle: Path) -> None:
    (bundle / "configs" / "metadata.json").write_text(json.dumps({"datalist": [{"image": "a.nii"}], "window": [9]}))
    with pytest.warns(UserWarning, match="hpc-runner verify") as caught:
        cfg = load_bundle_config(bundle=str(bundle), environ={})
    assert len([w for w in caught if "metadata" in str(w.message)]) == 1
    assert cfg.meta["datalist"] == [{"image": "a.nii"}]


def test_verify_still_refuses_what_run_only_warns_about(bundle: Path) -> None:
    from hpc_runner.config.verify import verify_bundle

    meta_path = bundle / "configs" / "metadata.json"
    meta_path.write_text(json.dumps({"version": "0.1.0"}))
    problems = verify_bundle(bundle, imports=False).problems
    assert any("required field 'task' is missing" in p.message for p in problems), problems


def test_bundle_without_train_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b" / "configs").mkdir(parents=True)
    with pytest.raises(BundleError, match=r"configs/train\.yaml"):
        load_bundle_config(bundle=str(tmp_path / "b"), environ={})


def test_no_bundle_and_no_file_is_an_error() -> None:
    with pytest.raises(ConfigError, match="--bundle DIR or --config_file"):
        load_bundle_config(environ={})
