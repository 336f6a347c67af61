"""ckpt_export: MONAI's test_bundle_ckpt_export scenarios through both runners, the same TorchScript out."""

from __future__ import annotations

import json

import pytest

from tests.monai_commands.conftest import (
    Workspace,
    assert_both_succeed,
    assert_same_torchscript,
    load_torchscript,
    save_random_checkpoint,
    write_def_args,
)

pytestmark = pytest.mark.slow

# MONAI's TEST_CASE_1..3: (key_in_ckpt, use_trace)
CASES = [("", ""), ("model", ""), ("model", "True")]
EXTRA = ["inference.json", "def_args.json"]


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
    _, metadata, extra = load_torchscript(both.hpcr.cwd / "model.ts", EXTRA)
    assert "schema" in metadata
    assert "meta_file" in json.loads(extra["def_args.json"])
    assert "network_def" in json.loads(extra["inference.json"])
    assert_same_torchscript(both.monai.cwd / "model.ts", both.hpcr.cwd / "model.ts", EXTRA)
    assert sorted(p.name for p in both.hpcr.cwd.iterdir()) == sorted(p.name for p in both.monai.cwd.iterdir())


def test_default_paths_follow_bundle_root_as_in_monai(workspace: Workspace) -> None:
    """MONAI's test_default_value (its case 3: nested weights, traced; cases 1-2 differ as test_export's do)."""
    save_random_checkpoint(workspace.path / "bundle" / "models" / "model.pt", "model")
    both = workspace.run_both("ckpt_export", "--key_in_ckpt", "model", "--config_file", "data/inference.json",
                              "--bundle_root", "bundle", "--use_trace", "True", "--input_shape", "[1, 1, 96, 96, 96]")
    assert_both_succeed(both)
    assert_same_torchscript(both.monai.cwd / "bundle/models/model.ts", both.hpcr.cwd / "bundle/models/model.ts",
                            ["inference.json"])
