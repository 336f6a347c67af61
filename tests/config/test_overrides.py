"""Overrides: files < args_file < HPCR__ env < CLI, by id, with typing and clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.errors import ConfigError


def load(bundle: Path, tokens: list[str] = (), env: dict | None = None, **kw):
    return load_bundle_config(bundle=str(bundle), cli_overrides=parse_cli_overrides(tokens), environ=env or {}, **kw)


def test_both_cli_forms_set_nested_ids(bundle: Path) -> None:
    cfg = load(bundle, ["--network_def::channels", "[16,32]", "--lr=1e-3", "--network_def#strides", "[4]"])
    assert cfg.config["network_def"]["channels"] == [16, 32]
    assert cfg.config["lr"] == 1e-3
    assert cfg.config["network_def"]["strides"] == [4]


def test_negative_numbers_and_hyphenated_keys(bundle: Path) -> None:
    cfg = load(bundle, ["--batch-size", "-1"])
    assert cfg.config["batch-size"] == -1


def test_env_override_beats_config_file_and_loses_to_cli(bundle: Path, tmp_path: Path) -> None:
    args = tmp_path / "args.yaml"
    args.write_text("lr: 0.5\nepochs: 7\nuse_amp: true\n")
    env = {"HPCR__lr": "0.25", "HPCR__epochs": "9"}
    cfg = load(bundle, ["--lr", "0.125"], env, args_file=args)
    assert cfg.config["lr"] == 0.125  # cli
    assert cfg.config["epochs"] == 9  # env beats args_file
    assert cfg.config["use_amp"] is True  # args_file beats the config file
    sources = {o.id: o.source for o in cfg.overrides}
    assert [o.source for o in cfg.overrides if o.id == "lr"] == ["args_file", "env", "cli"]
    assert sources["use_amp"] == "args_file"


def test_env_var_names_nested_ids_with_double_underscores(bundle: Path) -> None:
    cfg = load(bundle, env={"HPCR__network_def__channels": "[8,16,32]"})
    assert cfg.config["network_def"]["channels"] == [8, 16, 32]
    (ov,) = cfg.overrides
    assert ov.origin == "HPCR__network_def__channels"
    assert ov.replaced.endswith("train.yaml:9")


def test_an_unknown_id_is_added_as_monai_does_with_one_warning_naming_close_ids(bundle: Path) -> None:
    with pytest.warns(UserWarning) as caught:
        cfg = load(bundle, ["--network_def::chanels", "3"])
    (note,) = [str(w.message) for w in caught]
    assert "adds id 'network_def::chanels'" in note and "did you mean network_def::channels" in note
    assert "--strict-ids" in note
    assert cfg.config["network_def"]["chanels"] == 3 and cfg.config["network_def"]["channels"] == [8, 16]
    (ov,) = cfg.overrides
    assert ov.replaced is None  # `config --sources` shows it as a new id


def test_a_new_top_level_id_and_an_expression_are_added(bundle: Path) -> None:
    cfg = load(bundle, ["--test", "$print('hello world')", "--tracking_uri", "sqlite:///x.db"])
    assert cfg.config["test"] == "$print('hello world')" and cfg.config["tracking_uri"] == "sqlite:///x.db"


def test_a_deep_id_naming_a_list_item_adds_a_key_to_that_item(bundle: Path) -> None:
    (bundle / "configs" / "train.yaml").write_text(
        "post:\n  transforms:\n    - {_target_: Identity}\n    - {_target_: SaveImage, output_dir: x}\n")
    cfg = load(bundle, ["--post#transforms#1#output_postfix", "seg"])
    assert cfg.config["post"]["transforms"][1] == {"_target_": "SaveImage", "output_dir": "x", "output_postfix": "seg"}


def test_an_unknown_id_under_a_missing_parent_is_refused_as_monai_fails_on_it(bundle: Path) -> None:
    with pytest.raises(ConfigError, match="whose parent 'optimzer' is not in the config") as err:
        load(bundle, ["--optimzer::lr", "1"])
    assert "optimizer" in str(err.value)  # did you mean


def test_a_list_index_past_the_end_is_refused(bundle: Path) -> None:
    with pytest.raises(ConfigError, match="not an index of the list 'run'"):
        load(bundle, ["--run::5", "$print(1)"])


def test_strict_ids_refuse_an_unknown_id_with_suggestions(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(bundle, ["--optimizer::lrr", "1"], strict_ids=True)
    text = str(err.value)
    assert "optimizer::lrr" in text and "optimizer::lr" in text
    assert "--+optimizer::lrr" in text


def test_an_unknown_env_id_is_added_too_and_refused_when_strict(bundle: Path) -> None:
    with pytest.warns(UserWarning, match="HPCR__nope adds id 'nope'"):
        assert load(bundle, env={"HPCR__nope": "1"}).config["nope"] == 1
    with pytest.raises(ConfigError, match="HPCR__nope"):
        load(bundle, env={"HPCR__nope": "1"}, strict_ids=True)


def test_a_swept_id_is_always_strict(bundle: Path) -> None:
    from hpc_runner.config.overrides import Override

    cfg = load(bundle)
    with pytest.raises(ConfigError, match="'optimizer::lrr', which is not in the config"):
        cfg.with_overrides([Override("optimizer::lrr", 0.1, "sweep", "--sweep optimizer::lrr")])


def test_plus_prefix_adds_a_new_id_and_merges_an_existing_dict(bundle: Path) -> None:
    cfg = load(bundle, ["--+extra::deep", "3", "--+network_def", "{norm: batch}"])
    assert cfg.config["extra"] == {"deep": 3}
    assert cfg.config["network_def"]["norm"] == "batch"
    assert cfg.config["network_def"]["channels"] == [8, 16]


def test_a_number_cannot_become_plain_text(bundle: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(bundle, ["--lr", "fast"])
    assert "a number" in str(err.value) and "train.yaml:2" in str(err.value)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@pytest.mark.parametrize(("tokens", "env", "culprit"), [
    (["--epochs", "9" * 400], {}, "epochs"),  # as `run --max_epochs 999...9`: trains for ever
    (["--epochs", str(INT64_MAX + 1)], {}, "epochs"),
    (["--epochs", str(INT64_MIN - 1)], {}, "epochs"),
    (["--network_def::channels", f"[8, {10**30}]"], {}, "network_def::channels"),  # inside a list
    (["--+extra", str(10**30)], {}, "extra"),  # an id the override adds
    (["--dataset_dir", str(10**30)], {}, "dataset_dir"),  # replacing text
    ([], {"HPCR__epochs": "9" * 400}, "epochs"),
    ([], {"HPCR__network_def__strides": f"[{-(10**20)}]"}, "network_def::strides"),
])
def test_a_whole_number_past_64_bits_is_refused_naming_the_id_and_the_range(bundle: Path, tokens, env,
                                                                           culprit) -> None:
    """torch and numpy take signed 64-bit integers: a larger override is refused before anything runs, from the
    command line or an HPCR__ variable alike, whatever it replaces."""
    with pytest.raises(ConfigError) as err:
        load(bundle, tokens, env)
    paragraph = err.value.paragraph()
    assert f"at id '{culprit}'" in paragraph and f"from {INT64_MIN} to {INT64_MAX}" in paragraph, paragraph
    assert "\n" not in paragraph and len(paragraph) < 600


def test_a_whole_number_past_64_bits_in_an_args_file_names_its_line(bundle: Path, tmp_path: Path) -> None:
    args = tmp_path / "args.yaml"
    args.write_text(f"lr: 0.5\nepochs: {10**30}\n")
    with pytest.raises(ConfigError) as err:
        load(bundle, args_file=args)
    assert f"{args}:2" in err.value.paragraph() and err.value.id_path == "epochs"


def test_the_64_bit_bounds_themselves_are_whole_numbers_like_any_other(bundle: Path) -> None:
    cfg = load(bundle, ["--epochs", str(INT64_MAX), "--network_def::channels", f"[{INT64_MIN}, 8]"])
    assert cfg.config["epochs"] == INT64_MAX and cfg.config["network_def"]["channels"] == [INT64_MIN, 8]


def test_expressions_and_references_pass_through_to_the_resolver(bundle: Path) -> None:
    cfg = load(bundle, ["--lr", "$1e-3 * 2", "--epochs", "@lr"])
    assert cfg.config["lr"] == "$1e-3 * 2"
    assert cfg.config["epochs"] == "@lr"


def test_quoted_value_stays_a_string(bundle: Path) -> None:
    cfg = load(bundle, ["--dataset_dir", "'42'"])
    assert cfg.config["dataset_dir"] == "42"


def test_override_without_value_is_an_error() -> None:
    with pytest.raises(ConfigError, match="has no value"):
        parse_cli_overrides(["--lr"])


@pytest.mark.parametrize("token", ["--+x::::y", "--x::::y", "--+a::#b", "--+x##y"])
def test_an_id_with_an_empty_key_is_refused_naming_it(token: str) -> None:
    """Issue 32: `--+x::::y 1` added an id with an empty key (x -> '' -> y)."""
    with pytest.raises(ConfigError, match=re.escape(f"override '{token}' has an empty key in its id")) as err:
        parse_cli_overrides([token, "1"])
    assert "Expected keys separated by a single '::'" in err.value.paragraph()


def test_an_env_or_args_file_id_with_an_empty_key_is_refused_too(tmp_path: Path) -> None:
    from hpc_runner.config.overrides import load_args_file, parse_env_overrides

    with pytest.raises(ConfigError, match="HPCR__x____y' has an empty key"):
        parse_env_overrides({"HPCR__x____y": "1"})
    args = tmp_path / "args.yaml"
    args.write_text("lr: 1\n'+x::::y': 2\n")
    with pytest.raises(ConfigError, match=r"args.yaml:2' has an empty key in its id 'x::::y'"):
        load_args_file(args)


def test_args_file_errors_name_the_file_and_line(bundle: Path, tmp_path: Path) -> None:
    args = tmp_path / "args.yaml"
    args.write_text("lr: 0.1\nnot_an_id: 3\n")
    with pytest.raises(ConfigError) as err:
        load(bundle, args_file=args, strict_ids=True)
    assert f"{args}:2" in str(err.value)
    with pytest.warns(UserWarning, match=f"{args}:2 adds id 'not_an_id'"):
        load(bundle, args_file=args)


def test_sweep_refuses_a_typo_in_a_swept_or_a_fixed_id_before_anything_is_queued(bundle: Path, tmp_path: Path,
                                                                                 cli) -> None:
    base = ["sweep", "--bundle", str(bundle), "--cluster", "local", "--dry-run", "--output_dir", "s"]
    swept = cli(*base, "--sweep", "lrr=0.1,0.2", cwd=tmp_path)
    assert swept.returncode == 2 and "'lrr', which is not in the config" in swept.stderr, swept.stderr
    fixed = cli(*base, "--sweep", "lr=0.1,0.2", "--epoch", "2", cwd=tmp_path)
    assert fixed.returncode == 2 and "'epoch', which is not in the config" in fixed.stderr, fixed.stderr
    assert "Did you mean: epochs" in fixed.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("name", ["args.yaml", "args.json"])
def test_a_control_character_in_an_args_file_is_a_config_error_naming_it(tmp_path: Path, name: str) -> None:
    """libyaml's ReaderError (a character YAML does not allow) is no MarkedYAMLError: every YAML error class is
    turned into the one ConfigError at compose_checked, whichever file kind it reads."""
    from hpc_runner.config.overrides import load_args_file

    path = tmp_path / name
    path.write_bytes(b"learning_rate: 1\nx: a\x01b\n")
    with pytest.raises(ConfigError) as err:
        load_args_file(path)
    assert f"{path}:2" in err.value.paragraph() and "#x0001" in err.value.paragraph()


def test_a_control_character_in_a_config_or_sweep_file_is_one_error_naming_it(tmp_path: Path) -> None:
    from hpc_runner.config.loader import load_file
    from hpc_runner.errors import ClusterError
    from hpc_runner.sweep.spec import _read_sweep_yaml

    config = tmp_path / "train.yaml"
    config.write_bytes(b"a: 1\n\x1b[2J: 2\n")
    with pytest.raises(ConfigError, match="YAML syntax error") as err:
        load_file(config)
    assert f"{config}:2" in err.value.paragraph()
    sweep = tmp_path / "points.yaml"
    sweep.write_bytes(b"grid:\n  seed: [1, \x07]\n")
    with pytest.raises(ClusterError, match="not valid YAML") as err:
        _read_sweep_yaml(sweep)
    assert f"{sweep}:2" in err.value.paragraph()
