"""--dry-run and bad input, on a machine without a cluster: nothing reaches sbatch, nothing is written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")


def _written(cwd: Path) -> list[str]:
    """Files a command left in its working dir, apart from the fixture's own."""
    skip = {"fake-bin", "clusters", "scheduler-calls.txt", "config-home"}
    return sorted(p.name for p in cwd.iterdir() if p.name not in skip)


def test_sweep_dry_run_prints_scripts_and_points_names_the_config_command_and_writes_nothing(offline_cli):
    out = offline_cli("sweep", "training", "--bundle", BUNDLE, "--cluster", "slurm", "--dry-run",
                      "--sweep", "learning_rate=1e-3,1e-4", "--sweep", "network_def::channels=[8,16],[16,32],[4,8]",
                      "--max_epochs", "2", "--array-parallelism", "2", "--output_dir", "sw")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "6 points, all valid" in text
    assert "2 array(s) of at most 3 tasks (MaxArraySize from scontrol show config)" in text
    assert "#SBATCH --array=0-2%2" in text and "points 0-2, 3-5" in text
    assert "#SBATCH --export=ALL" in text and "#SBATCH --signal=USR2@60" in text
    logs = offline_cli.cwd / "sw" / "jobs"
    # its tasks read their arguments from one JSON file (a command array), not one pickle each
    assert f"-u -m hpc_runner job {logs}/array-ID.json\n" in text  # hpc-runner job FILE: readable, runnable
    # each script's first comment says what runs: which points, of which sweep, of which bundle
    assert f"#!/bin/bash\n# hpc-runner: sweep points 0-5 of {(offline_cli.cwd / 'sw').resolve()}; training of " in text
    # the log folder holds no job id: it exists before sbatch, so a job that starts at once can open its log
    assert f"#SBATCH --output={logs}/%A_%a_0_log.out" in text and f"#SBATCH --error={logs}/%A_%a_0_log.err" in text
    assert "5  learning_rate=0.0001 network_def::channels=[4, 8]" in text
    # the base config is not dumped below the scripts: one line names the command that prints it
    assert "max_epochs: 2" not in text and "`hpc-runner config` with the same bundle" in text
    assert _written(offline_cli.cwd) == []
    assert offline_cli.calls() == {"sbatch": 0, "sacct": 0, "squeue": 0, "scancel": 0}


def test_submit_dry_run_prints_the_sbatch_script_and_where_the_config_will_be(offline_cli):
    offline_cli.write_profile("gpu", "extends: jade\npartitions: [small, gpu]\npartition: gpu\naccount: proj\n")
    out = offline_cli("submit", "--bundle", BUNDLE, "--cluster", "gpu", "--dry-run", "--hold",
                      "--slurm", "time=00:30:00", "--trainer::max_epochs", "3", "--output_dir", "r1")
    assert out.returncode == 0, out.stderr
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --gpus-per-node=1",
                 "#SBATCH --time=00:30:00", "#SBATCH --hold", "#SBATCH --signal=USR2@120", "module load cuda/12.1",
                 "#SBATCH --export=ALL,PYTHONUNBUFFERED=1"):
        assert line in out.stdout
    assert "--array" not in out.stdout
    assert f"#SBATCH --output={offline_cli.cwd / 'r1' / 'jobs'}/%j_0_log.out" in out.stdout  # no job id folder
    # a readable command: the job's arguments in one JSON file beside its logs, no pickle
    assert f"-u -m hpc_runner job {offline_cli.cwd / 'r1' / 'jobs'}/job-ID.json\n" in out.stdout
    run_dir = (offline_cli.cwd / "r1").resolve()
    assert f"#!/bin/bash\n# hpc-runner: runs entry run of {run_dir}/config.yaml" in out.stdout
    assert "submitit.core._submit" not in out.stdout
    assert "max_epochs: 3" not in out.stdout and f"reads it from {offline_cli.cwd / 'r1'}/config.yaml" in out.stdout
    assert _written(offline_cli.cwd) == []
    assert offline_cli.calls()["sbatch"] == 0


def test_dry_run_script_is_the_one_sbatch_receives(offline_cli):
    """The script --dry-run prints is, byte for byte, the file a real submit hands to sbatch."""
    received = offline_cli.cwd / "received.sh"
    bin_dir = offline_cli.cwd / "fake-bin"
    # an sbatch that keeps the script it is given (its last argument) and accepts the job
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\nfor a; do last="$a"; done\ncp "$last" {received}\n'
                                    'echo "Submitted batch job 4242"\n')
    args = ["submit", "--bundle", BUNDLE, "--cluster", "jade", "--hold", "--slurm", "time=45",
            "--max_epochs", "1", "--output_dir", "r1"]
    dry = offline_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    offline_cli(*args)  # its exit code depends on the fake scheduler's later answers; the script is what we want
    script = received.read_text()
    assert script.startswith("#!/bin/bash") and "#SBATCH --time=00:45:00" in script and "#SBATCH --hold" in script
    # the arguments file a job reads is named when it is written (job-<12 hex digits>.json); the dry run says ID
    # (in the command, and in the by-hand comment of the header)
    named = set(re.findall(r"/job-([0-9a-f]{12})\.json\n", script))
    assert len(named) == 1 and script.replace(named.pop(), "ID") in dry.stdout


def test_a_bad_point_means_nothing_is_submitted_or_written(offline_cli):
    out = offline_cli("sweep", "--bundle", BUNDLE, "--cluster", "slurm", "--output_dir", "sw",
                      "--sweep", "seed=1,2,3", "--sweep", "batch_size=1,two")
    assert out.returncode == 2
    assert "sweep point 1 (seed=1 batch_size=two) is not valid, nothing was submitted" in out.stderr
    assert _written(offline_cli.cwd) == [] and offline_cli.calls()["sbatch"] == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cluster", "nosuch", "--sweep", "seed=1"], "unknown cluster profile 'nosuch'"),
        (["--cluster", "slurm", "--sweep", "seed"], "has no '='"),
        (["--cluster", "slurm", "--sweep", "seed=[1"], "unclosed bracket"),
        (["--cluster", "slurm", "--sweep", "nope=1,2"], "sweep point 0"),
        (["--cluster", "slurm", "--slurm", "partiton=x", "--sweep", "seed=1"], "unknown key partiton"),
        (["--cluster", "jade", "--slurm", "partition=nope", "--sweep", "seed=1"], "not one of this cluster"),
        (["--cluster", "slurm"], "no sweep given"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(offline_cli, args, message):
    out = offline_cli("sweep", "--bundle", BUNDLE, "--output_dir", "sw", *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert _written(offline_cli.cwd) == [] and offline_cli.calls()["sbatch"] == 0


def test_status_of_something_else_exits_2(offline_cli, tmp_path):
    out = offline_cli("status", str(tmp_path))
    assert out.returncode == 2 and "not a sweep dir or a run dir" in out.stderr


def test_an_existing_sweep_dir_is_not_overwritten(offline_cli):
    (offline_cli.cwd / "sw").mkdir()
    (offline_cli.cwd / "sw" / "keep.txt").write_text("x")
    out = offline_cli("sweep", "--bundle", BUNDLE, "--cluster", "slurm", "--output_dir", "sw", "--sweep", "seed=1")
    assert out.returncode == 2 and "already exists and is not empty" in out.stderr


def test_help_does_not_import_torch_or_monai():
    for command in ("submit", "sweep", "status", "resume", "collect", "cancel"):
        code = (
            "import sys; from hpc_runner.cli import main\n"
            f"try:\n    main(['{command}', '--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in ('torch', 'monai', 'submitit') if m in sys.modules]\n"
            "assert not bad, bad"
        )
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("args, words", [
    (["--slurm", "gres=gpu:2"], ["gres 'gpu:2' and gpus_per_node 1 both ask for GPUs", "gpus_per_node=null"]),
    (["--cpus", "4", "--slurm", "cpus_per_task=8"],
     ["--cpus 4 and --scheduler-option cpus_per_task=8 ask for different CPUs"]),
    (["--slurm", "gpus=2"], ["unknown key gpus", "Did you mean: gpus_per_node?"]),
])
def test_a_request_that_contradicts_itself_or_misnames_a_key_is_refused_naming_both(offline_cli, args, words):
    out = offline_cli("submit", "--bundle", BUNDLE, "--cluster", "jade", *args, "--dry-run", "--no-preflight",
                      "--output_dir", "r1")
    assert out.returncode == 2 and out.stderr.count("error:") == 1 and "Traceback" not in out.stderr, out.stderr
    assert all(w in out.stderr for w in words), out.stderr
    assert _written(offline_cli.cwd) == [] and offline_cli.calls()["sbatch"] == 0
    fixed = offline_cli("submit", "--bundle", BUNDLE, "--cluster", "jade", "--slurm", "gres=gpu:2", "--slurm",
                        "gpus_per_node=null", "--dry-run", "--no-preflight", "--output_dir", "r1")
    assert fixed.returncode == 0 and "#SBATCH --gres=gpu:2" in fixed.stdout and "gpus-per-node" not in fixed.stdout
    # the script, not a dump of the resolved config below it (hundreds of lines): a line names the command
    assert "max_epochs:" not in fixed.stdout and "`hpc-runner config` with the same" in fixed.stdout


def test_a_gpu_network_with_no_gpu_request_warns_naming_how_to_ask_for_one(offline_cli):
    args = ("--dry-run", "--no-preflight", "--output_dir", "r1")
    out = offline_cli("submit", "--bundle", BUNDLE, "--cluster", "slurm", *args)  # the built-in 1 CPU, no GPU
    assert out.returncode == 0, out.stderr
    assert "network_def builds UNet, but profile 'slurm' asks for no GPU" in out.stderr
    assert "--slurm gpus_per_node=1" in out.stderr and out.stderr.count("asks for no GPU") == 1
    # a GPU asked for (jade: gpus_per_node 1; or gres), or a config that says it runs on the CPU: no warning
    for extra in (["--cluster", "jade"], ["--cluster", "slurm", "--slurm", "gres=gpu:1"],
                  ["--cluster", "slurm", "--device", "cpu"]):
        quiet = offline_cli("submit", "--bundle", BUNDLE, *extra, *args)
        assert quiet.returncode == 0 and "asks for no GPU" not in quiet.stderr, (extra, quiet.stderr)
    assert _written(offline_cli.cwd) == [] and offline_cli.calls()["sbatch"] == 0


def _unreachable_controller(offline_cli) -> None:
    """sbatch and scontrol as on a machine whose SLURM controller's name does not resolve."""
    bin_dir = offline_cli.cwd / "fake-bin"
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\necho 'sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2\n"
        "echo 'sbatch: error: fetch_config: DNS SRV lookup failed' >&2\n"
        "echo 'sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)' >&2\n"
        "exit 1\n")
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\nif [ \"$1\" = ping ]; then echo 'Slurmctld(primary) at jade-ctl is DOWN'; exit 1; fi\n"
        "echo 'scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host' >&2\nexit 1\n")


@pytest.mark.parametrize("preflight", [[], ["--no-preflight"]])
def test_a_named_profile_whose_controller_does_not_answer_says_so_not_that_the_job_is_refused(offline_cli, preflight):
    # 6ca9a4e: "pre-flight: the scheduler refuses the job ... sbatch --test-only says: ... DNS SRV lookup failed"
    _unreachable_controller(offline_cli)
    out = offline_cli("submit", "--bundle", BUNDLE, "--cluster", "jade", *preflight, "--max_epochs", "1",
                      "--output_dir", "r")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "no SLURM controller answers for profile jade" in out.stderr, out.stderr
    assert "refuses" not in out.stderr and "Traceback" not in out.stderr


def test_a_runtime_on_the_compute_nodes_only_is_not_asked_for_on_the_login_node_and_the_dry_run_shows_its_line(
        offline_cli):
    # 6ca9a4e: "the container runtime apptainer (apptainer) is not on PATH" on a JADE-like login node
    image = offline_cli.cwd / "hpc-runner.sif"
    image.write_bytes(b"SIF image stand-in")
    offline_cli.write_profile("jadeimg", f"extends: jade\ncontainer:\n  image: {image}\n  runtime: apptainer\n"
                              "  path: /apps/apptainer/bin/apptainer\n  on: compute\n  gpu: nv\n")
    out = offline_cli("sweep", "--bundle", BUNDLE, "--cluster", "jadeimg", "--dry-run", "--sweep", "seed=1,2",
                      "--output_dir", "sw")
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("# container: each job starts"))
    assert "/apps/apptainer/bin/apptainer exec" in line and "--nv" in line and str(image) in line
    assert "container.on is compute" in line
