"""References are checked before anything runs: missing ids, cycles, relative ids and macros."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.config.references import expand_macros, load_macro_file, refs_in_string, resolve_relative_ids
from hpc_runner.errors import ConfigError


def load(bundle: Path, tokens: list[str] = ()):
    return load_bundle_config(bundle=str(bundle), cli_overrides=parse_cli_overrides(tokens), environ={})


def test_reference_to_a_missing_id_names_the_referring_id_and_suggests(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(bundle, ["--optimizer::lr", "@lrr"])
    text = str(err.value)
    assert "'@lrr'" in text and "optimizer::lr" in text and "@lr" in text


def test_circular_reference_is_reported_as_a_chain(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(bundle, ["--lr", "@epochs", "--epochs", "$@lr + 1"])
    assert "circular reference" in str(err.value)
    assert "@lr" in str(err.value) and "@epochs" in str(err.value)


def test_a_component_referring_into_itself_is_fine_but_to_itself_is_a_cycle(bundle: Path) -> None:
    load(bundle, ["--+network_def::copy", "@network_def::channels"])
    with pytest.raises(ConfigError, match="circular"):
        load(bundle, ["--+network_def::me", "@network_def"])


def test_refs_are_found_only_in_expressions_or_whole_values() -> None:
    assert refs_in_string("@net") == ["net"]
    assert refs_in_string("$@net.parameters() + @a::b") == ["net", "a::b"]
    assert refs_in_string("user@host") == []


def test_relative_ids_match_monai() -> None:
    from monai.bundle import ConfigParser

    for id_path, value in [("B::key", "@::::A"), ("B::value3::2", "@::1"), ("B::v", "%::value1")]:
        assert resolve_relative_ids(id_path, value) == ConfigParser.resolve_relative_ids(id_path, value)


def test_macros_expand_like_monai(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from monai.bundle import ConfigParser

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"net": {"_target_": "UNet", "channels": [1, 2]}}))
    monkeypatch.chdir(tmp_path)
    config = {"a": 1, "b": {"x": "%a", "y": "@::x", "z": "%other.json::net"}, "c": ["%b::x", "@::0"]}
    parser = ConfigParser(config=json.loads(json.dumps(config)))
    parser.resolve_macro_and_relative_ids()
    ours = expand_macros(config, lambda p: json.loads(Path(p).read_text()))
    assert ours == parser.get()


def test_file_macros_take_any_value_and_any_id_in_it_as_monai_does(tmp_path: Path) -> None:
    from monai.bundle import ConfigParser

    (tmp_path / "jsons").mkdir()
    (tmp_path / "jsons" / "name.JSON").write_text('"Dataset"')
    (tmp_path / "parts.json").write_text('{"move_net": "$@net.to(@device)", "sizes": [8, 16]}')
    (tmp_path / "items.yaml").write_text("- a\n- [b, c]\n")
    config = {
        "dataset": {"_target_": f"%{tmp_path}/jsons/name.JSON"},
        "network": f"%{tmp_path}/parts.json#move_net",
        "channels": f"%{tmp_path}/parts.json::sizes",
        "whole": f"%{tmp_path}/items.yaml",
        "inner": f"%{tmp_path}/items.yaml#1#0",
    }
    ours = expand_macros(config, load_macro_file)
    parser = ConfigParser(config)
    parser.resolve_macro_and_relative_ids()
    assert ours == parser.get() == {
        "dataset": {"_target_": "Dataset"}, "network": "$@net.to(@device)", "channels": [8, 16],
        "whole": ["a", ["b", "c"]], "inner": "b",
    }
