"""${env:NAME} and ${env:NAME,default} are expanded without eval, in files and in overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.errors import ConfigError


def load(bundle: Path, tokens: list[str] = (), env: dict | None = None):
    return load_bundle_config(bundle=str(bundle), cli_overrides=parse_cli_overrides(tokens), environ=env or {})


def test_a_whole_env_reference_is_typed(bundle: Path) -> None:
    cfg = load(bundle, ["--epochs", "${env:PARAM}"], {"PARAM": "100"})
    assert cfg.config["epochs"] == 100
    (use,) = cfg.env_uses
    assert (use.variable, use.value, use.id_path) == ("PARAM", "100", "epochs")


def test_an_embedded_reference_is_text(bundle: Path) -> None:
    cfg = load(bundle, ["--dataset_dir", "/scratch/${env:USER_X}/data"], {"USER_X": "ada"})
    assert cfg.config["dataset_dir"] == "/scratch/ada/data"


def test_default_is_used_when_unset(bundle: Path) -> None:
    cfg = load(bundle, ["--dataset_dir", "${env:DATASETDIR,/tmp/d}"])
    assert cfg.config["dataset_dir"] == "/tmp/d"
    assert cfg.env_uses[0].value is None


def test_references_in_config_files_are_expanded(bundle: Path) -> None:
    train = bundle / "configs" / "train.yaml"
    train.write_text(train.read_text().replace("dataset_dir: /data/x", "dataset_dir: ${env:DATASETDIR}"))
    cfg = load(bundle, env={"DATASETDIR": "/fast/data"})
    assert cfg.config["dataset_dir"] == "/fast/data"


def test_unset_variable_names_variable_id_and_file(bundle: Path) -> None:
    train = bundle / "configs" / "train.yaml"
    train.write_text(train.read_text().replace("dataset_dir: /data/x", "dataset_dir: ${env:DATASETDIR}"))
    with pytest.raises(ConfigError) as err:
        load(bundle)
    text = str(err.value)
    assert "DATASETDIR" in text and "'dataset_dir'" in text and "train.yaml:1" in text
    assert "--export=ALL,DATASETDIR=" in text


def test_expansion_does_not_evaluate_code(bundle: Path) -> None:
    cfg = load(bundle, ["--dataset_dir", "${env:X}"], {"X": "$__import__('os').getcwd()"})
    assert cfg.config["dataset_dir"] == "$__import__('os').getcwd()"  # handed on as written, not run here
