"""ckpt_export: MONAI's test_bundle_ckpt_export scenarios through both runners, the same TorchScript out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.monai_commands.conftest import Workspace, assert_both_succeed, save_random_checkpoint, write_def_args

pytestmark = pytest.mark.slow

# MONAI's TEST_CASE_1..3: (key_in_ckpt, use_trace)
CASES = [("", ""), ("model", ""), ("model", "True")]
EXTRA = ["inference.json", "def_args.json"]


def _load(path: Path, extra: list[str]) -> tuple:
    from monai.data import load_net_with_metadata

    return load_net_with_metadata(str(path), more_extra_files=extra)


def assert_same_torchscript(a: Path, b: Path, extra: list[str], shape: tuple = (1, 1, 32, 32, 32)) -> None:
    """Same metadata, same embedded configs, same output on the same input."""
    net_a, meta_a, files_a = _load(a, extra)
    net_b, meta_b, files_b = _load(b, extra)
    assert meta_a == meta_b and files_a == files_b
    x = torch.rand(shape)
    with torch.no_grad():
        assert torch.equal(net_a.eval()(x), net_b.eval()(x))


@pytest.mark.parametrize(("key_in_ckpt", "use_trace"), CASES)
def test_export_writes_the_same_torchscript_as_monai(workspace: Workspace, key_in_ckpt: str, use_trace: str) -> None:
    save_random_checkpoint(workspace.path / "model.pt", key_in_ckpt)
    write_def_args(workspace.path / "def_args.yaml", {"meta_file": "will be replaced by `meta_file` arg"})
    argv = ["network_def", "--filepath", "model.ts", "--meta_file", "data/metadata.json",
            "--config_file", "['data/inference.json','def_args.yaml']", "--ckpt_file", "model.pt",
            "--key_in_ckpt", key_in_ckpt, "--args_file", "def_args.yaml"]
    if use_trace == "True":
        argv += ["--use_trace", use_trace, "--input_shape", "[1, 1, 96, 96, 96]"]
    both = workspace.run_both("ckpt_export", *argv)
    assert_both_succeed(both)
    assert both.hpcr.info()[-1] == "exported to file: model.ts."
    _, metadata, extra = _load(both.hpcr.cwd / "model.ts", EXTRA)
    assert "schema" in metadata
    assert "meta_file" in json.loads(extra["def_args.json"])
    assert "network_def" in json.loads(extra["inference.json"])
    assert_same_torchscript(both.monai.cwd / "model.ts", both.hpcr.cwd / "model.ts", EXTRA)
    assert sorted(p.name for p in both.hpcr.cwd.iterdir()) == sorted(p.name for p in both.monai.cwd.iterdir())


@pytest.mark.parametrize(("key_in_ckpt", "use_trace"), CASES)
def test_default_paths_follow_bundle_root_as_in_monai(workspace: Workspace, key_in_ckpt: str, use_trace: str) -> None:
    save_random_checkpoint(workspace.path / "bundle" / "models" / "model.pt", key_in_ckpt)
    argv = ["--key_in_ckpt", key_in_ckpt, "--config_file", "data/inference.json", "--bundle_root", "bundle"]
    if use_trace == "True":
        argv += ["--use_trace", use_trace, "--input_shape", "[1, 1, 96, 96, 96]"]
    both = workspace.run_both("ckpt_export", *argv)
    assert_both_succeed(both)
    assert_same_torchscript(both.monai.cwd / "bundle/models/model.ts", both.hpcr.cwd / "bundle/models/model.ts",
                            ["inference.json"])


def test_trace_without_input_shape_takes_the_shape_from_metadata(workspace: Workspace) -> None:
    save_random_checkpoint(workspace.path / "model.pt")
    both = workspace.run_both("ckpt_export", "network_def", "--filepath", "traced", "--ckpt_file", "model.pt",
                              "--meta_file", "data/metadata.json", "--config_file", "data/inference.json",
                              "--use_trace", "True")
    assert_both_succeed(both)
    assert both.hpcr.info()[-1] == "exported to file: traced."
    assert_same_torchscript(both.monai.cwd / "traced.ts", both.hpcr.cwd / "traced.ts", ["inference.json"],
                            shape=(1, 1, 160, 160, 160))


def test_a_run_dir_stands_for_its_model_pt(workspace: Workspace, cli) -> None:
    from monai.bundle import ckpt_export

    run_dir = workspace.path / "runs" / "seg" / "2026-11-25_10-00-00"
    save_random_checkpoint(run_dir / "model.pt")
    res = cli("ckpt_export", "network_def", "--filepath", "model.ts", "--config_file", "data/inference.json",
              "--ckpt_file", "runs/seg/2026-11-25_10-00-00", cwd=workspace.path)
    assert res.returncode == 0, res.stderr
    # MONAI needs the file itself; given it, it writes the same model
    ckpt_export("network_def", filepath=str(workspace.root / "monai.ts"), ckpt_file=str(run_dir / "model.pt"),
                config_file=str(workspace.path / "data" / "inference.json"), bundle_root=str(workspace.path))
    assert_same_torchscript(workspace.root / "monai.ts", workspace.path / "model.ts", ["inference.json"])
