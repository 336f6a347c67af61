"""Several config files merge in order exactly as MONAI's ConfigParser.load_config_files merges them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.config.loader import load_file
from hpc_runner.config.merge import merge_files
from hpc_runner.errors import ConfigError


@pytest.fixture
def three_files(tmp_path: Path) -> list[Path]:
    a = tmp_path / "train.json"
    a.write_text(json.dumps({
        "net": {"_target_": "UNet", "channels": [8, 16]},
        "handlers": [{"_target_": "A"}],
        "opts": {"lr": 0.1, "wd": 0},
        "device": "cpu",
    }))
    b = tmp_path / "multi_gpu.yaml"
    b.write_text(
        "device: cuda\n"
        "net#channels: [16, 32]\n"
        "+handlers:\n  - _target_: B\n"
        "+opts:\n  momentum: 0.9\n"
        "new_key: 1\n"
    )
    c = tmp_path / "c.json"
    c.write_text(json.dumps({"net::strides": [2, 2]}))
    return [a, b, c]


def test_merge_matches_monai(three_files: list[Path]) -> None:
    from monai.bundle import ConfigParser

    ours, _ = merge_files([load_file(p) for p in three_files])
    theirs = ConfigParser.load_config_files([str(p) for p in three_files])
    assert ours == theirs


def test_merged_ids_remember_which_file_set_them(three_files: list[Path]) -> None:
    _, where = merge_files([load_file(p) for p in three_files])
    assert where["device"] == f"{three_files[1]}:1"
    assert where["net::channels"] == f"{three_files[1]}:2"
    assert where["net::_target_"].startswith(str(three_files[0]))


def test_plus_merge_of_mismatched_types_names_file_and_id(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("h: [1]\n")
    b = tmp_path / "b.yaml"
    b.write_text("+h: {x: 1}\n")
    with pytest.raises(ConfigError) as err:
        merge_files([load_file(a), load_file(b)])
    assert "b.yaml:1" in str(err.value) and "'h'" in str(err.value)
