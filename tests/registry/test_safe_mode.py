"""--safe: no `$` expressions, `_target_` only inside the allow-list; all refusals at once with file:line and id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from registry_helpers import EXAMPLE, TINY, copy_bundle, out

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.safe_mode import check_safe, policy_for_user, safe_problems
from hpc_runner.errors import BundleError

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
        (_line(train, "_target_: os.system"), "evil::_target_", "'os.system' is refused: it is outside the packages"),
        (_line(train, "torch.os.system"), "sneaky::_target_", "resolves to posix.system"),
        (_line(train, "subprocess.getoutput"), "loader::reader", "reader 'subprocess.getoutput' is refused"),
        (_line(train, "weights_only"), "cache::weights_only", "lets pickle files run code"),
        (_line(train, "cache_dir: /tmp/cache"), "cache::cache_dir", "may write only to @output_dir"),
        (_line(train, "run_cmd"), "shell::_target_", "is not a network, transform, dataset"),
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
    assert policy_for_user(environ).extra == ("ignite",)


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
               "--writable", tmp_path / "data", "--output_dir", tmp_path / "run")  # the sandbox: it makes its data
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


# ------------------------------------------------------------------ attacks through the real CLI

def _hostile(tmp_path: Path, name: str, train_extra: str = "", meta_extra: dict | None = None,
             logging_conf: str | None = None) -> Path:
    bundle = copy_bundle(EXAMPLE, tmp_path / name)
    train = bundle / "configs" / "train.yaml"
    train.write_text(train.read_text() + train_extra)
    if meta_extra:
        meta_path = bundle / "configs" / "metadata.json"
        meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), **meta_extra}, indent=2))
    if logging_conf is not None:
        (bundle / "configs" / "logging.conf").write_text(logging_conf)
    return bundle


def _refusals(stderr: str) -> set[str]:
    """The problem lines of a `run --safe` refusal (indented, one per problem)."""
    return {line.strip().rstrip(".") for line in stderr.splitlines() if line.startswith("  ")}


@pytest.mark.slow  # whole CLI runs (training, the pre-flight's MONAI import): the full suite runs it
def test_code_hidden_in_metadata_and_reached_by_a_reference_is_refused(cli, tmp_path: Path) -> None:
    marker = tmp_path / "M6"
    bundle = _hostile(tmp_path, "meta", "shown: '@_meta_::evil'\n",
                      {"evil": f"$__import__('os').system('touch {marker}')"})
    proc = cli("run", "--safe", "--bundle", bundle, *TINY, "--dataset_dir", tmp_path / "data",
               "--output_dir", tmp_path / "run")
    assert proc.returncode == 2, out(proc)
    assert "id '_meta_::evil': '$' expression" in proc.stderr
    assert not marker.exists() and not (tmp_path / "run").exists()
    verify = cli("verify", bundle, "--safe", "--no-imports")
    assert verify.returncode == 2 and "id '_meta_::evil': '$' expression" in verify.stdout


def test_a_target_that_writes_a_pth_file_into_site_packages_is_refused(cli, tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    payload = tmp_path / "payload.pth"
    payload.write_text(f"import os; os.system('touch {tmp_path / 'M7'}')\n")
    bundle = _hostile(tmp_path, "dl", f"""
fetch:
  _target_: monai.apps.utils.download_url
  url: file://{payload}
  filepath: {site / 'evil.pth'}
  hash_val: null
save:
  _target_: SaveImaged
  keys: [image]
  output_dir: {site}
  output_ext: .pth
""")
    proc = cli("run", "--safe", "--bundle", bundle, *TINY, "--dataset_dir", tmp_path / "data")
    assert proc.returncode == 2, out(proc)
    assert "id 'fetch::_target_': _target_ 'monai.apps.utils.download_url' is refused" in proc.stderr
    assert "id 'save::output_dir': SaveImaged writes files to output_dir" in proc.stderr
    assert list(site.iterdir()) == [] and not (tmp_path / "M7").exists()


def test_a_logging_conf_that_runs_code_is_refused(cli, tmp_path: Path) -> None:
    marker = tmp_path / "M8"
    conf = (EXAMPLE / "configs" / "logging.conf").read_text().replace(
        "args=(sys.stdout,)", f"args=(__import__('os').system('touch {marker}') and sys.stdout,)")
    bundle = _hostile(tmp_path, "log", logging_conf=conf)
    proc = cli("run", "--safe", "--bundle", bundle, *TINY, "--dataset_dir", tmp_path / "data")
    assert proc.returncode == 2, out(proc)
    assert "[handler_consoleHandler]: handler args" in proc.stderr and "eval()" in proc.stderr
    assert not marker.exists()


_CORPUS = {
    "meta_code": ("shown: '@_meta_::evil'\n", {"evil": "$print(1)"}, None),
    "downloader": ("fetch:\n  _target_: monai.apps.utils.download_url\n  url: file:///etc/hostname\n"
                   "  filepath: x.pth\n", None, None),
    "pretrained": ("net2:\n  _target_: DenseNet121\n  spatial_dims: 2\n  in_channels: 1\n  out_channels: 2\n"
                   "  pretrained: true\n", None, None),
    "pretrained_as_1": ("net2:\n  _target_: DenseNet121\n  spatial_dims: 2\n  in_channels: 1\n  out_channels: 2\n"
                        "  pretrained: 1\n", None, None),
    "allow_pickle_as_1": ("load:\n  _target_: LoadImage\n  reader: NumpyReader\n  allow_pickle: 1\n", None, None),
    "hub_loss": ("perc:\n  _target_: monai.losses.PerceptualLoss\n  spatial_dims: 2\n", None, None),
    "writer_default": ("saver:\n  _target_: monai.handlers.CheckpointSaver\n  save_dict: {}\n"
                       "  save_dir: /tmp/elsewhere\n", None, None),
    "writer_ok": ("saver:\n  _target_: monai.handlers.CheckpointSaver\n  save_dict: {}\n"
                  "  save_dir: '@output_dir'\n", None, None),
    "merger_by_name": ("pinf:\n  _target_: PatchInferer\n  merger_cls: subprocess.Popen\n", None, None),
    "bound_method": ("reg:\n  _target_: monai.networks.nets.flexible_unet.FLEXUNET_BACKBONE.register_class\n"
                     "  name: os.system\n", None, None),
    "file_handler": ("", None, "[loggers]\nkeys=root\n[handlers]\nkeys=f\n[formatters]\nkeys=\n[logger_root]\n"
                     "handlers=f\n[handler_f]\nclass=FileHandler\nargs=('/tmp/x.log',)\n"),
}


@pytest.mark.parametrize("case", sorted(_CORPUS))
def test_verify_safe_reports_exactly_what_run_safe_refuses(tmp_path: Path, case: str) -> None:
    from hpc_runner.config.verify import verify_bundle

    train_extra, meta_extra, logging_conf = _CORPUS[case]
    bundle = _hostile(tmp_path, case, train_extra, meta_extra, logging_conf)
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    cfg = load_bundle_config(bundle=str(bundle), environ={})  # what `run --safe --bundle B` loads and checks
    try:
        check_safe(cfg, environ)
        refused: set[str] = set()
    except BundleError as err:
        refused = {line.strip().rstrip(".") for line in err.message.splitlines()[1:]}
    report = verify_bundle(bundle, imports=False, safe=True, environ=environ)
    # verify also checks the bundle's other configs (inference, evaluate): compare what run loads
    verified = {p.line() for p in report.problems if "inference.yaml" not in p.line()
                and "evaluate.yaml" not in p.line()}
    assert refused == verified
    assert bool(refused) == (case != "writer_ok")


# ------------------------------------------------------------------ issue 32: exact names, every path, truthiness

@pytest.mark.slow  # CLI processes that import MONAI: the full suite runs it
def test_hpc_runners_own_functions_that_link_or_run_are_refused_by_exact_name(cli, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    shipped = tmp_path / "shipped-run"  # a run folder the attacker ships: its config would run on the victim
    shipped.mkdir()
    bundle = _hostile(tmp_path, "own", "plant:\n  _target_: hpc_runner.data.cached.publish_once\n"
                      "  tmp: '@bundle_root'\n"
                      f"  final: {home / '.bash_profile'}\n"
                      f"replay:\n  _target_: hpc_runner.engine.runner.run_recorded\n  run_dir: {shipped}\n")
    proc = cli("run", "--safe", "--bundle", bundle, *TINY, "--dataset_dir", tmp_path / "data",
               "--output_dir", tmp_path / "run")
    assert proc.returncode == 2, out(proc)
    assert "id 'plant::_target_': _target_ 'hpc_runner.data.cached.publish_once' is refused" in proc.stderr
    assert "id 'replay::_target_': _target_ 'hpc_runner.engine.runner.run_recorded' is refused" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1  # one paragraph
    assert list(home.iterdir()) == [] and not (tmp_path / "run").exists()
    verify = cli("verify", bundle, "--safe", "--no-imports")
    assert verify.returncode == 2, out(verify)
    assert "_target_ 'hpc_runner.data.cached.publish_once' is refused" in verify.stdout
    assert "_target_ 'hpc_runner.engine.runner.run_recorded' is refused" in verify.stdout


@pytest.mark.slow  # CLI processes that import MONAI: the full suite runs it
def test_every_path_argument_of_a_writer_is_checked(cli, tmp_path: Path) -> None:
    bundle = _hostile(tmp_path, "paths", f"""
save:
  _target_: SaveImage
  output_dir: '@output_dir'
  data_root_dir: {tmp_path / 'data' / 'a' / 'b' / 'c'}
save2:
  _target_: SaveImaged
  keys: [image]
  output_dir: '@output_dir'
  output_postfix: x/../../../../home/.bashrc
saver:
  _target_: monai.handlers.CheckpointSaver
  save_dict: {{}}
  save_dir: '@output_dir'
  final_filename: ../escape.pt
""")
    proc = cli("run", "--safe", "--bundle", bundle, *TINY, "--dataset_dir", tmp_path / "data",
               "--output_dir", tmp_path / "run")
    assert proc.returncode == 2, out(proc)
    assert "id 'save::data_root_dir': SaveImage's data_root_dir" in proc.stderr
    assert "id 'save2::output_postfix': SaveImaged's output_postfix" in proc.stderr
    assert "id 'saver::final_filename': CheckpointSaver's final_filename" in proc.stderr
    assert not (tmp_path / "run").exists()
    verify = cli("verify", bundle, "--safe", "--no-imports")
    assert verify.returncode == 2 and "SaveImage's data_root_dir" in verify.stdout, out(verify)


@pytest.mark.slow  # CLI processes that import MONAI: the full suite runs it
def test_a_compiler_command_and_a_weights_download_inside_allowed_modules_are_refused(cli, tmp_path: Path) -> None:
    bundle = _hostile(tmp_path, "gmm", """
gmm:
  _target_: monai.networks.layers.GaussianMixtureModel
  channel_count: "1; touch /tmp/M-gmm #"
  mixture_count: 1
  mixture_size: 1
medicalnet:
  _target_: monai.networks.nets.resnet.get_pretrained_resnet_medicalnet
  resnet_depth: 10
private:
  _target_: monai.networks.nets.senet._load_state_dict
  arch: se_resnet50
  progress: false
""")
    proc = cli("run", "--safe", "--bundle", bundle, *TINY, "--dataset_dir", tmp_path / "data",
               "--output_dir", tmp_path / "run")
    assert proc.returncode == 2, out(proc)
    assert "id 'gmm::_target_': _target_ 'monai.networks.layers.GaussianMixtureModel' resolves to " \
           "monai.networks.layers.gmm.GaussianMixtureModel, which is refused: it compiles" in proc.stderr
    assert "id 'medicalnet::_target_': _target_ 'monai.networks.nets.resnet.get_pretrained_resnet_medicalnet' " \
           "is refused: it downloads" in proc.stderr
    assert "id 'private::_target_'" in proc.stderr and "private" in proc.stderr
    verify = cli("verify", bundle, "--safe", "--no-imports")
    assert verify.returncode == 2 and "get_pretrained_resnet_medicalnet' is refused" in verify.stdout, out(verify)


@pytest.mark.parametrize("value", ["0", "''", "'@nope'", "null", "{_target_: builtins.dict}"])
def test_weights_only_is_refused_by_what_it_resolves_to(tmp_path: Path, value: str) -> None:
    from hpc_runner.config.verify import verify_bundle

    bundle = _hostile(tmp_path, "wo", f"nope: 0\ncache:\n  _target_: PersistentDataset\n  data: []\n"
                      f"  cache_dir: '@output_dir'\n  weights_only: {value}\n")
    with pytest.raises(BundleError, match=r"id 'cache::weights_only': 'weights_only"):
        check_safe(load_bundle_config(bundle=str(bundle), environ={}), {"XDG_CONFIG_HOME": str(tmp_path / "x")})
    report = verify_bundle(bundle, imports=False, safe=True, environ={"XDG_CONFIG_HOME": str(tmp_path / "x")})
    assert any("weights_only" in p.line() for p in report.problems)


def test_weights_only_true_through_a_reference_passes(tmp_path: Path) -> None:
    bundle = _hostile(tmp_path, "wo_ok", "yes_please: true\ncache:\n  _target_: PersistentDataset\n  data: []\n"
                      "  cache_dir: '@output_dir'\n  weights_only: '@yes_please'\n")
    check_safe(load_bundle_config(bundle=str(bundle), environ={}), {"XDG_CONFIG_HOME": str(tmp_path / "x")})


def test_a_dollar_expression_in_a_swept_value_is_refused_before_anything_is_queued(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpc_runner.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    marker = tmp_path / "M-sweep"
    code = main(["sweep", "--safe", "--bundle", str(EXAMPLE), "--cluster", "local", "--output_dir",
                 str(tmp_path / "sw"), "--sweep", f"learning_rate=0.1,$open('{marker}'.strip() + '')", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err  # was 0: the dry run showed two jobs, and each job refused its point when it started
    assert err.count("error:") == 1 and "Traceback" not in err
    assert "--safe refuses sweep point 1 (learning_rate=$open(" in err and "'$' expression" in err
    assert not (tmp_path / "sw").exists() and not marker.exists()
