"""The pre-flight on real bundle files: targets import, `$` lines compile, input paths exist; nothing runs."""

from __future__ import annotations

import importlib.abc
import json
import sys
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import Override
from hpc_runner.config.preflight import (
    PreflightCache,
    check_config,
    check_points,
    config_problems,
    expression_problem,
)
from hpc_runner.errors import ClusterError, ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
META = json.loads((EXAMPLE / "configs" / "metadata.json").read_text())


def make_bundle(root: Path, train_yaml: str, scripts: dict[str, str] | None = None) -> Path:
    """A bundle folder with the given train.yaml, the example's metadata and optional scripts/ modules."""
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "train.yaml").write_text(train_yaml)
    (root / "configs" / "metadata.json").write_text(json.dumps(META))
    if scripts is not None:
        (root / "scripts").mkdir()
        (root / "scripts" / "__init__.py").write_text("")
        for name, text in scripts.items():
            (root / "scripts" / f"{name}.py").write_text(text)
    return root


@pytest.fixture
def forget_scripts():
    """Bundle-local `scripts` packages must not leak from one test into another."""
    yield
    for name in [m for m in sys.modules if m == "scripts" or m.startswith("scripts.")]:
        del sys.modules[name]


def test_example_bundle_passes_although_its_dataset_dir_is_made_by_initialize(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # data/synthetic_seg does not exist here
    cfg = load_bundle_config(EXAMPLE)
    assert not (tmp_path / "data" / "synthetic_seg").exists()
    assert config_problems(cfg) == []


def test_bad_target_in_a_file_is_named_with_file_line_and_id(tmp_path):
    b = make_bundle(tmp_path / "b", "lr: 0.1\nnet:\n  _target_: monai.networks.nets.NoSuchNet\n  a: 1\n")
    cfg = load_bundle_config(b)
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    text = err.value.paragraph()
    assert f"{b / 'configs' / 'train.yaml'}:3" in text
    assert "at id 'net::_target_'" in text and "'monai.networks.nets.NoSuchNet' cannot be imported" in text
    assert "\n" not in text


def test_a_bare_name_that_is_no_monai_component_is_refused(tmp_path):
    b = make_bundle(tmp_path / "b", "net:\n  _target_: NoSuchUNet\n")
    [problem] = config_problems(load_bundle_config(b))
    assert problem.id_path == "net::_target_" and "not a MONAI component name" in problem.message


def test_dollar_line_with_a_syntax_error_is_refused_and_a_valid_one_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    b = make_bundle(tmp_path / "b", f"""\
seed: 1
ok: "$@seed + 1"
ok_import: "$import os"
side_effect: "$open('{marker}', 'w').write('x')"
bad: "$int(@seed +)"
""")
    problems = config_problems(load_bundle_config(b))
    assert [(p.id_path, p.where) for p in problems] == [("bad", f"{b / 'configs' / 'train.yaml'}:5")]
    assert "not valid Python" in problems[0].message
    assert not marker.exists()  # compiled, never evaluated


def test_a_statement_where_monai_evals_an_expression_is_refused():
    assert "not a Python expression" in expression_problem("$x = 1")
    assert expression_problem("$@a::b[0] @ @c") is None  # matrix product after the references are replaced
    assert expression_problem("$from os import path") is None


def test_missing_dataset_dir_is_refused(tmp_path):
    b = make_bundle(tmp_path / "b", f"dataset_dir: {tmp_path / 'nope'}\nnet:\n  _target_: UNet\n")
    with pytest.raises(ConfigError) as err:
        check_config(load_bundle_config(b))
    assert "at id 'dataset_dir'" in err.value.paragraph()
    assert f"the input folder '{tmp_path / 'nope'}' does not exist" in err.value.paragraph()


def test_missing_weights_or_inference_inputs_are_refused_file_or_folder(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"x")
    b = make_bundle(tmp_path / "b", f"ckpt: {tmp_path / 'model.pt'}\nimages: {tmp_path}\nlabels: {tmp_path / 'gone'}\n")
    problems = config_problems(load_bundle_config(b))
    assert [(p.id_path, p.message) for p in problems] == [("labels", f"the input '{tmp_path / 'gone'}' does not exist")]


def test_a_path_that_nothing_which_runs_refers_to_is_not_checked(tmp_path):
    """`--images DIR` leaves the default dataset unused: its missing folder must not stop the run."""
    b = make_bundle(tmp_path / "b", f"""\
dataset_dir: {tmp_path / 'no-data'}
default_images: {{_target_: builtins.dict, folder: "@dataset_dir"}}
images: "@default_images"
run: ["$print(@images)"]
""")
    cfg = load_bundle_config(b)
    assert [p.id_path for p in config_problems(cfg)] == ["dataset_dir"]
    elsewhere = cfg.with_overrides([Override("images", str(tmp_path), "cli", "--images")])
    assert config_problems(elsewhere) == []


def test_dataset_dir_that_initialize_produces_is_not_an_input(tmp_path):
    b = make_bundle(tmp_path / "b", f"""\
dataset_dir: {tmp_path / 'made-later'}
initialize:
  - _target_: hpc_runner.data.synthetic.ensure_synthetic_volumes
    dataset_dir: "@dataset_dir"
""")
    cfg = load_bundle_config(b)
    assert config_problems(cfg) == []
    without = cfg.with_overrides([Override("initialize", [], "cli", "--initialize")])
    assert [p.id_path for p in config_problems(without)] == ["dataset_dir"]


def test_a_path_reached_through_references_is_checked_where_it_is_written(tmp_path):
    b = make_bundle(tmp_path / "b", f"""\
root: {tmp_path / 'absent'}
dataset_dir: "@root"
datalist: {tmp_path / 'list.json'}
glob_dir: "$@root + '/x'"
""")
    problems = config_problems(load_bundle_config(b))
    train = b / "configs" / "train.yaml"
    assert [(p.id_path, p.where) for p in problems] == [("dataset_dir", f"{train}:1"), ("datalist", f"{train}:3")]
    assert "(the value of 'root')" in problems[0].message
    (tmp_path / "absent").mkdir()
    (tmp_path / "list.json").write_text("{}")
    assert config_problems(load_bundle_config(b)) == []


def test_disabled_components_and_computed_targets_are_skipped(tmp_path):
    b = make_bundle(tmp_path / "b", """\
off:
  _target_: no.such.Thing
  _disabled_: true
  inner:
    _target_: also.not.There
computed:
  _target_: "$'monai.networks.nets.' + 'UNet'"
""")
    assert config_problems(load_bundle_config(b)) == []


def test_a_bundle_local_scripts_target_resolves_with_the_bundle_on_sys_path(tmp_path, forget_scripts):
    b = make_bundle(tmp_path / "b", "net:\n  _target_: scripts.nets.Tiny\n", {"nets": "class Tiny:\n    pass\n"})
    assert config_problems(load_bundle_config(b)) == []
    assert str(b.resolve()) not in sys.path  # only while checking


class _CountingFinder(importlib.abc.MetaPathFinder):
    """Counts every attempt to import one module name (failed imports are not cached by Python)."""

    def __init__(self, name: str) -> None:
        self.name, self.calls = name, 0

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            self.calls += 1
        return None


def test_each_distinct_target_is_imported_once(tmp_path, forget_scripts):
    nets = "\n".join(f"net{i}:\n  _target_: scripts.missing_mod.Net\n" for i in range(5))
    b = make_bundle(tmp_path / "b", nets, {"nets": ""})
    cfg = load_bundle_config(b)
    finder = _CountingFinder("scripts.missing_mod")
    sys.meta_path.insert(0, finder)
    try:
        problems = config_problems(cfg)
    finally:
        sys.meta_path.remove(finder)
    assert len(problems) == 5 and finder.calls == 1
    with pytest.raises(ConfigError) as err:
        check_config(cfg)
    assert "(also at net1::_target_, net2::_target_, net3::_target_ and 1 more)" in err.value.paragraph()


def test_a_sweep_resolves_each_distinct_target_once_over_all_points(tmp_path):
    b = make_bundle(tmp_path / "b", "net:\n  _target_: UNet\nloss:\n  _target_: DiceLoss\n")
    cfg = load_bundle_config(b)
    cache = PreflightCache()
    points = [[Override("net::_target_", t, "sweep", "--sweep net::_target_")] for t in ["UNet", "BasicUNet"] * 100]
    note = check_points(cfg, points, cache)
    assert cache.resolved + cache.remembered == 3  # UNet, DiceLoss, BasicUNet
    assert "2 distinct point config(s)" in note


def test_one_bad_sweep_point_is_named_with_its_values(tmp_path):
    b = make_bundle(tmp_path / "b", "lr: 0.1\nnet:\n  _target_: UNet\n")
    cfg = load_bundle_config(b)
    values = ["UNet", "BasicUNet", "monai.networks.nets.NoSuch"]
    points = [[Override("lr", lr, "sweep", "--sweep lr"), Override("net::_target_", t, "sweep", "--sweep net")]
              for lr in (0.1, 0.2) for t in values]
    with pytest.raises(ClusterError) as err:
        check_points(cfg, points)
    text = err.value.paragraph()
    assert "sweep point 2 (lr=0.1 net::_target_=monai.networks.nets.NoSuch) cannot start" in text
    assert "at id 'net::_target_'" in text and "nothing was submitted" in text
    # plain numbers cannot break a target, an expression or a path: they share the base check
    note = check_points(cfg, [[Override("lr", x / 10, "sweep", "--sweep lr")] for x in range(1000)])
    assert "0 distinct point config(s)" in note
