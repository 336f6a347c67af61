"""Every point is checked against the bundle config before anything is submitted."""

from __future__ import annotations

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.errors import ClusterError
from hpc_runner.sweep.check import check_points, has_references
from hpc_runner.sweep.spec import build_spec

BUNDLE = "bundles/synthetic_seg"


@pytest.fixture(scope="module")
def cfg():
    from pathlib import Path

    return load_bundle_config(Path(__file__).resolve().parents[2] / BUNDLE)


def test_a_valid_grid_checks_each_distinct_value_once(cfg):
    points = build_spec(["learning_rate=logspace(-5,-2,50)", "seed=range(10)", "batch_size=range(1,11)"]).points()
    assert len(points) == 5000
    assert check_points(cfg, points) == "70 distinct values checked once each"


def test_unknown_id_names_the_point(cfg):
    points = build_spec(["learning_rate=1e-3,1e-4", "netwrk_def::channels=[8,16]"]).points()
    with pytest.raises(ClusterError) as err:
        check_points(cfg, points)
    text = err.value.paragraph()
    assert "sweep point 0 (learning_rate=0.001 netwrk_def::channels=[8, 16])" in text
    assert "nothing was submitted" in text and "netwrk_def::channels" in text


def test_wrong_type_names_the_first_point_with_that_value(cfg):
    points = build_spec(["seed=0,1", "batch_size=2,[1]"]).points()
    with pytest.raises(ClusterError, match=r"sweep point 1 \(seed=0 batch_size=\[1\]\)"):
        check_points(cfg, points)


def test_a_reference_to_a_missing_id_is_caught_whole(cfg):
    points = build_spec(["learning_rate=@nope_lr,0.1"]).points()
    with pytest.raises(ClusterError, match="sweep point 0"):
        check_points(cfg, points)


def test_values_with_references_or_nested_ids_check_every_point(cfg):
    assert "checked whole" in check_points(cfg, build_spec(["learning_rate=@batch_size,0.1"]).points())
    nested = build_spec(["network_def=$None", "network_def::channels=[8,16]"], zip_values=True).points()
    with pytest.raises(ClusterError):
        check_points(cfg, nested)  # channels no longer exists once network_def is replaced by an expression
    assert has_references({"a": ["x", "@y"]}) and has_references("${env:HOME}") and not has_references([1, "x"])


def test_added_ids_are_checked(cfg):
    # both values of the added id were checked (not skipped because the id is not in the config yet)
    assert check_points(cfg, build_spec(["+extra_flag=true,false"]).points()) == "2 distinct values checked once each"
    with pytest.raises(ClusterError, match="sweep point 0"):
        check_points(cfg, build_spec(["+seed::x=1"]).points())  # parent is not a mapping
