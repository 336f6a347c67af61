"""A corpus of damaged or hostile records, absurd values and odd environments, through the real CLI.

Every one is bad input: exit 2, one paragraph naming the culprit, no traceback, nothing left behind
(and no marker file made by a record that tries to run code).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from warm_python import WARM

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = str(ROOT / "bundles" / "synthetic_seg")
TINY = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1",
        "--batch_size", "1"]
PYTHON_TAG = "status: !!python/object/apply:os.system ['touch {marker}']\n"
BINARY = bytes(range(256)) * 4


def _refused(res: subprocess.CompletedProcess, *culprits: str) -> str:
    """Assert exit 2 with one error paragraph naming each culprit and no traceback; return the paragraph."""
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr + res.stdout
    errors = [line for line in res.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, res.stderr
    for culprit in culprits:
        assert culprit in errors[0], errors[0]
    return errors[0]


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A completed run dir and a completed two-point local sweep, made once (each test damages a copy)."""
    import os

    base = tmp_path_factory.mktemp("finished")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCR__", "SLURM_JOB", "SLURM_ARRAY"))}
    data = ["--dataset_dir", str(base / "data")]
    for args in (["run", "--bundle", BUNDLE, *TINY, *data, "--output_dir", "run"],
                 ["sweep", "--bundle", BUNDLE, *TINY, *data, "--cluster", "local", "--output_dir", "sweep",
                  "--sweep", "seed=1,2"]):
        res = WARM.run("hpc_runner", [str(a) for a in args], cwd=base, env=env, timeout=600)
        assert res.returncode == 0, res.stderr
    return {"run": base / "run", "sweep": base / "sweep"}


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


# ---------------------------------------------------------------- damaged or hostile records


@pytest.mark.slow
@pytest.mark.parametrize("command", ["status", "collect", "rerun", "resume"])
@pytest.mark.parametrize("damage", ["python-tag", "binary", "a list"])
def test_a_damaged_run_yaml_is_bad_input_naming_it(cli, finished, tmp_path: Path, command: str, damage: str):
    run = _copy(finished["run"], tmp_path / "run")
    marker = tmp_path / "MARK"
    if damage == "python-tag":
        (run / "run.yaml").write_text(PYTHON_TAG.format(marker=marker))
    elif damage == "binary":
        (run / "run.yaml").write_bytes(BINARY)
    else:
        (run / "run.yaml").write_text("- just\n- a list\n")
    before = _files(tmp_path)
    res = cli(command, str(run), cwd=tmp_path)
    _refused(res, "run.yaml")
    assert not marker.exists() and _files(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("command", ["status", "collect", "resume", "cancel", "report"])
@pytest.mark.parametrize("damage", ["binary", "python-tag", "points-not-a-list", "point-without-dir", "index-huge"])
def test_a_damaged_sweep_yaml_is_bad_input_naming_it(cli, finished, tmp_path: Path, command: str, damage: str):
    sweep = _copy(finished["sweep"], tmp_path / "sweep")
    record = json.loads((sweep / "sweep.yaml").read_text())
    marker = tmp_path / "MARK"
    if damage == "binary":
        (sweep / "sweep.yaml").write_bytes(BINARY)
    elif damage == "python-tag":
        (sweep / "sweep.yaml").write_text(f"kind: hpc-runner sweep\npoints: !!python/object/apply:os.system "
                                          f"['touch {marker}']\n")
    elif damage == "points-not-a-list":
        record["points"] = {"0": record["points"][0]}
        (sweep / "sweep.yaml").write_text(json.dumps(record))
    elif damage == "point-without-dir":
        del record["points"][1]["dir"]
        (sweep / "sweep.yaml").write_text(json.dumps(record))
    else:
        record["points"][1]["dir"] = "../../../../etc"
        (sweep / "sweep.yaml").write_text(json.dumps(record))
    before = _files(tmp_path)
    res = cli(command, str(sweep), cwd=tmp_path)
    _refused(res, "sweep.yaml")
    assert not marker.exists() and _files(tmp_path) == before


@pytest.mark.slow
def test_a_binary_metrics_file_is_named_not_a_traceback(cli, finished, tmp_path: Path):
    run = _copy(finished["run"], tmp_path / "run")
    good = (run / "metrics.jsonl").read_bytes()
    (run / "metrics.jsonl").write_bytes(good[:200] + b"\n" + BINARY + b"\n" + good[200:])
    res = cli("report", str(run), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "metrics.jsonl" in res.stderr and "damaged" in res.stderr  # named, not silently skipped


# ---------------------------------------------------------------- values that overflow or make no sense


@pytest.mark.parametrize(
    ("args", "culprits"),
    [
        (["--max_epochs", "1e309"], ["max_epochs", "inf"]),
        (["--max_epochs", "9" * 400], ["max_epochs", "9223372036854775807"]),  # would train for ever
        (["--max_epochs", "-1"], ["max_epochs", "-1"]),
        (["--max_epochs", "0"], ["max_epochs"]),
        (["--batch_size", ".nan"], ["batch_size"]),
    ],
)
def test_a_value_that_overflows_or_makes_no_sense_is_refused_before_the_run(cli, tmp_path: Path, args, culprits):
    res = cli("run", "--bundle", BUNDLE, *TINY[:-6], *args, "--dataset_dir", str(tmp_path / "data"),
              "--output_dir", "r", cwd=tmp_path, timeout=300)
    _refused(res, *culprits)
    assert not (tmp_path / "r").exists()


def test_an_args_file_that_never_ends_is_refused_at_once(cli, tmp_path: Path):
    t0 = time.monotonic()
    res = cli("config", "--bundle", BUNDLE, "--args_file", "/dev/zero", cwd=tmp_path, timeout=60)
    _refused(res, "/dev/zero")
    assert time.monotonic() - t0 < 30


def test_a_sweep_of_a_billion_points_is_refused_at_once(cli, tmp_path: Path):
    t0 = time.monotonic()
    res = cli("sweep", "--bundle", BUNDLE, "--cluster", "local", "--sweep", "seed=range(1000000000)",
              "--output_dir", "sw", cwd=tmp_path, timeout=120)
    _refused(res, "points")
    assert time.monotonic() - t0 < 60 and not (tmp_path / "sw").exists()


@pytest.mark.slow
def test_resume_of_ten_billion_points_is_refused_at_once(cli, finished, tmp_path: Path):
    sweep = _copy(finished["sweep"], tmp_path / "sweep")
    t0 = time.monotonic()
    res = cli("resume", str(sweep), "--points", "0-10000000000", cwd=tmp_path, timeout=120)
    _refused(res, "--points")
    assert time.monotonic() - t0 < 60


@pytest.mark.parametrize(
    ("args", "culprits"),
    [
        (["--pruner-option", "reduction_factor=-1"], ["reduction_factor"]),
        (["--sampler-seed", "-1"], ["--sampler-seed"]),
        (["--trials", "0"], ["--trials"]),
    ],
)
def test_tune_options_that_make_no_sense_are_refused(cli, tmp_path: Path, args, culprits):
    pytest.importorskip("optuna")
    res = cli("tune", "--bundle", BUNDLE, "--cluster", "local", "--space", "learning_rate=loguniform(1e-4,1e-2)",
              "--trials", "2", "--metric", "val_dice", "--pruner", "asha", *args, "--output_dir", "t", cwd=tmp_path)
    _refused(res, *culprits)
    assert not (tmp_path / "t").exists()


# ---------------------------------------------------------------- odd environments


def test_a_non_ascii_id_with_an_ascii_terminal_is_one_paragraph(cli, tmp_path: Path):
    res = cli("config", "--config_file", "grüße.yaml", cwd=tmp_path, env={"PYTHONIOENCODING": "ascii"})
    _refused(res, "gr\\xfc\\xdfe.yaml")


def _mounted(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    return res.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["read-only", "full"])
def test_an_output_filesystem_that_refuses_writes_is_bad_input_leaving_nothing(cli, tmp_path: Path, kind: str):
    mount = tmp_path / "mnt"
    if not _mounted(mount, "ro,size=64k" if kind == "read-only" else "size=24k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        res = cli("run", "--bundle", BUNDLE, *TINY, "--dataset_dir", str(tmp_path / "data"),
                  "--output_dir", str(mount / "run"), cwd=tmp_path)
        _refused(res, str(mount / "run"))
        assert not (mount / "run").exists() or kind == "read-only"
        assert list(mount.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.slow
def test_a_checkpoint_that_runs_code_is_refused_as_bad_input_leaving_nothing(cli, finished, tmp_path: Path):
    import pickle

    marker = tmp_path / "MARK"

    class Evil:
        def __reduce__(self):
            import os

            return os.system, (f"touch {marker}",)

    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"network": Evil()}))
    res = cli("run", "inference", "--bundle", BUNDLE, "--ckpt", str(tmp_path / "evil.pt"), "--num_val", "1",
              "--dataset_dir", str(finished["run"].parent / "data"), "--output_dir", "inf", cwd=tmp_path)
    _refused(res, "evil.pt")
    assert not marker.exists() and not (tmp_path / "inf").exists()


@pytest.mark.slow
def test_a_logging_file_that_fails_is_bad_input_leaving_nothing(cli, tmp_path: Path):
    (tmp_path / "bad.conf").write_text("[loggers]\nkeys=root\n[logger_root]\nhandlers=nothere\n")
    res = cli("run", "--bundle", BUNDLE, *TINY, "--dataset_dir", str(tmp_path / "data"),
              "--logging_file", "bad.conf", "--output_dir", "r", cwd=tmp_path)
    _refused(res, "bad.conf")
    assert not (tmp_path / "r").exists()
