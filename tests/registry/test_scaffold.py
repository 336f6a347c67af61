"""init: a new bundle from the template that passes verify at once and runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from registry_helpers import TINY, out

from hpc_runner.config.verify import verify_bundle


def test_init_writes_a_bundle_that_verifies(cli, tmp_path: Path) -> None:
    proc = cli("init", "spleen_seg", "--to", tmp_path / "spleen_seg", "--author", "Ada")
    assert proc.returncode == 0, out(proc)
    bundle = tmp_path / "spleen_seg"
    meta = json.loads((bundle / "configs" / "metadata.json").read_text())
    assert (meta["name"], meta["version"], meta["authors"]) == ("spleen_seg", "0.1.0", "Ada")
    assert list(meta["changelog"]) == ["0.1.0"] and "synthetic_seg" in meta["changelog"]["0.1.0"]
    assert meta["copyright"].endswith("Ada") and meta["description"].startswith("TODO")
    train = yaml.safe_load((bundle / "configs" / "train.yaml").read_text())
    assert train["output_dir"] == "runs/spleen_seg/monai"  # the template's name is replaced in its configs
    readme = (bundle / "docs" / "README.md").read_text()
    assert readme.startswith("# spleen_seg") and "hpc-runner pack spleen_seg" in readme
    assert not (bundle / "MANIFEST").exists() and not (bundle / "data").exists()
    report = verify_bundle(bundle, net=True)
    assert report.ok, [p.line() for p in report.problems]


def test_init_defaults_to_bundles_dir_and_name_resolves(cli, tmp_path: Path) -> None:
    proc = cli("init", "mine")
    assert proc.returncode == 0 and (tmp_path / "bundles" / "mine" / "configs" / "train.yaml").is_file(), out(proc)
    proc = cli("config", "--bundle", "mine", "--id", "_meta_::name", "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == "mine", out(proc)


@pytest.mark.parametrize(("args", "message"), [
    (["bad-name"], "not a usable bundle name"),
    (["x", "--from", "nope"], "no bundle named 'nope'"),
])
def test_init_refuses_bad_input(cli, args: list[str], message: str) -> None:
    proc = cli("init", *args)
    assert proc.returncode == 2 and message in proc.stderr, out(proc)


def test_init_refuses_a_non_empty_destination(cli, tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    proc = cli("init", "x", "--to", tmp_path / "taken")
    assert proc.returncode == 2 and "not empty" in proc.stderr, out(proc)
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_init_verify_run(cli, tmp_path: Path) -> None:
    assert cli("init", "tiny_seg", "--to", tmp_path / "tiny_seg").returncode == 0
    proc = cli("verify", tmp_path / "tiny_seg", "--net")
    assert proc.returncode == 0 and proc.stdout.startswith("OK: tiny_seg 0.1.0"), out(proc)
    proc = cli("run", "--bundle", tmp_path / "tiny_seg", *TINY, "--dataset_dir", tmp_path / "data",
               "--output_dir", tmp_path / "run")
    assert proc.returncode == 0, out(proc)
    record = yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())
    assert record["status"] == "completed" and record["bundle"]["name"] == "tiny_seg"
