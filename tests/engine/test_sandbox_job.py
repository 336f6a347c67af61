"""Jobs of `submit --safe` and `sweep --safe` run in the sandbox (engine/sandbox_job.py): the decisions as plain
functions, and the mark (records/safe_mark.py) that keeps a run safe whatever its writable record says. The
real jobs are in tests/engine/test_sandbox.py (here and on the local SLURM)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from hpc_runner.engine.sandbox import Grants, Needs, bind_plan, bwrap_argv
from hpc_runner.engine.sandbox_job import OUTCOME_FILE, job_plan, read_outcome, recorded_safe
from hpc_runner.records.safe_mark import SAFE_MARK, read_mark, write_mark


def test_protected_paths_are_bound_read_only_over_the_writable_run_dir(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "jobs").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    needs = Needs(run_dir=str(link), cwd="/", home="/nohome", writable=(str(link),),
                  protected=(str(link / SAFE_MARK), str(link / "jobs")))
    plan = bind_plan(needs)
    binds = [p for o, p in plan if o == "--bind"]
    ro = [p for o, p in plan if o == "--ro-bind"]
    # both the link and its real place: the mark is not writable through either
    assert sorted(binds) == [str(link), str(real)]
    assert sorted(ro) == sorted(str(p / name) for p in (link, real) for name in (SAFE_MARK, "jobs"))
    last_bind = max(i for i, (o, _) in enumerate(plan) if o == "--bind")
    assert all(i > last_bind for i, (o, _) in enumerate(plan) if o == "--ro-bind")  # mounted over the run dir
    argv = bwrap_argv("bwrap", needs, ["true"])
    i = argv.index(str(real / "jobs"))
    assert argv[i - 1] == "--ro-bind" and argv[i + 1] in (str(real / "jobs"), str(link / "jobs"))


def test_the_job_writes_and_reads_only_its_run_dir_and_its_grants_never_what_its_config_says(tmp_path: Path) -> None:
    plan = job_plan(str(tmp_path / "run"), Grants(("/scratch/cache",), ("/scratch/data",)), str(tmp_path / "bundle"))
    assert plan.writable == (str(tmp_path / "run"), "/scratch/cache")  # the config's cache_dir is not writable
    assert plan.readable == (str(tmp_path / "bundle"), "/scratch/data")  # nor its paths readable


def test_a_run_with_a_mark_is_safe_whatever_its_record_says(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.yaml").write_text(yaml.safe_dump({"safe": False}))  # rewritten from inside by the bundle
    assert not recorded_safe(run)
    write_mark(run, [str(tmp_path / "data"), str(run)])
    assert recorded_safe(run) and read_mark(run) == [str(tmp_path / "data")]  # the run dir itself is implicit
    (run / SAFE_MARK).write_text("\0garbage")  # damaged outside: still safe, nothing extra writable
    assert recorded_safe(run) and read_mark(run) == []


def test_how_the_run_inside_ended_is_read_back_and_nothing_said_is_a_failure(tmp_path: Path) -> None:
    silent = read_outcome(tmp_path, 137)
    assert silent.status == "failed" and "exit code 137 and said nothing" in silent.error.described
    (tmp_path / OUTCOME_FILE).write_text('{"status": "preempted", "reason": "SIGUSR2", "checkpoint": "c/ckpt_3.pt"}')
    stopped = read_outcome(tmp_path, 0)
    assert (stopped.status, stopped.error.reason, stopped.error.checkpoint) == ("preempted", "SIGUSR2", "c/ckpt_3.pt")
    assert not (tmp_path / OUTCOME_FILE).exists()  # read once
    (tmp_path / OUTCOME_FILE).write_text('{"status": "rm -rf", "epoch": true}')
    odd = read_outcome(tmp_path, 0)
    assert odd.status == "failed" and odd.error.epoch == 0
    (tmp_path / OUTCOME_FILE).write_text("[[[[")
    assert read_outcome(tmp_path, 0).status == "failed"


def test_resuming_a_marked_run_without_safe_goes_into_the_sandbox(tmp_path: Path, cli) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_mark(run)
    res = cli("run", "--resume", str(run), cwd=tmp_path, env={"HPCR_BWRAP": str(tmp_path / "no-bwrap")})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "made with --safe: it goes on inside the sandbox" in res.stderr and "no weaker mode" in res.stderr


@pytest.mark.parametrize("command", [
    ["tune", "--space", "learning_rate=loguniform(1e-4,1e-2)", "--trials", "2", "--metric", "val_dice", "--safe"],
    ["submit", "--writable", "/tmp"],
])
def test_what_the_sandbox_cannot_keep_is_refused_before_anything_is_queued(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from hpc_runner.cli import main

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    example = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"
    code = main([*command, "--bundle", str(example), "--cluster", "local", "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert ("tune --safe is refused" in err) if command[0] == "tune" else ("--writable and --readable name what" in err)
    assert not (tmp_path / "out").exists() and os.listdir(tmp_path) in ([], ["xdg"])


@pytest.mark.parametrize("link", ["checkpoints", "log.txt", "checkpoints/ckpt_1.pt"])
def test_a_run_dir_holding_a_link_where_we_write_is_refused(link: str, tmp_path: Path) -> None:
    from hpc_runner.errors import UserError
    from hpc_runner.records.rundir import RunDir

    victim = tmp_path / "home" / ".ssh"
    victim.mkdir(parents=True)
    run = tmp_path / "shared" / "points" / "0003"
    (run / "checkpoints").mkdir(parents=True)
    if link == "checkpoints":
        (run / "checkpoints").rmdir()
    (run / link).symlink_to(victim if link == "checkpoints" else victim / "authorized_keys")
    with pytest.raises(UserError, match="holds a symbolic link") as err:
        RunDir(run).create()
    assert str(run / link) in str(err.value) and list(victim.iterdir()) == []
