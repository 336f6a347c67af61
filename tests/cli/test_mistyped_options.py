"""A mistyped hpc-runner option is refused before anything is queued, never taken for a config override."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def test_a_mistyped_option_last_on_the_line_is_named_as_the_option_it_looks_like(cli, tmp_path) -> None:
    # 6ca9a4e: "override --dryrun has no value"
    res = cli("sweep", "--bundle", BUNDLE, "--sweep", "seed=1,2", "--cluster", "jade", "--dryrun", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "did you mean --dry-run?" in res.stderr and "has no value" not in res.stderr
    assert not (tmp_path / "runs").exists()


def test_a_mistyped_option_is_named_before_the_default_controller_is_asked(cli, tmp_path) -> None:
    # 6ca9a4e: "no --cluster was given and the default profile 'slurm' cannot submit from this machine"
    no_slurm = {"PATH": str(Path(cli.env["PATH"].split(":")[0])), "HPCR_CLUSTER": ""}
    res = cli("submit", "--bundle", BUNDLE, "--max_epochs", "1", "--clsuter", "jade", cwd=tmp_path, env=no_slurm)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "did you mean --cluster?" in res.stderr and "cannot submit from this machine" not in res.stderr


@pytest.mark.parametrize("spelling", [["--profile", "jade"], ["--profile=jade"]])
def test_profile_naming_a_cluster_profile_asks_whether_cluster_was_meant(cli, tmp_path, spelling) -> None:
    res = cli("submit", "--bundle", BUNDLE, *spelling, "--dry-run", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "did you mean --cluster jade?" in res.stderr and "#SBATCH" not in res.stdout


def test_the_profiler_option_is_torch_profile_and_profile_stays_its_alias() -> None:
    _, commands = build_parser()
    for command in ("run", "submit", "sweep", "tune"):
        for spelling in (["--torch-profile"], ["--profile"], ["--torch-profile-steps", "2"]):
            args = commands[command].parse_args([*spelling] + (["--trials", "1", "--metric", "m"]
                                                               if command == "tune" else []))
            assert args.profile or args.profile_steps == 2


def test_an_unknown_key_last_on_the_line_of_a_command_without_such_an_option_is_named_as_no_option(cli, tmp_path):
    # first hour, again (issue 47): `run ... --dryrun` said "override --dryrun has no value. Expected --dryrun VALUE"
    res = cli("run", "--bundle", BUNDLE, "--max_epochs", "1", "--dryrun", cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--dryrun is not an option of hpc-runner run" in res.stderr, res.stderr
    assert "Expected --dryrun VALUE or" not in res.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("where", ["last", "first"])
def test_run_with_a_mistyped_cluster_option_names_submits_cluster_option_and_runs_nothing(cli, tmp_path, where):
    # issue 47: `run training --bundle ... --clsuter local` said only "--clsuter names id 'clsuter', which the config
    # does not have"; --cluster is submit's option (run runs here), so the near-miss is named as that option
    typo = ["--clsuter", "local"]
    line = [*typo, "training", "--bundle", BUNDLE] if where == "first" else ["training", "--bundle", BUNDLE, *typo]
    res = cli("run", *line, cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--clsuter is not an option of hpc-runner run (did you mean --cluster? it is an option of hpc-runner " \
           "submit" in res.stderr, res.stderr
    assert "nothing was run or queued" in res.stderr and not (tmp_path / "runs").exists()
