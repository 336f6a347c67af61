"""A record is read with the same bounds as a config: an alias bomb or a 50,000-level nesting is bad input, fast."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpc_runner.records.read import RecordError, parse_yaml_record

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))


def test_an_alias_bomb_in_a_record_is_refused_before_it_expands(tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(RecordError) as err:
        parse_yaml_record(BOMB, tmp_path / "sweep.yaml", "sweep record")
    assert "alias bomb" in err.value.paragraph() and "sweep.yaml" in err.value.paragraph()
    assert time.monotonic() - t0 < 5


def test_a_record_nested_50000_levels_is_refused_without_a_crash(tmp_path: Path) -> None:
    with pytest.raises(RecordError) as err:
        parse_yaml_record("a: " + "[" * 50_000 + "]" * 50_000 + "\n", tmp_path / "run.yaml", "run record")
    assert "levels deep" in err.value.paragraph()


def test_a_plain_record_with_a_repeated_node_still_loads(tmp_path: Path) -> None:
    assert parse_yaml_record("a: &x {k: 1}\nb: *x\n", tmp_path / "r.yaml") == {"a": {"k": 1}, "b": {"k": 1}}


def test_status_of_a_sweep_folder_whose_record_is_an_alias_bomb_exits_2_naming_it(tmp_path: Path) -> None:
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "sweep.yaml").write_text("kind: hpc-runner-sweep\n" + BOMB)
    res = subprocess.run([sys.executable, "-m", "hpc_runner", "status", str(sweep)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "sweep.yaml" in res.stderr and "Traceback" not in res.stderr


def test_only_a_record_that_is_plainly_shallow_skips_the_pass_over_its_events() -> None:
    from hpc_runner.records.shape import MAX_DEPTH, plainly_shallow

    assert plainly_shallow("status: completed\nrun:\n  attempts: 1\n  tags: [a, b]\nerrors:\n- x: 1\n")
    assert not plainly_shallow("a: &x {k: 1}\nb: *x\n")  # an anchor: the events are checked
    assert not plainly_shallow("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert not plainly_shallow("a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH // 2)))
    assert not plainly_shallow("- " * (MAX_DEPTH + 1) + "x\n")  # compact nesting on one line


def test_a_record_nested_past_the_bound_without_brackets_is_refused_naming_its_depth(tmp_path: Path) -> None:
    deep = "".join(" " * i + f"k{i}:\n" for i in range(150)) + " " * 150 + "v\n"
    with pytest.raises(RecordError) as err:
        parse_yaml_record(deep, tmp_path / "run.yaml", "run record")
    assert "levels deep" in err.value.paragraph()


@pytest.mark.parametrize("text, culprit", [
    ("entry: .nan\nstatus: completed\n", "'entry' is a float"),
    ("entry: run\nbundle: [1, 2]\n", "'bundle' is a list"),
    (".nan: x\nentry: run\n", "key nan (float)"),
    ("entry: run\nbundle: {1: x}\n", "bundle: key 1 (int)"),
])
def test_a_run_record_whose_fields_are_not_as_written_is_refused_where_it_is_read(tmp_path: Path, text: str,
                                                                                  culprit: str) -> None:
    from hpc_runner.records.rundir import RunDir

    (tmp_path / "run.yaml").write_text(text)
    with pytest.raises(RecordError) as err:
        RunDir(tmp_path).record()
    assert culprit in err.value.paragraph() and str(tmp_path / "run.yaml") in err.value.paragraph()
    with pytest.raises(RecordError):
        RunDir(tmp_path).read_yaml("run.yaml")  # the report's reader too


def test_resume_and_report_of_a_run_record_with_a_nan_entry_exit_2_naming_it(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text("entry: .nan\nstatus: completed\n")
    (run / "config.yaml").write_text("run: 1\n")
    for argv in (["run", "--bundle", "bundles/synthetic_seg", "--resume", str(run)], ["report", str(run)]):
        res = subprocess.run([sys.executable, "-m", "hpc_runner", *argv], capture_output=True, text=True, timeout=60,
                             cwd=Path(__file__).resolve().parents[2])
        assert "Traceback" not in res.stderr, res.stderr
        if argv[0] == "run":
            assert res.returncode == 2 and "'entry' is a float" in res.stderr and str(run / "run.yaml") in res.stderr
        else:  # a report is made of what can be read: the damaged record counts as none
            assert res.returncode == 0, res.stderr


def test_a_recorded_config_with_a_key_that_is_not_text_is_refused_naming_it(tmp_path: Path) -> None:
    from hpc_runner.config.recorded import load_recorded_config
    from hpc_runner.errors import ConfigError

    (tmp_path / "run.yaml").write_text("entry: run\n")
    (tmp_path / "config.yaml").write_text("run: 1\ntrainer:\n  .nan: 2\n")
    with pytest.raises(ConfigError) as err:
        load_recorded_config(tmp_path)
    assert "trainer: key nan (float)" in err.value.paragraph() and "config.yaml" in err.value.paragraph()


@pytest.mark.parametrize("number", ["9" * 5000, "0x" + "f" * 5000, "1." + "5" * 5000])
def test_a_record_holding_a_number_too_long_to_read_is_refused_naming_its_line(tmp_path: Path, number: str) -> None:
    """An int of over 4,300 digits is the parser's ValueError; one in hex reads, then cannot be printed."""
    with pytest.raises(RecordError) as err:
        parse_yaml_record(f"entry: run\nstatus: {number}\n", tmp_path / "run.yaml", "run record")
    assert f"{tmp_path / 'run.yaml'}:2:" in err.value.paragraph()
    assert "is too long to read" in err.value.paragraph() and "at most 1,000 digits" in err.value.paragraph()


def test_a_json_record_holding_a_number_too_long_to_read_is_refused_naming_its_line(tmp_path: Path) -> None:
    from hpc_runner.records.read import parse_json_text

    with pytest.raises(RecordError) as err:
        parse_json_text('{"a": 1,\n "b": ' + "9" * 5000 + "}", tmp_path / "summary.json", "summary")
    assert f"{tmp_path / 'summary.json'}:2:" in err.value.paragraph() and "too long to read" in err.value.paragraph()
    assert parse_json_text('{"a": "' + "9" * 5000 + '"}', tmp_path / "s.json") == {"a": "9" * 5000}  # a string
