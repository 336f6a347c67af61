"""A job environment that claims several processes with no peer, or a rank variable that is not a number,
through the real CLI: exit code 2, one paragraph, no run dir; the wait ends at the timeout or on a signal
(SIGINT: exit code 130, as any interrupted command). SLURM's variables left in a shell, with no slurmstepd
among the process's parents, wait a few seconds, not the full timeout.

Imports nothing from hpc_runner, so it runs (and fails) against code that predates the rendezvous module."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]



def run_cli(bundle: Path, out: Path, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpc_runner", "run", "--bundle", str(bundle), "--output_dir",
                           str(out)], cwd=out.parent, env=env, capture_output=True, text=True, timeout=timeout)


def _sigint_as_in_a_terminal() -> None:
    """SIGINT's default action in the rank, as for a command typed in a terminal: a suite started in the
    background (`cmd &` without job control) hands its children SIGINT ignored, and Python keeps that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def lone_rank_env(cli, **extra: str) -> dict:
    env = {k: v for k, v in cli.env.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "MASTER_"))}
    return {**env, **extra}


@pytest.mark.slow
def test_a_job_environment_claiming_two_tasks_without_a_peer_exits_2_after_the_timeout(tiny_bundle, tmp_path, cli):
    env = lone_rank_env(cli, SLURM_NTASKS="2", SLURM_PROCID="0", SLURM_STEP_ID="0", MASTER_PORT=str(free_port()),
                        HPCR_RENDEZVOUS_TIMEOUT="2")
    res = run_cli(tiny_bundle, tmp_path / "run", env)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "rank 0 of 2 gave up waiting for the other ranks" in res.stderr
    assert "SLURM_NTASKS=2 SLURM_PROCID=0 SLURM_STEP_ID=0" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists(), "a rank that never started leaves no run dir"


def start_reading(proc: subprocess.Popen) -> tuple[list[str], list[str], list[threading.Thread]]:
    """Drain the process's stdout and stderr as they come (a full pipe would block its exit)."""
    lines: list[str] = []
    errors: list[str] = []
    readers = [threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True),
               threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    return lines, errors, readers


def wait_for_rendezvous(proc: subprocess.Popen, lines: list[str]) -> None:
    """Return once the rank printed its rendezvous line (just before it waits), or ended."""
    deadline = time.monotonic() + 120
    while not any("rendezvous" in line for line in lines) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


STALE_SLURM = {"SLURM_NTASKS": "2", "SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "1"}


@pytest.mark.slow
def test_slurm_variables_left_in_a_shell_wait_seconds_not_minutes_and_say_what_to_do(tiny_bundle, tmp_path, cli):
    """No slurmstepd among its parents: no step's other task will come (issue 32: it waited past 20 s)."""
    env = lone_rank_env(cli, **STALE_SLURM, MASTER_PORT=str(free_port()))
    env.pop("HPCR_RENDEZVOUS_TIMEOUT", None)
    proc = subprocess.Popen([sys.executable, "-m", "hpc_runner", "run", "--bundle", str(tiny_bundle),
                             "--output_dir", str(tmp_path / "run")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines, errors, readers = start_reading(proc)
        wait_for_rendezvous(proc, lines)
        t0 = time.monotonic()
        proc.wait(timeout=60)
        waited = time.monotonic() - t0
        for reader in readers:
            reader.join(timeout=10)
        err = "".join(errors)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, err[-3000:]
    assert waited < 15, f"waited {waited:.1f} s for a rank that never comes"
    paragraph = err.strip().splitlines()[-1]
    assert "rank 0 of 2 gave up waiting for the other ranks" in paragraph and "no task of a SLURM step" in paragraph
    assert "slurmstepd" in paragraph and "SLURM_NTASKS=2 SLURM_PROCID=0 SLURM_STEP_ID=0" in paragraph
    assert "`unset SLURM_NTASKS SLURM_PROCID SLURM_STEP_ID`" in paragraph and "srun --ntasks=2" in paragraph
    assert "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "claims", "code"), [
    (signal.SIGINT, "slurm", 130),  # Ctrl-C: exit code 130, as any interrupted command
    (signal.SIGINT, "torchrun", 130),
    (signal.SIGTERM, "torchrun", 2),
])
def test_a_signal_ends_the_wait_for_a_missing_peer_at_once(tiny_bundle, tmp_path, cli, signum, claims, code):
    if claims == "slurm":  # left in a shell; the timeout set, so the wait outlasts the signal
        env = lone_rank_env(cli, **STALE_SLURM, MASTER_PORT=str(free_port()), HPCR_RENDEZVOUS_TIMEOUT="60")
    else:
        env = lone_rank_env(cli, RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.Popen([sys.executable, "-m", "hpc_runner", "run", "--bundle", str(tiny_bundle),
                             "--output_dir", str(tmp_path / "run")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_as_in_a_terminal)
    try:
        lines, errors, readers = start_reading(proc)
        wait_for_rendezvous(proc, lines)
        time.sleep(1.0)
        proc.send_signal(signum)
        t0 = time.monotonic()
        proc.wait(timeout=60)
        for reader in readers:
            reader.join(timeout=10)
        err = "".join(errors)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - t0 < 10
    assert proc.returncode == code, err[-3000:]
    assert "rank 0 of 2 gave up waiting" in err and signal.Signals(signum).name in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("variable", ["SLURM_NTASKS", pytest.param("LOCAL_RANK", marks=pytest.mark.slow)])
def test_a_rank_variable_that_is_not_an_integer_is_one_paragraph_naming_it(tiny_bundle, tmp_path, cli, variable):
    """SLURM_NTASKS decides the number of processes; LOCAL_RANK is read only when the Trainer is built."""
    env = lone_rank_env(cli, SLURM_PROCID="0", SLURM_STEP_ID="0", SLURM_NTASKS="2", LOCAL_RANK="0")
    env[variable] = "abc"
    res = run_cli(tiny_bundle, tmp_path / "run", env)
    assert res.returncode == 2, res.stderr[-3000:]
    assert f"{variable}='abc' is not an integer" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "run").exists()
