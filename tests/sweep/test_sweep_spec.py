"""Sweep specs: top-level comma splitting, typing, range/linspace/logspace, --zip, sweep files."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.sweep.spec import build_spec, parse_sweep_option, parse_values, split_top_level


def test_grid_is_the_cartesian_product_first_axis_slowest():
    spec = build_spec(["optimizer::lr=1e-3,1e-4", "network_def::channels=[8,16],[16,32]"])
    assert spec.size() == 4
    assert spec.points() == [
        {"optimizer::lr": 1e-3, "network_def::channels": [8, 16]},
        {"optimizer::lr": 1e-3, "network_def::channels": [16, 32]},
        {"optimizer::lr": 1e-4, "network_def::channels": [8, 16]},
        {"optimizer::lr": 1e-4, "network_def::channels": [16, 32]},
    ]


def test_values_split_at_top_level_commas_only_and_are_typed_like_overrides():
    assert split_top_level("[8,16],[16,32],{a: 1, b: 2},'x,y'") == ["[8,16]", "[16,32]", "{a: 1, b: 2}", "'x,y'"]
    assert parse_values("1e-3,42,true,null,yes,'7',\"a,b\",[1, [2, 3]]", "t") == [
        0.001, 42, True, None, "yes", "7", "a,b", [1, [2, 3]]
    ]
    assert parse_values("@other,$1+1", "t") == ["@other", "$1+1"]


def test_ranges():
    assert parse_values("range(3)", "t") == [0, 1, 2]
    assert parse_values("range(1,10,4),100", "t") == [1, 5, 9, 100]
    assert parse_values("range(0.1,0.5,0.1)", "t") == [0.1, 0.2, 0.3, 0.4]
    assert parse_values("range(5,0,-2)", "t") == [5, 3, 1]
    assert parse_values("linspace(0,1,5)", "t") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert parse_values("logspace(-4,-2,3)", "t") == [1e-4, 1e-3, 1e-2]


def test_zip_pairs_values():
    spec = build_spec(["seed=range(3)", "learning_rate=1e-3,2e-3,4e-3"], zip_values=True)
    assert spec.points() == [
        {"seed": 0, "learning_rate": 1e-3}, {"seed": 1, "learning_rate": 2e-3}, {"seed": 2, "learning_rate": 4e-3}
    ]
    with pytest.raises(ClusterError, match="different lengths"):
        build_spec(["a=1,2", "b=1"], zip_values=True)


def test_added_ids_and_legacy_separator():
    assert parse_sweep_option("+new_key=1,2") == ("+new_key", [1, 2])
    assert parse_sweep_option("optimizer#lr=1") == ("optimizer::lr", [1])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lr", "has no '='"),
        ("=1,2", "no valid id"),
        ("lr=1,,2", "empty value"),
        ("lr=", "empty value"),
        ("lr=[1,2", "unclosed bracket"),
        ("lr=1]", "unbalanced"),
        ("lr='a", "unclosed quote"),
        ("lr=range(2,2)", "gives no values"),
        ("lr=range(1,2,0)", "step must not be zero"),
        ("lr=range(a)", "not a number"),
        ("lr=linspace(0,1)", "linspace"),
        ("lr={a: [1}", "unclosed bracket"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(ClusterError, match=message) as err:
        build_spec([spec])
    assert spec in err.value.paragraph() or "no valid id" in message


def test_same_id_twice_is_refused():
    with pytest.raises(ClusterError, match="swept twice"):
        build_spec(["a=1,2", "a=3"])


@pytest.mark.parametrize(("sweeps", "zipped", "culprit"), [
    (["lr=0.1,0.1"], False, "--sweep 'lr=0.1,0.1' gives lr=0.1 twice (value 1 and value 2)"),
    (["lr=range(3),2"], False, "gives lr=2 twice (value 3 and value 4)"),
    (["c=[8,16],[8, 16]", "lr=1,2"], False, "gives c=[8, 16] twice"),
    (["a=1,1", "b=2,2"], True, "--zip --sweep gives a=1 b=2 twice"),
])
def test_duplicate_points_are_refused_naming_the_id_and_the_value(sweeps, zipped, culprit):
    """Issue 32: `--sweep lr=0.1,0.1` was two identical jobs, silently."""
    with pytest.raises(ClusterError) as err:
        build_spec(sweeps, zipped)
    assert culprit in err.value.paragraph() and "two identical jobs" in err.value.paragraph()
    assert build_spec(["lr=1,1.0,2"]).size() == 3  # an int and a float are different values in a config
    assert build_spec(["a=1,1", "b=2,3"], True).size() == 2  # zipped: only the same pair twice is a duplicate


def test_a_sweep_file_point_given_twice_is_refused(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("points:\n  - {lr: 1, bs: 2}\n  - {bs: 2, lr: 1}\n")
    with pytest.raises(ClusterError, match=r"points gives lr=1 bs=2 twice"):
        build_spec(sweep_file=f)


def test_the_sweep_command_refuses_duplicate_points_before_anything_is_written(tmp_path, capsys):
    from hpc_runner.cli import main

    bundle = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
    assert main(["sweep", "--bundle", str(bundle), "--cluster", "local", "--output_dir", str(tmp_path / "sw"),
                 "--sweep", "learning_rate=0.1,0.1", "--dry-run"]) == 2  # was 0: a dry run of two identical jobs
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "learning_rate=0.1 twice" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_no_sweep_at_all():
    with pytest.raises(ClusterError, match="no sweep given"):
        build_spec([])


def test_sweep_file_grid_zip_points(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text(
        "grid:\n  batch_size: [2, 4]\n  network_def::channels: [[8, 16], [16, 32]]\n"
        "zip:\n  seed: range(2)\n  learning_rate: [1e-3, 2e-3]\n"
        "points:\n  - {num_val: 1}\n  - {num_val: 2}\n"
    )
    spec = build_spec(sweep_file=f)
    assert spec.ids == ["batch_size", "network_def::channels", "seed", "learning_rate", "num_val"]
    points = spec.points()
    assert len(points) == 2 * 2 * 2 * 2
    assert points[0] == {"batch_size": 2, "network_def::channels": [8, 16], "seed": 0, "learning_rate": 1e-3,
                         "num_val": 1}
    # --sweep options add grid axes to the file's
    assert build_spec(["max_epochs=1,2"], sweep_file=f).size() == 32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]\n", "a sweep file is a mapping"),
        ("grids: {a: [1]}\n", "a sweep file is a mapping"),
        ("zip: {a: [1, 2], b: [1]}\n", "different lengths"),
        ("points: [{a: 1}, {b: 2}]\n", "same ids"),
        ("grid: {a: [1\n", "not valid YAML"),
    ],
)
def test_bad_sweep_files(tmp_path, text, message):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(ClusterError, match=message):
        build_spec(sweep_file=f)
