"""A mistyped hpc-runner option is refused before anything is queued, never taken for a config override."""

from __future__ import annotations

from pathlib import Path

from hpc_runner.cli import build_parser
from hpc_runner.config.argv import near_option, option_typos

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


def test_a_key_close_to_an_option_of_the_command_is_named_as_that_option() -> None:
    _, commands = build_parser()
    submit = commands["submit"]
    assert near_option(submit, "--clsuter") == "--cluster"
    assert near_option(submit, "--dryrun") == "--dry-run" and near_option(submit, "--dry_run") == "--dry-run"
    assert near_option(submit, "--optimizer::lr") is None and near_option(submit, "--max_epochs") is None
    assert option_typos(submit, ["--clsuter", "jade", "--+clustr", "1", "--lr", "0.1"]) == {"clsuter": "--cluster"}


def test_submit_with_a_mistyped_cluster_option_exits_2_naming_the_option_and_writes_nothing(cli, tmp_path) -> None:
    res = cli("submit", "--bundle", BUNDLE, "--clsuter", "jade", "--dry-run", "--output_dir", "out", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--clsuter is not an option of hpc-runner submit (did you mean --cluster?)" in res.stderr, res.stderr
    assert "#SBATCH" not in res.stdout and not (tmp_path / "out").exists()


def test_an_unknown_key_never_takes_the_commands_next_option_as_its_value(cli, tmp_path) -> None:
    res = cli("sweep", "--bundle", BUNDLE, "--sweep", "seed=1,2", "--dryrun", "--no-preflight", "--output_dir", "sw",
              cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--dryrun is not an option of hpc-runner sweep (did you mean --dry-run?)" in res.stderr, res.stderr
    assert "--no-preflight" in res.stderr and not (tmp_path / "sw").exists()
