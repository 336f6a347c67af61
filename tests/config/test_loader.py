"""Config files load as MONAI loads them, and every problem names the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.config.loader import load_file
from hpc_runner.errors import ConfigError


def test_yaml_ids_keep_their_line_numbers(tmp_path: Path) -> None:
    f = tmp_path / "train.yaml"
    f.write_text("a: 1\nnet:\n  channels: [8, 16]\n  strides:\n    - 2\n    - 2\n")
    loaded = load_file(f)
    assert loaded.data == {"a": 1, "net": {"channels": [8, 16], "strides": [2, 2]}}
    assert loaded.lines["net::channels"] == 3
    assert loaded.lines["net::strides::1"] == 6
    assert loaded.where("net#channels") == f"{f}:3"


def test_json_ids_keep_their_line_numbers(tmp_path: Path) -> None:
    f = tmp_path / "train.json"
    f.write_text('{\n  "a": 1,\n  "net": {\n    "channels": [8, 16]\n  }\n}\n')
    assert load_file(f).lines["net::channels"] == 4


def test_yaml_file_values_follow_monai_s_yaml_1_1_loader(tmp_path: Path) -> None:
    # MONAI reads bundles with yaml.safe_load: `1e-4` stays a string there, so it must here too
    f = tmp_path / "c.yaml"
    f.write_text("lr: 1e-4\nflag: yes\n")
    assert load_file(f).data == {"lr": "1e-4", "flag": True}


def test_yaml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError) as err:
        load_file(f)
    assert f"{f}:3:" in str(err.value)
    assert "YAML syntax error" in str(err.value)


def test_json_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(ConfigError) as err:
        load_file(f)
    assert f"{f}:2:" in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_file(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(err.value) and "not found" in str(err.value)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level"):
        load_file(f)


def test_unknown_suffix_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("a = 1\n")
    with pytest.raises(ConfigError, match=r"\.json, \.yaml or \.yml"):
        load_file(f)
