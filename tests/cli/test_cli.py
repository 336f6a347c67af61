"""The command line: light help, config printing with sources, override splitting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hpc_runner.cli import COMMAND_GROUPS, COMMANDS, build_parser, main
from hpc_runner.config.argv import split_overrides

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"


def _imported_modules(*args: str) -> set[str]:
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "hpc_runner", *args],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return {line.split("|")[-1].strip() for line in res.stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_never_imports_torch_or_monai(command: str | None) -> None:
    modules = _imported_modules(*([command] if command else []), "--help")
    heavy = {m for m in modules if m.split(".")[0] in ("torch", "monai", "numpy", "submitit", "jsonschema")}
    assert not heavy, f"--help imported {sorted(heavy)[:5]}"


def test_help_lists_every_command_once_grouped_by_task_and_each_option_under_one_spelling(capsys) -> None:
    grouped = [name for names in COMMAND_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(COMMANDS)  # a new command must be given a group
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert all(f"  {title}:" in text for title in COMMAND_GROUPS)
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    assert "--dry-run" in text and "--dry_run" not in text and "--config_file" in text and "--config-file" not in text


def test_overrides_are_split_from_known_options() -> None:
    _, subparsers = build_parser()
    known, overrides = split_overrides(
        subparsers["run"],
        ["training", "--bundle", "b", "--lr", "-1", "--net::ch=[8,16]", "--bundle_root", "/x", "--debug",
         "--", "--after", "1"],
    )
    assert known == ["training", "--bundle", "b", "--debug"]
    assert overrides == ["--lr", "-1", "--net::ch=[8,16]", "--bundle_root", "/x", "--after", "1"]


def test_config_prints_the_merged_config_after_overrides(tmp_path: Path, cli) -> None:
    res = cli("config", "--bundle", str(EXAMPLE), "--network_def::channels", "[4,8,16,32]", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    config = yaml.safe_load(res.stdout)
    assert config["network_def"]["channels"] == [4, 8, 16, 32]
    assert config["_meta_"]["name"] == "synthetic_seg"


def test_config_sources_show_cli_env_and_the_replaced_line(tmp_path: Path, cli) -> None:
    res = cli("config", "--bundle", str(EXAMPLE), "--sources", "--learning_rate", "1e-3",
              "--dataset_dir", "${env:DATASETDIR}", cwd=tmp_path,
              env={"HPCR__network_def__channels": "[8,16]", "DATASETDIR": "/scratch/d"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    lr = next(line for line in lines if line.startswith("learning_rate"))
    assert "0.001" in lr and "cli" in lr and "train.yaml:" in lr
    ch = next(line for line in lines if line.startswith("network_def::channels"))
    assert "[8, 16]" in ch and "env" in ch and "HPCR__network_def__channels" in ch
    ds = [line for line in lines if line.startswith("dataset_dir")]
    assert any("/scratch/d" in line and "${env:DATASETDIR}" in line for line in ds)


def test_config_resolve_evaluates_references_but_builds_nothing(tmp_path: Path, cli) -> None:
    res = cli("config", "--bundle", str(EXAMPLE), "--resolve", "--format", "json", "--id", "trainer",
              "--max_epochs", "3", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    trainer = yaml.safe_load(res.stdout)
    assert trainer["max_epochs"] == 3
    assert trainer["network"]["_target_"] == "UNet"  # the referenced component, as data
    assert not (tmp_path / "data").exists()  # nothing was generated or run


def test_version_and_usage(tmp_path: Path, cli) -> None:
    res = cli("--version", cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.startswith("hpc-runner ")
    res = cli("frobnicate", cwd=tmp_path)
    assert res.returncode == 2
