"""Config files load as MONAI loads them, and every problem names the file and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.config.loader import load_file
from hpc_runner.errors import ConfigError


def test_yaml_ids_keep_their_line_numbers(tmp_path: Path) -> None:
    f = tmp_path / "train.yaml"
    f.write_text("a: 1\nnet:\n  channels: [8, 16]\n  strides:\n    - 2\n    - 2\n")
    loaded = load_file(f)
    assert loaded.data == {"a": 1, "net": {"channels": [8, 16], "strides": [2, 2]}}
    assert loaded.lines["net::channels"] == 3
    assert loaded.lines["net::strides::1"] == 6
    assert loaded.where("net#channels") == f"{f}:3"


def test_json_ids_keep_their_line_numbers(tmp_path: Path) -> None:
    f = tmp_path / "train.json"
    f.write_text('{\n  "a": 1,\n  "net": {\n    "channels": [8, 16]\n  }\n}\n')
    assert load_file(f).lines["net::channels"] == 4


def test_yaml_file_values_follow_monai_s_yaml_1_1_loader(tmp_path: Path) -> None:
    # MONAI reads bundles with yaml.safe_load: `1e-4` stays a string there, so it must here too
    f = tmp_path / "c.yaml"
    f.write_text("lr: 1e-4\nflag: yes\n")
    assert load_file(f).data == {"lr": "1e-4", "flag": True}


def test_yaml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("a: 1\nb: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError) as err:
        load_file(f)
    assert f"{f}:3:" in str(err.value)
    assert "YAML syntax error" in str(err.value)


def test_json_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(ConfigError) as err:
        load_file(f)
    assert f"{f}:2:" in str(err.value)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_file(tmp_path / "nope.yaml")
    assert "nope.yaml" in str(err.value) and "not found" in str(err.value)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    f = tmp_path / "list.yaml"
    f.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="top level"):
        load_file(f)


def test_unknown_suffix_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text("a = 1\n")
    with pytest.raises(ConfigError, match=r"\.json, \.yaml or \.yml"):
        load_file(f)


def _nested_json(levels: int) -> str:
    return '{"a": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def test_nesting_up_to_the_limit_loads_and_one_more_level_is_refused(tmp_path: Path) -> None:
    from hpc_runner.records.shape import MAX_DEPTH

    for suffix in (".json", ".yaml"):
        ok, deep = tmp_path / f"ok{suffix}", tmp_path / f"deep{suffix}"
        ok.write_text(_nested_json(MAX_DEPTH))
        deep.write_text(_nested_json(MAX_DEPTH + 1))
        value = load_file(ok).data["a"]
        for _ in range(MAX_DEPTH - 2):
            value = value[0]
        assert value == []
        with pytest.raises(ConfigError, match=f"more than {MAX_DEPTH} levels deep") as err:
            load_file(deep)
        assert err.value.where == f"{deep}:1"


def test_brackets_inside_json_strings_do_not_count_as_nesting(tmp_path: Path) -> None:
    f = tmp_path / "train.json"
    f.write_text('{"expr": "' + "[" * 500 + '", "esc": "\\"[[[[", "b": [1]}')
    assert load_file(f).data["b"] == [1]


def test_an_alias_counts_the_depth_of_the_node_it_repeats(tmp_path: Path) -> None:
    from hpc_runner.records.shape import MAX_DEPTH

    f = tmp_path / "train.yaml"
    half = MAX_DEPTH // 2 + 1
    f.write_text("a: &deep " + "[" * half + "]" * half + "\nb: " + "[" * half + "*deep" + "]" * half + "\n")
    with pytest.raises(ConfigError, match="once alias \\*deep \\(anchor &deep at line 1\\) is expanded") as err:
        load_file(f)
    assert err.value.where == f"{f}:2"


def test_aliases_may_add_up_to_the_limit_and_plain_content_is_not_counted(tmp_path: Path) -> None:
    from hpc_runner.records.shape import MAX_ALIAS_NODES

    f = tmp_path / "train.yaml"
    # an anchor of 1,000 nodes (the list and 999 items), repeated MAX_ALIAS_NODES / 1,000 times
    repeats = MAX_ALIAS_NODES // 1000
    f.write_text("a: &a [" + ",".join(["1"] * 999) + "]\nb: [" + ",".join(["*a"] * repeats) + "]\n"
                 "plain: [" + ",".join(["2"] * 150_000) + "]\n")
    data = load_file(f).data
    assert len(data["b"]) == repeats and data["b"][0] is data["a"]  # aliases share one object, as in MONAI
    f.write_text(f.read_text().replace("b: [*a", "b: [*a,*a"))
    with pytest.raises(ConfigError, match="alias \\*a \\(anchor &a at line 1 stands for 1,000 nodes\\)"):
        load_file(f)


def test_empty_yaml_and_json_files_are_refused(tmp_path: Path) -> None:
    for name, text in (("e.yaml", "# only a comment\n"), ("e.json", ""), ("n.json", "null")):
        (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match="the file is empty") as err:
            load_file(tmp_path / name)
        assert err.value.where == str(tmp_path / name)
    (tmp_path / "set_nothing.yaml").write_text("{}\n")
    assert load_file(tmp_path / "set_nothing.yaml").data == {}


DUPLICATES = {
    "dup.json": '{\n  "a": 1,\n  "b": {"c": 1, "c": 2},\n  "a": 3\n}\n',
    "dup.yaml": "a: 1\nb:\n  1: x\n  true: y\n  '1': z\na: 2\n",  # 1 and true are one key to MONAI, '1' another
}


@pytest.mark.parametrize("name", sorted(DUPLICATES))
def test_duplicate_keys_warn_and_the_last_wins_exactly_as_monai_loads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from monai.bundle import ConfigParser

    monkeypatch.delenv("MONAI_FAIL_ON_DUPLICATE_CONFIG", raising=False)
    f = tmp_path / name
    f.write_text(DUPLICATES[name])
    with pytest.warns(UserWarning) as monai_warned:
        expected = ConfigParser.load_config_file(f)
    with pytest.warns(UserWarning) as ours_warned:
        loaded = load_file(f)
    assert loaded.data == expected
    monai_keys = sorted(str(w.message) for w in monai_warned if "Duplicate key" in str(w.message))
    ours = [str(w.message) for w in ours_warned if "Duplicate key" in str(w.message)]
    assert sorted(m[m.index("Duplicate key"):].split(" (")[0] for m in ours) == monai_keys
    assert all(m.startswith(f"{f}:") for m in ours)  # and where


@pytest.mark.parametrize("name", sorted(DUPLICATES))
def test_duplicate_keys_are_refused_naming_file_and_line_when_monai_would_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    from monai.bundle import ConfigParser

    monkeypatch.setenv("MONAI_FAIL_ON_DUPLICATE_CONFIG", "1")
    f = tmp_path / name
    f.write_text(DUPLICATES[name])
    with pytest.raises(ValueError, match="Duplicate key"):
        ConfigParser.load_config_file(f)
    with pytest.raises(ConfigError, match="Duplicate key") as err:
        load_file(f)
    assert f"{f}:" in str(err.value) and "MONAI_FAIL_ON_DUPLICATE_CONFIG=1" in str(err.value)


def test_keys_monai_tells_apart_are_not_duplicates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONAI_FAIL_ON_DUPLICATE_CONFIG", "1")
    f = tmp_path / "c.yaml"
    f.write_text("a#b: 1\na::b: 2\n'1': x\n1: y\nlist:\n  - {k: 1}\n  - {k: 2}\n")
    assert load_file(f).data["a::b"] == 2  # `#` and `::` spellings are two keys of the file, as in MONAI


def test_an_args_file_with_a_duplicate_key_follows_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpc_runner.config.overrides import load_args_file

    f = tmp_path / "args.yaml"
    f.write_text("lr: 1\nlr: 2\n")
    monkeypatch.setenv("MONAI_FAIL_ON_DUPLICATE_CONFIG", "1")
    with pytest.raises(ConfigError, match=f"{f}:2: Duplicate key: `lr`"):
        load_args_file(f)
    monkeypatch.setenv("MONAI_FAIL_ON_DUPLICATE_CONFIG", "0")
    with pytest.warns(UserWarning, match="Duplicate key: `lr`"):
        overrides, _ = load_args_file(f)
    assert [o.value for o in overrides] == [2]


def test_a_macro_file_may_hold_any_value_as_in_monai(tmp_path: Path) -> None:
    from hpc_runner.config.references import load_macro_file

    (tmp_path / "name.JSON").write_text('"Dataset"')
    (tmp_path / "list.yaml").write_text("- 1\n- two\n")
    assert load_macro_file(str(tmp_path / "name.JSON")) == "Dataset"
    assert load_macro_file(str(tmp_path / "list.yaml")) == [1, "two"]
    with pytest.raises(ConfigError, match="the top level is a str"):
        load_file(tmp_path / "name.JSON")  # a config file itself must still be a mapping
