"""onnx_export: MONAI's test_bundle_onnx_export scenarios through both runners, the same ONNX graph out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.monai_commands.conftest import Workspace, assert_both_succeed, save_random_checkpoint, write_def_args

pytestmark = pytest.mark.slow
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")


def assert_same_onnx(a: Path, b: Path) -> None:
    """Same operators in the same order, same inputs and outputs, the same weights."""
    from onnx import numpy_helper

    ga, gb = onnx.load(str(a)).graph, onnx.load(str(b)).graph
    assert [n.op_type for n in ga.node] == [n.op_type for n in gb.node]
    assert [str(i.type) for i in ga.input] == [str(i.type) for i in gb.input]
    assert [str(o.type) for o in ga.output] == [str(o.type) for o in gb.output]
    weights_a = {t.name: numpy_helper.to_array(t) for t in ga.initializer}
    weights_b = {t.name: numpy_helper.to_array(t) for t in gb.initializer}
    assert weights_a.keys() == weights_b.keys()
    assert all((weights_a[k] == weights_b[k]).all() for k in weights_a)


@pytest.mark.parametrize("use_trace", ["True", "False"])
def test_onnx_export_writes_the_same_model_as_monai(workspace: Workspace, use_trace: str) -> None:
    save_random_checkpoint(workspace.path / "model.pt")
    write_def_args(workspace.path / "def_args.yaml", {"meta_file": "will be replaced by `meta_file` arg"})
    both = workspace.run_both(
        "onnx_export", "network_def", "--filepath", "model.onnx", "--meta_file", "data/metadata.json",
        "--config_file", "['data/inference.json','def_args.yaml']", "--ckpt_file", "model.pt",
        "--args_file", "def_args.yaml", "--input_shape", "[1, 1, 96, 96, 96]", "--use_trace", use_trace,
    )
    assert_both_succeed(both)
    assert both.hpcr.info()[-1] == "exported to file: model.onnx."
    assert_same_onnx(both.monai.cwd / "model.onnx", both.hpcr.cwd / "model.onnx")
