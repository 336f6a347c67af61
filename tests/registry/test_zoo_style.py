"""Model-zoo compatibility: a zoo bundle's README commands run with `python -m hpc_runner run` as with MONAI.

The bundle (tests/registry/data/zoo_style_seg) is written like spleen_ct_segmentation: a free-text
name and the zoo's `schema` key, `imports`, `$` expressions, `#` ids, ignite SupervisedTrainer and
SupervisedEvaluator with handlers, evaluate.json merged over train.json as a list of files, and
inference writing NIfTI with SaveImaged. The commands run from the bundle folder, as the zoo READMEs do.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from registry_helpers import out

from hpc_runner.config.bundle_config import split_config_files
from hpc_runner.errors import ConfigError

ZOO_STYLE = Path(__file__).resolve().parent / "data" / "zoo_style_seg"
PAIR = [Path("configs/train.json"), Path("configs/evaluate.json")]


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A copy of the zoo-style bundle (its runs write models/ and runs/ inside it, as zoo runs do)."""
    return Path(shutil.copytree(ZOO_STYLE, tmp_path / "zoo_style_seg"))


@pytest.fixture
def spheres(tmp_path: Path) -> Path:
    """Three 32³ training volumes and one validation volume (img*/seg*, the names the bundle globs)."""
    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    ensure_synthetic_volumes(tmp_path / "data", num_train=3, num_val=1, size=32)
    return tmp_path / "data"


def _run_dir(proc) -> Path:
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("hpc-runner: done; results in "))
    return Path(line.removeprefix("hpc-runner: done; results in "))


@pytest.mark.parametrize(
    "value",
    [
        "['configs/train.json','configs/evaluate.json']",
        "['configs/train.json', 'configs/evaluate.json']",
        '["configs/train.json","configs/evaluate.json"]',
        '[ "configs/train.json" , "configs/evaluate.json" ]',
        "configs/train.json,configs/evaluate.json",
    ],
)
def test_config_file_accepts_python_lists_in_either_quotes_and_comma_lists(value: str) -> None:
    assert split_config_files([value]) == PAIR


def test_config_file_list_that_is_not_a_list_of_names_is_refused_naming_the_value() -> None:
    with pytest.raises(ConfigError, match=r"\[1, 2\]' is not a list of file names"):
        split_config_files(["[1, 2]"])


def test_config_file_list_from_the_readme_merges_evaluate_over_train(cli, bundle: Path) -> None:
    proc = cli("config", "--config_file", "['configs/train.json', 'configs/evaluate.json']", "--format", "json",
               cwd=bundle)
    assert proc.returncode == 0, out(proc)
    merged = json.loads(proc.stdout)
    assert merged["run"] == ["$@validate::evaluator.run()"]  # evaluate.json replaces run (ids shown with ::)
    assert merged["validate"]["dataset"]["cache_rate"] == 0  # a `#` id of evaluate.json
    assert [h["_target_"] for h in merged["validate"]["handlers"]] == ["CheckpointLoader", "StatsHandler",
                                                                      "MetricsSaver"]
    assert merged["train"]["trainer"]["_target_"] == "SupervisedTrainer"  # the rest comes from train.json


def test_free_text_name_loads_with_a_warning_while_verify_reports_the_stricter_check(cli, bundle: Path) -> None:
    loaded = cli("config", "--config_file", "configs/train.json", "--format", "json", cwd=bundle)
    assert loaded.returncode == 0, out(loaded)
    assert "'Zoo style segmentation' does not match" in loaded.stderr and "hpc-runner stricter check" in loaded.stderr
    verified = cli("verify", bundle, "--no-imports")
    assert verified.returncode == 2, out(verified)
    problems = verified.stdout.splitlines()
    assert [p for p in problems if "id 'name'" in p and "hpc-runner stricter check; MONAI's schema accepts it" in p]
    assert len(problems) == 1, verified.stdout  # nothing else: MONAI's schema accepts the rest
    # an overlay named after the file it extends is checked over that file, as the zoo README merges it
    assert "configs/inference_cpu.json over configs/inference.json" in verified.stderr


def test_init_and_final_ids_from_the_command_line_or_an_args_file_are_recorded_for_jobs(cli, bundle: Path) -> None:
    """MONAI's --init_id/--final_id name the ids run around ENTRY; run.yaml keeps them for jobs and resumes."""
    (bundle / "args.json").write_text(json.dumps({"config_file": "configs/train.json", "final_id": "teardown"}))
    proc = cli("config", "--args_file", "args.json", "--init_id", "setup", "--format", "json", cwd=bundle)
    assert proc.returncode == 0, out(proc)  # taken, not refused
    from hpc_runner.config.bundle_config import load_bundle_config
    from hpc_runner.engine.runner import prepare_run

    cfg = load_bundle_config(config_files=[str(bundle / "configs" / "train.json")], environ={})
    cfg.init_id, cfg.final_id = "setup", "teardown"
    run_dir, _ = prepare_run(cfg, None, bundle / "r")
    record = run_dir.record()
    assert (record["init_id"], record["final_id"]) == ("setup", "teardown")
    from hpc_runner.config.recorded import load_recorded_config

    again, _ = load_recorded_config(bundle / "r")
    assert (again.init_id, again.final_id) == ("setup", "teardown")


def test_an_unknown_tracking_kind_in_an_args_file_is_refused_like_the_flag(cli, bundle: Path) -> None:
    (bundle / "args.json").write_text(json.dumps({"config_file": "configs/train.json", "tracking": "wandb"}))
    proc = cli("run", "--args_file", "args.json", cwd=bundle)
    assert proc.returncode == 2, out(proc)
    assert "neither a tracking kind nor an existing settings file" in proc.stderr, proc.stderr
    assert not (bundle / "runs").exists()


def test_a_missing_logging_file_exits_2_naming_it(cli, bundle: Path) -> None:
    proc = cli("run", "--config_file", "configs/train.json", "--logging_file", "configs/nope.conf", cwd=bundle)
    assert proc.returncode == 2 and "configs/nope.conf: logging config file not found" in proc.stderr, out(proc)


def test_unknown_ids_are_added_as_monai_adds_them_with_a_typo_warning_or_refused_with_strict_ids(
    cli, bundle: Path
) -> None:
    (bundle / "configs" / "bare.json").write_text('{"epochs": 1}')
    proc = cli("config", "--config_file", "configs/bare.json", "--bundle_root", "/b", "--dataset_dir", "/d",
               "--format", "json", cwd=bundle)
    assert proc.returncode == 0, out(proc)
    assert json.loads(proc.stdout) | {"_meta_": None} == {"epochs": 1, "bundle_root": "/b", "dataset_dir": "/d",
                                                          "_meta_": None}
    assert "adds id" not in proc.stderr  # MONAI's own ids are added without a word
    typo = cli("config", "--config_file", "configs/bare.json", "--epoch", "2", "--format", "json", cwd=bundle)
    assert typo.returncode == 0 and json.loads(typo.stdout)["epoch"] == 2  # added, as MONAI's runner does
    assert "--epoch adds id 'epoch'" in typo.stderr and "did you mean epochs?" in typo.stderr
    strict = cli("config", "--config_file", "configs/bare.json", "--epoch", "2", "--strict-ids", cwd=bundle)
    assert strict.returncode == 2 and "Did you mean: epochs" in strict.stderr


@pytest.mark.slow
def test_readme_commands_train_evaluate_infer_leave_the_zoo_artefacts(cli, bundle: Path, spheres: Path) -> None:
    data = ["--dataset_dir", spheres]
    train = cli("run", "--config_file", "configs/train.json", *data, cwd=bundle, timeout=240)
    assert train.returncode == 0, out(train)
    assert (bundle / "models" / "model.pt").is_file()  # CheckpointSaver under bundle_root, as with MONAI
    log = (bundle / _run_dir(train) / "log.txt").read_text()
    assert "Epoch[1] Complete" in log and "val_mean_dice" in log  # ignite's logging, via configs/logging.conf

    evaluate = cli("run", "--config_file", "['configs/train.json','configs/evaluate.json']", *data, cwd=bundle,
                   timeout=240)
    assert evaluate.returncode == 0, out(evaluate)
    run_dir = bundle / _run_dir(evaluate)
    rows = list(csv.reader((run_dir / "val_mean_dice_raw.csv").open()))
    assert rows[0][0] == "filename" and len(rows) == 2  # one validation volume, from MetricsSaver
    assert (run_dir / "metrics.csv").read_text().startswith("val_mean_dice")

    infer = cli("run", "--config_file", "configs/inference.json", *data, cwd=bundle, timeout=240)
    assert infer.returncode == 0, out(infer)
    prediction = bundle / _run_dir(infer) / "img003" / "img003_seg.nii.gz"
    import nibabel as nib

    assert nib.load(prediction).shape == (32, 32, 32)  # SaveImaged, inverted back to the input grid


@pytest.mark.slow
def test_readme_flags_of_the_segmentation_template_run_from_another_folder(cli, tmp_path: Path, bundle: Path,
                                                                           spheres: Path) -> None:
    # docs/train.sh of the zoo's segmentation_template: absolute --meta_file/--config_file, --bundle_root,
    # --logging_file, from any working directory
    proc = cli("run", "--meta_file", bundle / "configs" / "metadata.json", "--logging_file",
               bundle / "configs" / "logging.conf", "--config_file", f"['{bundle}/configs/train.json']",
               "--bundle_root", bundle, "--dataset_dir", spheres, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, out(proc)
    assert (bundle / "models" / "model.pt").is_file()  # relative to --bundle_root, not the working directory
    assert " - ignite.engine.engine.SupervisedTrainer - INFO - " in proc.stdout  # the logging file's format
