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


def test_missing_required_metadata_field_names_file_and_field(bundle: Path) -> None:
    meta_path = bundle / "configs" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    del meta["network_data_format"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(BundleError) as err:
        load_bundle_config(bundle=str(bundle), environ={})
    text = str(err.value)
    assert str(meta_path) in text and "network_data_format" in text and "missing" in text


def test_bundle_without_train_config_is_refused(tmp_path: Path) -> None:
    (tmp_path / "b" / "configs").mkdir(parents=True)
    with pytest.raises(BundleError, match=r"configs/train\.yaml"):
        load_bundle_config(bundle=str(tmp_path / "b"), environ={})


def test_no_bundle_and_no_file_is_an_error() -> None:
    with pytest.raises(ConfigError, match="--bundle DIR or --config_file"):
        load_bundle_config(environ={})
