"""init_bundle: MONAI's test_bundle_init_bundle scenario through both runners, the same files byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.monai_commands.conftest import Workspace

pytestmark = pytest.mark.slow


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_bundle_writes_monais_files(workspace: Workspace) -> None:
    import torch
    from monai.networks.nets import UNet

    torch.save(UNet(2, 1, 1, [4, 8], [2]).state_dict(), workspace.path / "test.pt")
    both = workspace.run_both("init_bundle", "test_bundle", "test.pt", "--dataset_license", "True")
    assert both.monai.code == 0 and both.hpcr.code == 0, both.explain()
    made = _tree(both.hpcr.cwd / "test_bundle")
    assert sorted(made) == ["LICENSE", "configs/inference.json", "configs/metadata.json", "docs/README.md",
                            "docs/data_license.txt", "models/model.pt"]
    assert made == _tree(both.monai.cwd / "test_bundle")
    assert not [p for p in both.hpcr.cwd.iterdir() if p.name.startswith(".")]  # no staging folder left
