"""Issue 47 (c): where SLURM requires an association for each job (AccountingStorageEnforce includes associations,
or limits/qos/safe, which imply it) and the user's accounts leave the choice open (several, or no default),
`cluster init` says so (a comment in the profile and one line) and a dry run whose jobs name no account prints one
note. With fake scontrol/sacctmgr/sinfo on PATH (no SLURM is started)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for
from hpc_runner.scheduler.slurm import cluster_info
from hpc_runner.scheduler.slurm.accounts import Accounts, init_note, requires_association

ROOT = Path(__file__).resolve().parents[2]
SINFO = b"small*|up|1-00:00:00|2|8|32000|gpu:2\n"
ENFORCING = b"MaxArraySize = 1001\nClusterName = c1\nAccountingStorageEnforce = associations,limits\n"
NOT_ENFORCING = b"MaxArraySize = 1001\nClusterName = c1\nAccountingStorageEnforce = none\n"
TWO_ACCOUNTS = b"u|proj1|proj1||normal|normal||\nu|proj1|proj2||normal|normal||\n"
NO_DEFAULT = b"u||proj2||normal|normal||\n"
ONE_DEFAULT = b"u|proj1|proj1||normal|normal||\n"


@pytest.fixture
def fake(tmp_path: Path):
    """``fake(command, stdout_bytes, status=0)``: ``command`` on PATH prints those bytes; returns the env to use."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR_", "SLURM_", "SBATCH_"))}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", HPCR_CLUSTER_PATH=str(tmp_path / "clusters"),
               HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(ROOT),
               SLURM_CONF=str(tmp_path / "slurm.conf"))  # the answers kept per config: this test's own

    def make(command: str, out: bytes, status: int = 0) -> dict[str, str]:
        data = bin_dir / f"{command}.out"
        data.write_bytes(out)
        script = bin_dir / command
        script.write_text(f"#!/bin/sh\ncat '{data}'\nexit {status}\n")
        script.chmod(0o755)
        return env

    return make


def _init(fake, tmp_path: Path, config: bytes, assoc: bytes) -> subprocess.CompletedProcess[str]:
    fake("sbatch", b"")
    fake("scontrol", config)
    fake("sinfo", SINFO)
    env = fake("sacctmgr", assoc)  # the association rows; the QOS question gets them too, and finds no QOS
    return subprocess.run([sys.executable, "-m", "hpc_runner", "cluster", "init", "mine"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_cluster_init_names_the_accounts_and_the_account_key_where_slurm_requires_one(fake, tmp_path) -> None:
    res = _init(fake, tmp_path, ENFORCING, TWO_ACCOUNTS)
    assert res.returncode == 0, res.stderr
    said = [line for line in res.stderr.splitlines() if "proj2" in line]
    assert len(said) == 1, res.stderr
    assert "proj1, proj2 (default proj1)" in said[0] and "`account:`" in said[0]
    assert "AccountingStorageEnforce=associations,limits" in said[0]
    text = (tmp_path / "clusters" / "mine.yaml").read_text()
    assert 'account: "proj1"' in text
    assert [line for line in text.splitlines() if line.startswith("# this SLURM requires")], text


@pytest.mark.parametrize(("config", "assoc"), [(NOT_ENFORCING, TWO_ACCOUNTS), (ENFORCING, ONE_DEFAULT)],
                         ids=["not-enforced", "one-default-account"])
def test_cluster_init_says_nothing_where_no_account_has_to_be_chosen(fake, tmp_path, config, assoc) -> None:
    res = _init(fake, tmp_path, config, assoc)
    assert res.returncode == 0, res.stderr
    assert "requires an association" not in res.stderr + (tmp_path / "clusters" / "mine.yaml").read_text()


def test_enforce_words_and_the_init_line_without_a_default_account() -> None:
    assert requires_association("associations") and requires_association("limits,safe")
    assert requires_association("qos") and not requires_association("none") and not requires_association("")
    line = init_note(Accounts(("proj2", "proj3"), None), "associations", "proj2")
    assert line is not None and "proj2, proj3 (no default account)" in line and "the first sacctmgr lists" in line
    assert init_note(Accounts(("proj1",), "proj1"), "associations", "proj1") is None


@pytest.fixture
def in_process(fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake commands for this process: PATH, SLURM_CONF and the cache of this test; scontrol asked afresh."""
    def make(config: bytes, assoc: bytes, status: int = 0) -> None:
        fake("scontrol", config)
        env = fake("sacctmgr", assoc, status)
        for key in ("PATH", "SLURM_CONF", "XDG_CACHE_HOME"):
            monkeypatch.setenv(key, env[key])
        monkeypatch.delenv("SBATCH_ACCOUNT", raising=False)
        monkeypatch.setattr(cluster_info, "_CACHE", {})

    return make


def _notes(**settings: object) -> list[str]:
    return executor_for(ClusterProfile("s", [], {"executor": "slurm", **settings})).submission_notes()


def test_a_dry_run_without_an_account_notes_the_users_accounts_and_how_to_name_one(in_process) -> None:
    in_process(ENFORCING, TWO_ACCOUNTS)
    notes = _notes()
    assert len(notes) == 1, notes
    assert "default account proj1" in notes[0] and "proj1, proj2" in notes[0]
    assert "`account: proj1`" in notes[0] and "--scheduler-option account=proj1" in notes[0]
    assert _notes(account="proj2") == []  # named in the profile or by --scheduler-option: nothing to say
    assert _notes(sbatch={"account": "proj2"}) == []  # or among the profile's extra sbatch options
    in_process(ENFORCING, b"", status=1)  # sacctmgr now fails: its answer of a moment ago is used (limits_cache.py)
    assert len(_notes()) == 1


def test_a_dry_run_notes_that_sbatch_refuses_a_job_without_an_account_when_there_is_no_default(in_process) -> None:
    in_process(ENFORCING, NO_DEFAULT)
    notes = _notes()
    assert len(notes) == 1 and "sbatch refuses a job that names none" in notes[0] and "proj2" in notes[0], notes


@pytest.mark.parametrize(("config", "assoc"), [(NOT_ENFORCING, TWO_ACCOUNTS), (ENFORCING, ONE_DEFAULT)],
                         ids=["not-enforced", "one-default-account"])
def test_no_note_where_the_account_is_not_open(in_process, config: bytes, assoc: bytes) -> None:
    in_process(config, assoc)
    assert _notes() == []


def test_the_in_memory_cluster_has_no_notes(make_cluster) -> None:
    make_cluster()
    assert executor_for(ClusterProfile("mem", [], {"executor": "memory", "time": 10})).submission_notes() == []
