"""`run --safe` inside a bubblewrap sandbox (engine/sandbox.py, cli/sandbox_run.py): the decisions as plain
functions, then the real thing: the example trains inside, attacks fail with the allow-list switched off, a stop
signal still checkpoints, and without bwrap `--safe` is refused (docs/security.md)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from warm_python import WARM

from hpc_runner.config.sandbox_marks import INSIDE_ENV, STATIC_SWITCH, static_check_skipped
from hpc_runner.engine.sandbox import (
    Needs,
    bind_plan,
    bwrap_argv,
    hidden_folders,
    sandbox_env,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "bundles" / "synthetic_seg"
TINY = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1"]

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None and not os.environ.get("CI"),
    reason="bubblewrap is not installed (apt-get install bubblewrap; CI installs it)",
)


# ------------------------------------------------------------------ the decisions, without bwrap

def test_the_argv_hides_home_and_binds_back_only_what_the_run_needs() -> None:
    needs = Needs(
        run_dir="/home/u/proj/runs/x", cwd="/home/u/proj", home="/home/u",
        writable=("/home/u/proj/runs/x", "/scratch/cache"),
        readable=("/home/u/venv", "/home/u/proj", "/usr/lib/python3", "/home/u/proj/bundles/b"),
        hidden=("/home/u", "/tmp"), devices=("/dev/nvidia0",),
        env={"PATH": "/usr/bin", "HOME": "/home/u"},
    )
    argv = bwrap_argv("/usr/bin/bwrap", needs, ["python", "-m", "hpc_runner", "run", "--safe"])
    text = " ".join(argv)
    # a minimal root, never the host's: /usr read-only, a few files of /etc, no / bind at all
    assert "--ro-bind / /" not in text and "--ro-bind /usr /usr" in text and "/etc/shadow" not in text
    assert "--ro-bind /etc/ld.so.cache /etc/ld.so.cache" in text or not os.path.exists("/etc/ld.so.cache")
    assert text.index("--dev /dev") < text.index("--dev-bind-try /dev/nvidia0 /dev/nvidia0") < text.index("--proc")
    assert text.index("--tmpfs /home/u") < text.index("--ro-bind-try /home/u/venv /home/u/venv")
    # the current folder read-only, the run dir inside it writable (bound after: the deeper bind wins)
    assert text.index("--ro-bind-try /home/u/proj /home/u/proj") < text.index(
        "--bind /home/u/proj/runs/x /home/u/proj/runs/x")
    assert "--bind /scratch/cache /scratch/cache" in text
    assert "/usr/lib/python3" not in text  # the minimal root's /usr shows it already
    assert "bundles/b" not in text  # inside a folder already bound back
    assert argv.index("--remount-ro") > max(i for i, a in enumerate(argv) if a.startswith(("--bind", "--ro-bind")))
    for option in ("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session", "--clearenv", "--cap-drop"):
        assert option in argv
    assert "--setenv HOME /home/u" in text and "--setenv PATH /usr/bin" in text
    assert argv[argv.index("--chdir") + 1] == "/home/u/proj"
    assert argv[argv.index("--") + 1:] == ["python", "-m", "hpc_runner", "run", "--safe"]


def test_the_order_of_mounts_says_what_wins() -> None:
    # HOME inside the current folder (a test's tmp_path; a project folder holding a home): hidden again after
    # the current folder is bound back; what the run needs inside it is bound back after that
    needs = Needs(run_dir="/tmp/a/b/run", cwd="/tmp/a", home="/tmp/a/home", writable=("/tmp/a/b/run",),
                  readable=("/tmp/a", "/tmp/a/b", "/tmp/a/home/venv"), hidden=("/tmp/a/home", "/tmp"))
    assert bind_plan(needs) == [
        ("--tmpfs", "/tmp"), ("--ro-bind-try", "/tmp/a"), ("--tmpfs", "/tmp/a/home"),
        ("--ro-bind-try", "/tmp/a/home/venv"), ("--bind", "/tmp/a/b/run"),
    ]  # /tmp/a/b: inside /tmp/a with nothing hidden between, no bind of its own


def test_running_from_home_does_not_show_home() -> None:
    needs = Needs(run_dir="/home/u/runs/x", cwd="/home/u", home="/home/u", writable=("/home/u/runs/x",),
                  readable=("/home/u", "/", "/home/u/venv"), hidden=("/home/u",))
    assert bind_plan(needs) == [("--tmpfs", "/home/u"), ("--ro-bind-try", "/home/u/venv"),
                                ("--bind", "/home/u/runs/x")]  # nor is / (the whole host) ever bound


def test_the_environment_keeps_only_what_the_run_needs() -> None:
    environ = {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/home/u", "SSH_AUTH_SOCK": "/tmp/agent",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t", "MLFLOW_TRACKING_TOKEN": "t", "PYTHONPATH": "/home/u/evil",
        "LD_PRELOAD": "/home/u/x.so", "HPCR_CPUS": "2", "HPCR_CONFIG": "/home/u/.config/hpc-runner/config.yaml",
        "SLURM_JOB_ID": "7", "SLURM_CONF": "/etc/slurm/slurm.conf", "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "1", "XDG_CONFIG_HOME": "/home/u/.config",
    }
    env = sandbox_env(environ, home="/home/u", user_config="/home/u/.config/hpc-runner/config.yaml")
    assert env == {
        "PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "HOME": "/home/u", "TMPDIR": "/tmp",
        "HPCR_CPUS": "2", "HPCR_CONFIG": "/home/u/.config/hpc-runner/config.yaml", "SLURM_JOB_ID": "7",
        "CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "1", INSIDE_ENV: "1",
    }
    assert "HPCR_CONFIG" not in sandbox_env(environ, home="/home/u")  # no config file: none named inside


def test_home_the_temp_folders_and_the_user_runtime_folder_are_hidden() -> None:
    hidden = hidden_folders({"HOME": "/home/u"}, uid=os.getuid())
    assert hidden[0] == "/home/u" and {"/tmp", "/var/tmp", "/run"} <= set(hidden)  # /run: daemons' sockets too
    assert "/" not in hidden_folders({"HOME": "/"}) and "relative" not in hidden_folders({"HOME": "relative"})


def test_the_test_switch_of_the_allow_list_works_only_inside_the_sandbox() -> None:
    assert not static_check_skipped({STATIC_SWITCH: "off"})
    # the caller cannot say it is inside: outside the sandbox the variable alone switches nothing off
    assert not static_check_skipped({STATIC_SWITCH: "off", INSIDE_ENV: "1"})
    assert not static_check_skipped({INSIDE_ENV: "1"})


def _cli(tmp_path: Path, *args: object, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR", "SLURM_JOB", "SLURM_ARRAY"))}
    base.update({"OMP_NUM_THREADS": "1", "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **env})
    return WARM.run("hpc_runner", [str(a) for a in args], cwd=tmp_path, env=base, timeout=timeout)


def test_without_bubblewrap_safe_is_refused_with_one_paragraph_and_nothing_made(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "run", "--safe", "--bundle", EXAMPLE, *TINY, "--dataset_dir", tmp_path / "data",
                HPCR_BWRAP=str(tmp_path / "no-such-bwrap"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "no weaker mode" in lines[0] and "apt-get install bubblewrap" in lines[0], lines
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ the real sandbox

def _fake_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("SECRET-KEY-MATERIAL\n")
    (home / ".bash_profile").write_text("# the user's own\n")
    (home / ".config").mkdir()
    return home


def _make_data(tmp_path: Path) -> Path:
    """The tiny example's volumes, made outside the sandbox (inside, the dataset folder is read-only)."""
    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    ensure_synthetic_volumes(tmp_path / "data", num_train=2, num_val=1, size=16, noise_max=0.5, seed=0)
    return tmp_path / "data"


@needs_bwrap
@pytest.mark.slow
def test_the_example_trains_inside_the_sandbox_and_writes_its_run_dir(tmp_path: Path) -> None:
    home = _fake_home(tmp_path)
    proc = _cli(tmp_path, "run", "--safe", "--bundle", EXAMPLE, *TINY, "--dataset_dir", tmp_path / "data",
                "--writable", tmp_path / "data", "--output_dir", tmp_path / "run", "--debug", HOME=str(home))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hpc-runner: sandbox: " in proc.stderr and "--unshare-net" in proc.stderr
    assert yaml.safe_load((tmp_path / "run" / "run.yaml").read_text())["status"] == "completed"
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["epochs"] == 1 and summary["final_metric"] is not None
    assert (tmp_path / "data" / "synthetic.json").exists()  # --writable: the dataset folder it generated
    assert sorted(p.name for p in home.iterdir()) == [".bash_profile", ".config", ".ssh"]  # HOME untouched


ATTACK = r'''
import json, os, socket
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "succeeded"
    except Exception as exc:
        out[name] = type(exc).__name__ + ": " + str(exc)
attempt("home", lambda: open(HOME + "/.bash_profile", "a").write("touch PWNED\n"))
attempt("secret", lambda: out.__setitem__("stolen", open(HOME + "/.ssh/id_rsa").read()))
attempt("socket", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=3))
attempt("tmp", lambda: open(TMP_MARKER, "w").write("x"))
attempt("cwd", lambda: open(CWD_MARKER, "w").write("x"))
attempt("bundle", lambda: open(BUNDLE + "/evil.py", "w").write("x"))
attempt("mark", lambda: open(RUN_DIR + "/.safe-sandbox.json", "w").write("x"))
attempt("unmark", lambda: os.remove(RUN_DIR + "/.safe-sandbox.json"))
attempt("jobs", lambda: open(RUN_DIR + "/jobs/evil.pkl", "w").write("x"))
out["token"] = os.environ.get("SECRET_TOKEN")
json.dump(out, open(RUN_DIR + "/attacks.json", "w"))
'''


class Attack:
    """A copy of the example whose `attack` id runs ATTACK; the files, port and variable it goes for."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path, self.home, self.data = tmp_path, _fake_home(tmp_path), _make_data(tmp_path)
        self.bundle = tmp_path / "hostile"
        shutil.copytree(EXAMPLE, self.bundle, ignore=shutil.ignore_patterns("data", "runs", "__pycache__", "MANIFEST"))
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.listener.setblocking(False)
        self.run_dir, self.tmp_marker = tmp_path / "run", f"/tmp/hpcr-sandbox-marker-{os.getpid()}-{time.time_ns()}"
        code = ATTACK
        for name, value in {"HOME": str(self.home), "PORT": self.listener.getsockname()[1],
                            "TMP_MARKER": self.tmp_marker, "CWD_MARKER": str(tmp_path / "marker"),
                            "BUNDLE": str(self.bundle), "RUN_DIR": str(self.run_dir)}.items():
            code = code.replace(name, json.dumps(value) if isinstance(value, str) else str(value))
        train = self.bundle / "configs" / "train.yaml"
        train.write_text(train.read_text() + "attack:\n  - " + json.dumps("$exec(" + json.dumps(code) + ")") + "\n")
        self.args = ["run", "attack", "--safe", "--bundle", str(self.bundle), *TINY, "--dataset_dir", str(self.data),
                     "--output_dir", str(self.run_dir)]
        self.env = {"HOME": str(self.home), "SECRET_TOKEN": "tok", STATIC_SWITCH: "off"}

    def check(self) -> None:
        """The hostile code ran (its report is in the run dir), and every attack failed or left no trace."""
        try:
            found = json.loads((self.run_dir / "attacks.json").read_text())
            with pytest.raises(BlockingIOError):
                self.listener.accept()  # nothing reached the host's loopback
        finally:
            self.listener.close()
        assert found["secret"].startswith("FileNotFoundError") and "stolen" not in found, found
        assert found["socket"] != "succeeded", found
        assert found["cwd"].startswith("OSError") and "Read-only" in found["cwd"], found
        assert found["bundle"].startswith("OSError") and "Read-only" in found["bundle"], found
        assert found["token"] is None
        # the --safe mark (its next start stays in the sandbox) and the job folder (pickles a requeue loads)
        # are read-only inside
        assert found["mark"].startswith("OSError") and found["unmark"].startswith("OSError"), found
        assert json.loads((self.run_dir / ".safe-sandbox.json").read_text())["safe"] is True
        assert found["jobs"] != "succeeded" and not (self.run_dir / "jobs" / "evil.pkl").exists(), found
        # writes to HOME and /tmp land in the sandbox's own empty tmpfs, gone with it
        assert (self.home / ".bash_profile").read_text() == "# the user's own\n"
        assert not os.path.exists(self.tmp_marker) and not (self.tmp_path / "marker").exists()
        assert not (self.bundle / "evil.py").exists()
        assert not any("SECRET-KEY-MATERIAL" in p.read_text(errors="replace")
                       for p in self.run_dir.rglob("*") if p.is_file())


@pytest.mark.slow  # a sandboxed run that imports MONAI: the full suite runs it
@needs_bwrap
def test_with_the_allow_list_off_the_sandbox_alone_stops_the_attacks(tmp_path: Path) -> None:
    attack = Attack(tmp_path)
    proc = _cli(tmp_path, *attack.args, **attack.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    attack.check()


# A run dir as `submit --safe` prepares it (record safe: true), of a bundle the allow-list outside would refuse
PREPARE = """
import sys
from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import parse_cli_overrides
from hpc_runner.engine.runner import prepare_run
bundle, run_dir, *tokens = sys.argv[1:]
cfg = load_bundle_config(bundle, cli_overrides=parse_cli_overrides(tokens), entry="attack")
cfg.safe = True
prepare_run(cfg, "attack", run_dir, [])
"""
# what a submitted job runs (submitit calls it by reference): here, outside any sandbox
# (its arguments carry its --safe grants: the job decides from its submission, never from its run dir)
JOB = ("import sys; from hpc_runner.jobs.job import run_submitted; "
       "print(run_submitted(sys.argv[1], 'attack', {'sandbox': {'writable': [], 'readable': []}}))")


def _prepare_job(attack: Attack) -> list[str]:
    """Write the attack's run dir as a safe submission; return the job's command line."""
    tokens = attack.args[attack.args.index("--bundle") + 2: attack.args.index("--output_dir")]
    subprocess.run([sys.executable, "-c", PREPARE, str(attack.bundle), str(attack.run_dir), *tokens],
                   check=True, capture_output=True, timeout=120, cwd=attack.tmp_path)
    (attack.run_dir / "jobs").mkdir()  # where submit keeps the job's pickles and scripts
    return [sys.executable, "-c", JOB, str(attack.run_dir)]


@needs_bwrap
@pytest.mark.slow
def test_a_job_of_a_safe_submission_runs_inside_the_sandbox_and_it_alone_stops_the_attacks(tmp_path: Path) -> None:
    attack = Attack(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR", "SLURM_JOB", "SLURM_ARRAY"))}
    env.update({"OMP_NUM_THREADS": "1", "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **attack.env})
    proc = subprocess.run(_prepare_job(attack), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "'status': 'completed'" in proc.stdout, proc.stdout + proc.stderr
    assert "inside the --safe sandbox" in proc.stdout
    attack.check()
    record = yaml.safe_load((attack.run_dir / "run.yaml").read_text())
    assert record["status"] == "completed" and record["safe"] is True
    assert not (attack.run_dir / ".sandbox-outcome.json").exists()  # read back and removed outside
    # the run could rewrite its record (safe: false); its mark, read-only inside, keeps a re-run safe
    (attack.run_dir / "run.yaml").write_text(yaml.safe_dump({**record, "safe": False}))
    rerun = WARM.run("hpc_runner", ["rerun", str(attack.run_dir), "--output_dir", str(tmp_path / "rerun")],
                     cwd=tmp_path, env=env, timeout=300)
    assert rerun.returncode == 2 and "--safe refuses" in rerun.stderr, rerun.stdout + rerun.stderr


@needs_bwrap
@pytest.mark.slow
@pytest.mark.slurm
def test_as_a_job_on_the_local_slurm_the_sandbox_alone_stops_the_attacks(tmp_path: Path, slurm_cluster) -> None:
    """One job runs both: `run --safe` in a job script, and the job function of a `submit --safe` run dir."""
    attack, submitted = Attack(tmp_path), Attack(tmp_path / "submitted")
    script = tmp_path / "job.sh"
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "hpc_runner", *attack.args])
    job = " ".join(shlex.quote(a) for a in _prepare_job(submitted))
    script.write_text(f"#!/bin/bash\nset -e\ncd {shlex.quote(str(tmp_path))}\n{command}\n"
                      f"cd {shlex.quote(str(submitted.tmp_path))}\nHOME={shlex.quote(str(submitted.home))} {job}\n")
    env = {k: v for k, v in slurm_cluster.env.items() if not k.startswith(("HPCR", "SLURM_JOB", "SLURM_ARRAY"))}
    env.update({"OMP_NUM_THREADS": "1", "XDG_CONFIG_HOME": str(tmp_path / "xdg"), **attack.env})
    log = tmp_path / "job.out"
    sub = subprocess.run(["sbatch", "--parsable", "--export=ALL", "-o", str(log), "--time=10", str(script)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    slurm_cluster.wait_for_jobs([job], timeout=300)
    state = slurm_cluster.sacct_states([job])  # sacct lags the controller: wait for its final record
    assert state == {job: "COMPLETED"}, f"{state}\n{log.read_text() if log.exists() else ''}"
    attack.check()
    submitted.check()


@needs_bwrap
@pytest.mark.slow
def test_a_stop_signal_reaches_the_run_inside_and_it_checkpoints(tmp_path: Path) -> None:
    data = _make_data(tmp_path)
    args = [*TINY[:-4], "--max_epochs", "100000", "--val_interval", "1000"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR", "SLURM_JOB", "SLURM_ARRAY"))}
    env.update({"OMP_NUM_THREADS": "1", "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(_fake_home(tmp_path))})
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpc_runner", "run", "--safe", "--bundle", str(EXAMPLE), *args, "--dataset_dir",
         str(data), "--output_dir", str(tmp_path / "run")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith("epoch 2/"):
                proc.send_signal(signal.SIGUSR2)  # to the parent, outside: it passes it on
                break
        rest, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    output = "".join(lines) + rest
    assert proc.returncode == 3, output
    assert "stopped by SIGUSR2; checkpoint written" in output
    assert list((tmp_path / "run" / "checkpoints").glob("*.pt")), output
