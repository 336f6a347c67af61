"""verify_net_in_out: MONAI's test_bundle_verify_net scenario through both runners."""

from __future__ import annotations

import pytest

from tests.monai_commands.conftest import Workspace, assert_both_succeed, write_def_args

pytestmark = pytest.mark.slow


def test_verify_with_n_any_p_from_args_file_and_a_meta_override(workspace: Workspace) -> None:
    write_def_args(workspace.path / "def_args.json", {"meta_file": "will be replaced by `meta_file` arg", "p": 2})
    both = workspace.run_both(
        "verify_net_in_out", "network_def", "--meta_file", "data/metadata.json", "--config_file",
        "data/inference.json", "-n", "4", "--any", "16", "--args_file", "def_args.json", "--device", "cpu",
        "--_meta_::network_data_format::inputs#image#spatial_shape", "[16,'*','2**p*n']",
    )
    assert_both_succeed(both)
    assert both.hpcr.info()[-1] == "data shape of network is verified with no error."
