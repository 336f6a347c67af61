"""Bad input through the real CLI: exit 2, one paragraph naming the culprit, no traceback, nothing left behind."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")
DEEP = 50_000


def _folder(root: Path) -> set[str]:
    """Every path below ``root``, relative: the inputs a test wrote, plus whatever the command left."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _refused(res: subprocess.CompletedProcess, *culprits: str) -> str:
    """Assert the command exited 2 with one paragraph naming each culprit; return that paragraph."""
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, res.stderr
    for culprit in culprits:
        assert culprit in errors[0], errors[0]
    return errors[0]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """An empty working dir for the command, so anything it makes is seen."""
    d = tmp_path / "work"
    d.mkdir()
    return d


# ---------------------------------------------------------------- empty files


@pytest.mark.parametrize(
    ("name", "text"),
    [("empty.yaml", ""), ("comments.yaml", "# nothing set yet\n\n"), ("null.yaml", "null\n"),
     ("empty.json", ""), ("blank.json", "  \n"), ("null.json", "null")],
)
def test_an_empty_config_file_is_refused_naming_it(cli, workdir: Path, name: str, text: str) -> None:
    (workdir / name).write_text(text)
    before = _folder(workdir)
    for command in ("config", "run"):
        res = cli(command, "--config_file", name, cwd=workdir)
        _refused(res, f"{name}: the file is empty")
    assert _folder(workdir) == before


def test_an_empty_config_file_merged_after_a_good_one_is_refused_too(cli, workdir: Path) -> None:
    (workdir / "base.yaml").write_text("a: 1\n")
    (workdir / "extra.yaml").write_text("# TODO\n")
    _refused(cli("config", "--config_file", "base.yaml,extra.yaml", cwd=workdir), "extra.yaml: the file is empty")


def test_an_empty_metadata_file_is_refused_naming_it(cli, workdir: Path) -> None:
    (workdir / "train.yaml").write_text("a: 1\n")
    (workdir / "metadata.json").write_text("")
    _refused(cli("config", "--config_file", "train.yaml", "--meta_file", "metadata.json", cwd=workdir),
             "metadata.json: the file is empty")


def test_an_empty_args_file_is_allowed_it_just_overrides_nothing(cli, workdir: Path) -> None:
    (workdir / "train.yaml").write_text("a: 1\n")
    (workdir / "args.yaml").write_text("# no overrides today\n")
    res = cli("config", "--config_file", "train.yaml", "--args_file", "args.yaml", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert "a: 1" in res.stdout


# ---------------------------------------------------------------- --output_dir is a file


@pytest.mark.parametrize(
    ("command", "what"),
    [(["run", "training"], "the run dir"),
     (["submit", "training", "--cluster", "local"], "the run dir"),
     (["sweep", "training", "--cluster", "local", "--sweep", "seed=1,2"], "the sweep dir")],
)
def test_output_dir_naming_an_existing_file_is_refused_before_anything_is_made(
    cli, workdir: Path, command: list[str], what: str
) -> None:
    (workdir / "notes.txt").write_text("my notes\n")
    before = _folder(workdir)
    res = cli(*command, "--bundle", BUNDLE, "--output_dir", "notes.txt", "--max_epochs", "1", cwd=workdir)
    _refused(res, f"{what} notes.txt names an existing file, not a folder", "Expected --output_dir naming a folder")
    assert _folder(workdir) == before
    assert (workdir / "notes.txt").read_text() == "my notes\n"


def test_output_dir_below_an_existing_file_is_refused(cli, workdir: Path) -> None:
    (workdir / "notes.txt").write_text("my notes\n")
    before = _folder(workdir)
    res = cli("run", "training", "--bundle", BUNDLE, "--output_dir", "notes.txt/run1", cwd=workdir)
    _refused(res, "the run dir notes.txt/run1 would be made inside notes.txt, which is an existing file")
    assert _folder(workdir) == before


# ---------------------------------------------------------------- deep nesting


@pytest.mark.parametrize(
    ("name", "text"),
    [("deep.json", '{"a": ' + "[" * DEEP + "]" * DEEP + "}"),
     ("deep.yaml", "a: " + "[" * DEEP + "]" * DEEP + "\n"),
     ("deep_block.yaml", "".join(" " * i + "k:\n" for i in range(2000)) + " " * 2000 + "k: 1\n")],
)
def test_a_file_nested_50000_levels_deep_is_refused_naming_file_and_line(
    cli, workdir: Path, name: str, text: str
) -> None:
    (workdir / name).write_text(text)
    before = _folder(workdir)
    line = 101 if name == "deep_block.yaml" else 1
    for command in ("config", "run"):
        res = cli(command, "--config_file", name, cwd=workdir, timeout=60)
        _refused(res, f"{name}:{line}: the file nests lists and mappings more than 100 levels deep")
    assert _folder(workdir) == before


# ---------------------------------------------------------------- YAML aliases


def _alias_bomb() -> str:
    """The classic 'billion laughs': 9 levels of 9 aliases, 9**9 = 387,420,489 strings once expanded."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


# A small launcher runs the command and reports its child's peak memory: measured from pytest itself,
# the child's peak would include the pages it shared with pytest before exec (hundreds of MB once torch
# is imported), as Linux keeps the high-water mark across fork and exec.
_LAUNCHER = """
import resource, subprocess, sys, time
start = time.monotonic()
res = subprocess.run(sys.argv[2:], capture_output=True, text=True, timeout=float(sys.argv[1]))
wall = time.monotonic() - start
sys.stdout.write(res.stderr)
print(f"\\n@@ {res.returncode} {wall} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
"""


def _run_measured(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, float, int]:
    """Run ``args``; return exit code, stderr, wall seconds and the command's own max RSS in bytes."""
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, str(timeout), *args], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=timeout + 20)
    assert out.returncode == 0, out.stderr  # the launcher's TimeoutExpired says the command hung
    stderr, _, figures = out.stdout.rpartition("\n@@ ")
    code, wall, rss_kib = figures.split()
    return int(code), stderr, float(wall), int(rss_kib) * 1024  # Linux reports KiB


@pytest.mark.parametrize("command", ["config", "run"])
def test_a_yaml_alias_bomb_is_refused_in_under_5_s_with_bounded_memory(cli, workdir: Path, command: str) -> None:
    (workdir / "bomb.yaml").write_text(_alias_bomb())
    before = _folder(workdir)
    code, stderr, wall, rss = _run_measured(
        [sys.executable, "-m", "hpc_runner", command, "--config_file", "bomb.yaml"], workdir, cli.env, timeout=10
    )
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert "bomb.yaml:6: alias *e (anchor &e at line 5" in stderr and "more than 100,000" in stderr
    assert wall < 5, f"took {wall:.1f} s"
    assert rss < 100 * 2**20, f"max RSS {rss / 2**20:.0f} MB"
    assert _folder(workdir) == before


def test_an_alias_inside_its_own_anchor_is_refused_as_a_cycle(cli, workdir: Path) -> None:
    (workdir / "cycle.yaml").write_text("a: 1\nnet: &net\n  layers: [1, *net]\n")
    _refused(cli("config", "--config_file", "cycle.yaml", cwd=workdir),
             "cycle.yaml:3: alias *net is inside the node it refers to (anchor &net at line 2)")


def test_small_aliases_still_work_as_in_monai(cli, workdir: Path) -> None:
    (workdir / "train.yaml").write_text("base: &b {x: 1, y: [1, 2]}\ncopy: *b\nmerged:\n  <<: *b\n  z: 3\n")
    res = cli("config", "--config_file", "train.yaml", "--format", "json", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert '"merged": {\n    "x": 1,\n    "y": [\n      1,\n      2\n    ],\n    "z": 3' in res.stdout


# ---------------------------------------------------------------- sweep files


def test_a_sweep_file_with_an_unknown_top_level_key_is_refused_naming_it(cli, workdir: Path) -> None:
    (workdir / "lr.yaml").write_text("grid:\n  seed: [1, 2]\ngird:\n  learning_rate: [1e-3, 1e-4]\n")
    before = _folder(workdir)
    res = cli("sweep", "--bundle", BUNDLE, "--cluster", "local", "--sweep-file", "lr.yaml", "--output_dir", "sw",
              cwd=workdir)
    _refused(res, "lr.yaml:3: unknown key 'gird': a sweep file is a mapping with grid:, zip: and/or points:",
             "Did you mean 'grid:'?")
    assert _folder(workdir) == before


def test_a_sweep_file_alias_bomb_is_refused(cli, workdir: Path) -> None:
    (workdir / "bomb.yaml").write_text(_alias_bomb().replace("a: &a", "grid:\n  seed: [1]\nx: &a"))
    res = cli("sweep", "--bundle", BUNDLE, "--cluster", "local", "--sweep-file", "bomb.yaml", cwd=workdir, timeout=10)
    _refused(res, "bomb.yaml:", "more than 100,000")


# ---------------------------------------------------------------- the same through args files and overrides


@pytest.mark.parametrize("kind", ["deep", "bomb"])
def test_an_args_file_nested_too_deep_or_an_alias_bomb_is_refused_naming_it(cli, workdir: Path, kind: str) -> None:
    text = "num_train: " + "[" * DEEP + "]" * DEEP + "\n" if kind == "deep" else _alias_bomb()
    (workdir / "args.yaml").write_text(text)
    before = _folder(workdir)
    res = cli("config", "--bundle", BUNDLE, "--args_file", "args.yaml", cwd=workdir, timeout=30)
    _refused(res, "args.yaml:", "more than 100" if kind == "deep" else "more than 100,000")
    assert _folder(workdir) == before


@pytest.mark.parametrize("source", ["cli", "env"])
def test_an_override_value_nested_50000_levels_deep_is_refused_naming_it(cli, workdir: Path, source: str) -> None:
    value = "[" * DEEP + "]" * DEEP
    if source == "cli":
        res = cli("config", "--bundle", BUNDLE, "--num_train", value, cwd=workdir, timeout=30)
    else:
        res = cli("config", "--bundle", BUNDLE, cwd=workdir, timeout=30, env={"HPCR__num_train": value})
    _refused(res, "num_train", "more than 100 levels deep")


# ---------------------------------------------------------------- numbers too long to read


@pytest.mark.parametrize(
    ("name", "text"),
    [("long.yaml", "9" * 5000), ("hex.yaml", "a: 0x" + "f" * 5000 + "\n"), ("long.json", '{"a": ' + "9" * 5000 + "}")],
)
def test_a_number_too_long_to_read_in_a_config_metadata_or_args_file_is_refused_naming_it(
    cli, workdir: Path, name: str, text: str
) -> None:
    """Python refuses an int of over 4,300 digits (the parser's ValueError) and reads one in hex that it then
    cannot print: either is one paragraph naming the file, never a traceback."""
    (workdir / name).write_text(text)
    for option in ("--config_file", "--meta_file", "--args_file"):
        res = cli("config", "--bundle", BUNDLE, option, name, cwd=workdir)
        _refused(res, f"{name}:1: a number of", "is too long to read", "Expected numbers of at most 1,000 digits")


def test_a_long_string_of_digits_is_no_number_and_still_loads(cli, workdir: Path) -> None:
    (workdir / "train.yaml").write_text(f"a: '{'9' * 5000}'\nb: 1\n")
    res = cli("config", "--config_file", "train.yaml", "--format", "json", cwd=workdir)
    assert res.returncode == 0, res.stderr
    assert '"a": "' + "9" * 5000 + '"' in res.stdout


@pytest.mark.parametrize("value", ["9" * 5000, "0x" + "f" * 5000])
def test_an_override_value_too_long_a_number_is_refused_naming_it(cli, workdir: Path, value: str) -> None:
    _refused(cli("config", "--bundle", BUNDLE, "--num_train", value, cwd=workdir), "--num_train", "too long to read")


@pytest.mark.parametrize(("name", "text"), [("args.yaml", "null\n"), ("args.yaml", "~"), ("args.json", "null"),
                                            ("args.yaml", "[]"), ("args.yaml", "1"), ("args.yaml", '"x"')])
def test_an_args_file_that_holds_no_mapping_is_refused_naming_it(cli, workdir: Path, name: str, text: str) -> None:
    (workdir / name).write_text(text)
    before = _folder(workdir)
    for command in ("config", "run"):
        res = cli(command, "--bundle", BUNDLE, "--args_file", name, cwd=workdir)
        _refused(res, f"{name}: the args file holds", "not a mapping", "Expected a mapping of config ids to values")
    assert _folder(workdir) == before
