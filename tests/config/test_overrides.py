"""Overrides: files < args_file < HPCR__ env < CLI, by id, with typing and clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.errors import ConfigError


def load(bundle: Path, tokens: list[str] = (), env: dict | None = None, **kw):
    return load_bundle_config(bundle=str(bundle), cli_overrides=parse_cli_overrides(tokens), environ=env or {}, **kw)


def test_both_cli_forms_set_nested_ids(bundle: Path) -> None:
    cfg = load(bundle, ["--network_def::channels", "[16,32]", "--lr=1e-3", "--network_def#strides", "[4]"])
    assert cfg.config["network_def"]["channels"] == [16, 32]
    assert cfg.config["lr"] == 1e-3
    assert cfg.config["network_def"]["strides"] == [4]


def test_negative_numbers_and_hyphenated_keys(bundle: Path) -> None:
    cfg = load(bundle, ["--batch-size", "-1"])
    assert cfg.config["batch-size"] == -1


def test_env_override_beats_config_file_and_loses_to_cli(bundle: Path, tmp_path: Path) -> None:
    args = tmp_path / "args.yaml"
    args.write_text("lr: 0.5\nepochs: 7\nuse_amp: true\n")
    env = {"HPCR__lr": "0.25", "HPCR__epochs": "9"}
    cfg = load(bundle, ["--lr", "0.125"], env, args_file=args)
    assert cfg.config["lr"] == 0.125  # cli
    assert cfg.config["epochs"] == 9  # env beats args_file
    assert cfg.config["use_amp"] is True  # args_file beats the config file
    sources = {o.id: o.source for o in cfg.overrides}
    assert [o.source for o in cfg.overrides if o.id == "lr"] == ["args_file", "env", "cli"]
    assert sources["use_amp"] == "args_file"


def test_env_var_names_nested_ids_with_double_underscores(bundle: Path) -> None:
    cfg = load(bundle, env={"HPCR__network_def__channels": "[8,16,32]"})
    assert cfg.config["network_def"]["channels"] == [8, 16, 32]
    (ov,) = cfg.overrides
    assert ov.origin == "HPCR__network_def__channels"
    assert ov.replaced.endswith("train.yaml:9")


def test_unknown_id_is_an_error_with_suggestions(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(bundle, ["--optimzer::lr", "1"])
    text = str(err.value)
    assert "optimzer::lr" in text and "optimizer::lr" in text
    assert "--+optimzer::lr" in text


def test_unknown_env_id_is_an_error_too(bundle: Path) -> None:
    with pytest.raises(ConfigError, match="HPCR__nope"):
        load(bundle, env={"HPCR__nope": "1"})


def test_plus_prefix_adds_a_new_id_and_merges_an_existing_dict(bundle: Path) -> None:
    cfg = load(bundle, ["--+extra::deep", "3", "--+network_def", "{norm: batch}"])
    assert cfg.config["extra"] == {"deep": 3}
    assert cfg.config["network_def"]["norm"] == "batch"
    assert cfg.config["network_def"]["channels"] == [8, 16]


def test_a_number_cannot_become_plain_text(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(bundle, ["--lr", "fast"])
    assert "a number" in str(err.value) and "train.yaml:2" in str(err.value)


def test_expressions_and_references_pass_through_to_the_resolver(bundle: Path) -> None:
    cfg = load(bundle, ["--lr", "$1e-3 * 2", "--epochs", "@lr"])
    assert cfg.config["lr"] == "$1e-3 * 2"
    assert cfg.config["epochs"] == "@lr"


def test_quoted_value_stays_a_string(bundle: Path) -> None:
    cfg = load(bundle, ["--dataset_dir", "'42'"])
    assert cfg.config["dataset_dir"] == "42"


def test_override_without_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match="has no value"):
        parse_cli_overrides(["--lr"])


def test_args_file_errors_name_the_file_and_line(bundle: Path, tmp_path: Path) -> None:
    args = tmp_path / "args.yaml"
    args.write_text("lr: 0.1\nnot_an_id: 3\n")
    with pytest.raises(ConfigError) as err:
        load(bundle, args_file=args)
    assert f"{args}:2" in str(err.value)
