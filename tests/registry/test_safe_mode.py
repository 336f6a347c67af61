"""--safe: no `$` expressions, `_target_` only inside the allow-list; all refusals at once with file:line and id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from registry_helpers import EXAMPLE, TINY, copy_bundle, out

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.errors import BundleError
from hpc_runner.registry.safe_mode import check_safe, policy_for_user, safe_problems

UNSAFE = """
evil:
  _target_: os.system
  command: echo pwned
sneaky:
  _target_: torch.os.system               # torch imports os: the resolved object counts, not the prefix
  command: echo pwned
loader:
  _target_: LoadImaged
  keys: [image]
  reader: subprocess.getoutput            # LoadImage imports dotted reader names
cache:
  _target_: PersistentDataset
  data: []
  cache_dir: /tmp/cache
  weights_only: false
shell:
  _target_: run_cmd                       # a monai function that runs commands
  cmd_list: [ls]
builtin:
  _target_: eval                          # not a monai name: MONAI would find builtins.eval
computed:
  _target_: "@evil_name"
evil_name: os.system
modules: ["$import subprocess", "$import torch"]
expr: "$print('hello')"
zoo_run:                                  # how MONAI zoo bundles write their entries and transform lists
  - "$@trainer.run()"
zoo_transforms:
  _target_: Compose
  transforms: "$@preprocessing + @augmentation"
"""


def _unsafe_bundle(tmp_path: Path) -> tuple[Path, Path]:
    bundle = copy_bundle(EXAMPLE, tmp_path / "unsafe")
    train = bundle / "configs" / "train.yaml"
    train.write_text(train.read_text() + UNSAFE)
    return bundle, train


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def test_run_safe_refuses_everything_at_once(tmp_path: Path, capsys: pytest.CaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from hpc_runner.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    bundle, train = _unsafe_bundle(tmp_path)
    rc = main(["run", "--safe", "--bundle", str(bundle), *TINY])
    err = capsys.readouterr().err
    assert rc == 2, err
    expected = [
        (_line(train, "_target_: os.system"), "evil::_target_", "'os.system' is refused: it is outside the allow-list"),
        (_line(train, "torch.os.system"), "sneaky::_target_", "resolves to posix.system"),
        (_line(train, "subprocess.getoutput"), "loader::reader", "reader 'subprocess.getoutput' is refused"),
        (_line(train, "weights_only"), "cache::weights_only", "lets pickle files run code"),
        (_line(train, "run_cmd"), "shell::_target_", "code-running entry point"),
        (_line(train, "_target_: eval"), "builtin::_target_", "'eval' is not a MONAI component"),
        (_line(train, "@evil_name"), "computed::_target_", "computed _target_"),
        (_line(train, "$import subprocess"), "modules::0", "'$import subprocess' is refused"),
        (_line(train, "$print"), "expr", "'$' expression \"$print('hello')\" is refused"),
        (_line(train, '- "$@trainer.run()"'), "zoo_run::0", "'$' expression '$@trainer.run()' is refused"),
        (_line(train, "$@preprocessing + @augmentation"), "zoo_transforms::transforms", "'$' expression"),
    ]
    for line, id_path, text in expected:
        prefix = f"  {train}:{line}: id '{id_path}': "
        assert any(row.startswith(prefix) and text in row for row in err.splitlines()), f"{prefix}{text}\n{err}"
    assert "modules::1" not in err  # `$import torch` is allowed
    assert f"--safe refuses bundle synthetic_seg: {len(expected)} problem(s)" in err
    assert not (tmp_path / "runs").exists()


def test_the_example_passes_and_user_allow_list(tmp_path: Path) -> None:
    safe = copy_bundle(EXAMPLE, tmp_path / "safe")
    cfg = load_bundle_config(bundle=str(safe), environ={})
    check_safe(cfg, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    train = safe / "configs" / "train.yaml"
    train.write_text(train.read_text() + "acc:\n  _target_: ignite.metrics.Accuracy\n")
    cfg = load_bundle_config(bundle=str(safe), environ={})
    user_config = tmp_path / "hpcr.yaml"
    environ = {"HPCR_CONFIG": str(user_config)}
    user_config.write_text("safe_targets: []\n")
    with pytest.raises(BundleError, match=r"id 'acc::_target_': _target_ 'ignite.metrics.Accuracy' is refused"):
        check_safe(cfg, environ)
    user_config.write_text("safe_targets: [ignite]\n")
    check_safe(cfg, environ)
    assert policy_for_user(environ).allowed == ("monai", "torch", "hpc_runner", "ignite")


def test_bundle_modules_that_shadow_installed_ones_are_refused(tmp_path: Path) -> None:
    bundle = copy_bundle(EXAMPLE, tmp_path / "safe")
    (bundle / "fire.py").write_text("print('I replace the fire package')\n")
    (bundle / "scripts").mkdir()
    (bundle / "scripts" / "__init__.py").write_text("")  # the usual bundle package: shadows nothing
    cfg = load_bundle_config(bundle=str(bundle), environ={})
    problems = safe_problems(cfg.expanded(), cfg.where, policy_for_user({"XDG_CONFIG_HOME": str(tmp_path)}),
                             cfg.bundle_dir)
    assert [p.where for p in problems] == [str(bundle / "fire.py")]
    assert "would shadow the installed module 'fire'" in problems[0].message


@pytest.mark.slow
def test_the_example_runs_with_safe_and_a_zoo_style_entry_is_refused(cli, tmp_path: Path) -> None:
    proc = cli("run", "--safe", "--bundle", EXAMPLE, *TINY, "--dataset_dir", tmp_path / "data",
               "--output_dir", tmp_path / "run")
    assert proc.returncode == 0, out(proc)
    assert yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())["status"] == "completed"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["final_metric"] is not None
    zoo = copy_bundle(EXAMPLE, tmp_path / "zoo")
    train = zoo / "configs" / "train.yaml"
    train.write_text(train.read_text() + 'zoo_run:\n  - "$@trainer.run()"\n')
    proc = cli("run", "--safe", "--bundle", zoo, *TINY, "--dataset_dir", tmp_path / "data")
    assert proc.returncode == 2, out(proc)
    run_line = _line(train, '- "$@trainer.run()"')
    assert f"{train}:{run_line}: id 'zoo_run::0'" in proc.stderr
