"""The job script holds against hostile values: checked for its field, then proven (slurm/job_script.py)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from warm_python import WARM

from hpc_runner.errors import ClusterError, UserError
from hpc_runner.scheduler.profiles import load_profile
from hpc_runner.scheduler.slurm.command_job import args_file_for
from hpc_runner.scheduler.slurm.executor import sbatch_script, slurm_parameters
from hpc_runner.scheduler.slurm.job_script import prove_script, safe_job_name

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
HOSTILE_NAME = "x'\ntouch M1 #"


def _hostile_bundle(folder: Path, name: str = HOSTILE_NAME) -> Path:
    """The example bundle with a metadata name that tries to end the #SBATCH comment and run a command."""
    bundle = folder / "inj"
    shutil.copytree(BUNDLE / "configs", bundle / "configs")
    meta = json.loads((bundle / "configs" / "metadata.json").read_text())
    meta["name"] = name
    (bundle / "configs" / "metadata.json").write_text(json.dumps(meta))
    return bundle


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCR_")}
    env["XDG_CONFIG_HOME"] = str(cwd / "config-home")
    return WARM.run("hpc_runner", list(args), cwd=cwd, env=env, timeout=300)


def _run_script(script: str, cwd: Path) -> None:
    """Run a job script with bash, as sbatch's job would, with srun replaced by a no-op."""
    bin_dir = cwd / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "srun").chmod(0o755)
    (cwd / "job.sh").write_text(script)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", str(cwd / "job.sh")], cwd=cwd, env=env, capture_output=True, timeout=60)


def _script_of(stdout: str) -> str:
    """The sbatch script a --dry-run printed (from #!/bin/bash to the line after the srun command)."""
    lines = stdout.split("\n")
    start = lines.index("#!/bin/bash")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("srun "))
    return "\n".join(lines[start : end + 1]) + "\n"


@pytest.mark.parametrize("command", [["submit"], ["sweep", "--sweep", "seed=1,2"]])
def test_a_bundle_name_with_a_newline_cannot_add_a_command_to_the_job_script(tmp_path, command):
    bundle = _hostile_bundle(tmp_path)
    out = _cli(tmp_path, *command, "--bundle", str(bundle), "--safe", "--cluster", "slurm", "--dry-run",
               "--no-preflight")
    assert out.returncode == 0, out.stderr
    script = _script_of(out.stdout)
    assert "touch M1" not in script.replace("touch_M1", "")
    assert "#SBATCH --job-name=hpcr-" in script and "x__touch_M1__" in script
    _run_script(script, tmp_path)
    assert not (tmp_path / "M1").exists()


def test_a_tune_job_script_keeps_the_hostile_name_out_too(tmp_path):
    pytest.importorskip("optuna")
    bundle = _hostile_bundle(tmp_path)
    out = _cli(tmp_path, "tune", "--bundle", str(bundle), "--cluster", "slurm", "--dry-run", "--no-preflight",
               "--space", "learning_rate=loguniform(1e-4,1e-2)", "--trials", "2", "--metric", "val_dice")
    assert out.returncode == 0, out.stderr
    script = _script_of(out.stdout)
    _run_script(script, tmp_path)
    assert not (tmp_path / "M1").exists()
    assert "touch M1" not in script.replace("touch_M1", "")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--slurm", "partition=a\ntouch M3"], "partition"),
        (["--slurm", "account=a\ntouch M3"], "account"),
        (["--slurm", 'setup=["module load x\\ntouch M3"]'], "setup item"),  # YAML's "\n" escape: a newline
        (["--slurm", 'sbatch={mail-user: "a\\ntouch M3"}'], "sbatch: mail-user"),
        (["--output_dir", "out\ntouch M3"], "control character"),
        (["--slurm", "python=python; touch M3"], "not a plain command"),
        (["--slurm", 'setup=["#SBATCH --time=99999"]'], "not the one intended"),  # sbatch would read it
    ],
)
def test_a_control_character_or_shell_syntax_in_a_field_exits_2_naming_it(tmp_path, args, field):
    out = _cli(tmp_path, "submit", "--bundle", str(BUNDLE), "--cluster", "slurm", "--dry-run", "--no-preflight",
               *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert field in out.stderr and "Traceback" not in out.stderr
    assert out.stdout == "" and not (tmp_path / "M3").exists() and not (tmp_path / "runs").exists()


def test_the_proof_refuses_a_script_with_a_line_that_was_not_intended(tmp_path):
    profile = load_profile("slurm")
    params = slurm_parameters(profile, job_name="ok", chdir=str(tmp_path))
    script = sbatch_script(profile, tmp_path / "jobs", params)
    python = shlex.quote(sys.executable)
    prove_script(script, params, tmp_path / "jobs", python)  # what we generate passes
    lines = script.split("\n")
    at = lines.index("# command")
    for bad in (
        # a command inside the block
        script.replace("#SBATCH --time=01:00:00\n", "#SBATCH --time=01:00:00\ntouch M\n"),
        script.replace("# command\n", "#SBATCH --time=6000\n# command\n"),  # an option sbatch still reads
        "\n".join([*lines[:at], "touch M", *lines[at:]]),  # a line outside it
        script.replace("--time=01:00:00", "--time=100:00:00"),  # an option that is not the one intended
        script.replace("#SBATCH --time=01:00:00\n", ""),  # an option lost
    ):
        with pytest.raises(ClusterError, match="not the one intended"):
            prove_script(bad, params, tmp_path / "jobs", python)


# ------------------------------------------------------------------ property test

_ANY_CHAR = st.sampled_from(list("ab1_-.:,%@/ '\"#;$`\\|&<>()[]{}*!?~=\n\r\t\x00\x7f\u2028\u0085é"))
_PLAIN = st.text(alphabet="abcxyz0123_.-", min_size=1, max_size=12)
# wholly hostile strings, plausible ones, and plausible ones with one hostile character inside
_HOSTILE = st.one_of(
    st.text(alphabet=_ANY_CHAR, min_size=1, max_size=30),
    _PLAIN,
    st.tuples(_PLAIN, _ANY_CHAR, _PLAIN).map("".join),
)
_FIELDS = ("partition", "account", "qos", "constraint", "exclude", "gres", "mem", "job_name", "setup", "env",
           "sbatch", "srun_args", "python", "chdir", "folder")


def _build(field: str, value: str, base: Path) -> tuple[str, str, dict, Path]:
    """Put ``value`` into one field the way a user (or a bundle) can, and return the script and what built it."""
    overrides: dict = {}
    chdir, folder, job_name = str(base), base / "jobs", "run"
    if field in ("partition", "account", "qos", "constraint", "exclude", "gres", "mem"):
        overrides[field] = value
    elif field == "setup":
        overrides["setup"] = [value]
    elif field == "srun_args":
        overrides["srun_args"] = [value]
    elif field == "env":
        overrides["env"] = {"MY_VAR": value}
    elif field == "sbatch":
        overrides["sbatch"] = {"comment": value}
    elif field == "python":
        overrides["python"] = value
    elif field == "job_name":
        job_name = value
    elif field == "chdir":
        chdir = str(base / value)
    elif field == "folder":
        folder = base / value / "jobs"
    profile = load_profile("slurm", overrides)
    params = slurm_parameters(profile, job_name=job_name, chdir=chdir)
    array = sbatch_script(profile, folder, params, map_count=3, args_file=args_file_for(folder))  # a command array
    return sbatch_script(profile, folder, params), array, params, folder


def _sbatch_block(script: str) -> tuple[dict[str, str], list[str]]:
    """Read a script as sbatch and bash do: the #SBATCH options before the first command, and the commands."""
    options: dict[str, str] = {}
    commands = []
    for line in script.split("\n"):
        if line.startswith("#SBATCH ") and not commands:
            key, _, raw = line[len("#SBATCH --"):].partition("=")
            options[key] = shlex.split(raw)[0] if raw else ""
        elif line.strip() and not line.startswith("#"):
            commands.append(line)
    return options, commands


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_FIELDS), value=_HOSTILE)
def test_any_string_in_any_field_is_refused_or_lands_exactly_where_intended(tmp_path, field, value):
    try:
        script, array, params, folder = _build(field, value, tmp_path)
    except (ClusterError, UserError):
        event(f"{field}: refused")
        return  # refused with a one-paragraph error: nothing was made
    event(f"{field}: in the script")
    options, commands = _sbatch_block(script)
    # every option intended is read by sbatch with its exact value
    assert options["job-name"] == safe_job_name(params["job_name"])
    for key, want in params["additional_parameters"].items():
        assert options[key] == ("" if want is True else str(want))  # True: a flag (--requeue)
    for key in ("partition", "account", "qos", "constraint", "exclude", "gres", "mem"):
        if key in params:
            assert options[key] == str(params[key])
    # the only commands are the setup lines given and submitit's two lines, with the intended words
    setup = [ln for ln in params.get("setup") or [] if ln.strip() and not ln.startswith("#")]  # bash runs these
    assert commands[: len(setup)] == setup
    rest = commands[len(setup):]
    assert rest[0] == "export SUBMITIT_EXECUTOR=slurm" and len(rest) == 2
    words = shlex.split(rest[1])
    assert words[0] == "srun" and words[-3:] == ["-m", "submitit.core._submit", str(folder.absolute())]
    assert all("\n" not in ln for ln in commands)
    # a command array's script: the same options and setup, its tasks run the arguments file in the same folder
    array_options, array_commands = _sbatch_block(array)
    assert array_options["array"] == "0-2%3" and array_commands[:-1] == commands[:-1]
    words = shlex.split(array_commands[-1])
    assert words[-4:-1] == ["-m", "hpc_runner", "job"] and Path(words[-1]).parent == folder.absolute()


@pytest.mark.slow
@pytest.mark.slurm
def test_a_hostile_bundle_name_submitted_for_real_runs_its_job_and_nothing_else(slurm_cluster, cli, tiny):
    bundle = _hostile_bundle(cli.cwd)
    # --safe: the job runs the bundle inside the sandbox, which may write the run dir and the dataset folder
    out = cli("submit", "training", "--bundle", str(bundle), "--safe", "--cluster", "testcluster",
              "--output_dir", "r", "--wait", *tiny, "--writable", tiny[-1])
    assert out.returncode == 0, out.stdout + out.stderr + slurm_cluster.explain(cli.cwd / "r")
    script = next((cli.cwd / "r" / "jobs").glob("*_submission.sh")).read_text()
    assert "#SBATCH --job-name=hpcr-run-x__touch_M1__" in script
    assert not (cli.cwd / "M1").exists() and (cli.cwd / "r" / "model.pt").is_file()
    log = next((cli.cwd / "r" / "jobs").glob("*_log.out")).read_text()
    assert "the run goes inside the --safe sandbox" in log and f"writable: {cli.cwd / 'r'}, {tiny[-1]}" in log
