"""MONAI's own bundle `run` scenarios as the spec: each argv runs through `python -m monai.bundle run` and through
`python -m hpc_runner run`, and both must exit alike, print the same values and leave the same files.

Ported from MONAI's tests/integration/test_integration_bundle_run.py, tests/bundle/test_bundle_utils.py,
tests/bundle/test_bundle_workflow.py and tests/bundle/test_config_parser.py (see data/README.md), with the
volumes at 64³ and MONAI 1.6.1's behaviour where it changed (MLflow stores are SQLite: MLflow 3 refuses the
file store). Where MONAI fails with a traceback (exit 1) on bad input, hpc-runner refuses with one paragraph
and exit 2: the scenario says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from side_by_side import DATA, HPCR, MONAI, compare_artefacts, explain, run_both

pytestmark = pytest.mark.slow  # two processes each importing torch and MONAI: 8-40 s a scenario

TINY_META = {"version": "0.1.0", "monai_version": "1.1.0", "pytorch_version": "2.3.0", "numpy_version": "1.22.2"}


def write_json(path: Path, data: object) -> None:
    """Write ``data`` as JSON (folders made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))


def tiny(root: Path, *, meta: bool = True) -> None:
    """test_tiny's folder: a config whose `training` id runs a component checking its value."""
    shutil.copy(DATA / "runnables.py", root)
    write_json(root / "tiny_config.json", {"trainer": {"_target_": "runnables.Runnable42", "val": 42},
                                           "training": "$@trainer.run()"})
    if meta:
        write_json(root / "tiny_meta.json", TINY_META)


def scripts_fold(root: Path) -> None:
    """test_scripts_fold's folder: the config imports the bundle's scripts/ package."""
    shutil.copy(DATA / "runnables.py", root)
    trainer = {"_target_": "runnables.Runnable43", "func": "$scripts.tiny_test"}
    write_json(root / "tiny_config.json", {"imports": ["$import scripts"], "trainer": trainer,
                                           "training": "$@trainer.run()"})
    write_json(root / "tiny_meta.json", TINY_META)
    (root / "scripts").mkdir()
    (root / "scripts" / "test_scripts_fold.py").write_text(
        "def tiny_test():\n    print('successfully added scripts fold!')\n")
    (root / "scripts" / "__init__.py").write_text("from .test_scripts_fold import tiny_test\n")


def image(path: Path, shape: tuple[int, ...] = (64, 64, 64)) -> None:
    """A random NIfTI volume, the same in every folder (seeded)."""
    import nibabel as nib
    import numpy as np

    data = np.random.default_rng(0).random(shape).astype("float32")
    nib.save(nib.Nifti1Image(data, np.eye(4)), str(path))


def shape_folder(config: str) -> callable:
    """test_shape's folder: MONAI's inference config, a YAML metadata file naming one 64³ image, an args file
    with the logging config, MLflow settings with a handler of their own, and two files for `%` macros."""

    def setup(root: Path) -> None:
        import yaml

        for name in (config, "logging.conf"):
            shutil.copy(DATA / name, root)
        image(root / "image.nii")
        write_json(root / "def_args.json", {"config_file": "will be replaced by `config_file` arg",
                                            "logging_file": str(root / "logging.conf")})
        (root / "meta.yaml").write_text(yaml.safe_dump({"datalist": [{"image": str(root / "image.nii")}],
                                                        "window": [96, 96, 96]}))
        from monai.bundle.utils import DEFAULT_HANDLERS_ID

        write_json(root / "mlflow.json", {"handlers_id": DEFAULT_HANDLERS_ID, "configs": {
            "no_epoch": True,  # overridden on the command line: the settings file must not replace it
            "evaluator": {"_target_": "MLFlowHandler", "iteration_log": "@no_epoch",
                          "tracking_uri": "$'sqlite:///' + @output_dir + '/mlflow_override1.db'"}}})
        write_json(root / "override1.JSON", {"move_net": "$@network_def.to(@device)"})
        write_json(root / "jsons" / "override2.JSON", "Dataset")  # a whole file that is a string

    return setup


MACROS = ["--network", "%{root}/override1.JSON#move_net", "--dataset#_target_", "%{root}/jsons/override2.JSON"]
CPU = ["--device", "$torch.device('cpu')"]


def assert_same(outcomes, *, code: int = 0, printed: tuple[str, ...] = (), json_ignore: tuple[str, ...] = ()
                ) -> None:
    """Both runners exited with ``code``, printed each of ``printed`` and made the same files."""
    assert outcomes[MONAI].code == code and outcomes[HPCR].code == code, explain(outcomes)
    for text in printed:
        assert text in outcomes[MONAI].printed and text in outcomes[HPCR].printed, (text, explain(outcomes))
    assert compare_artefacts(outcomes, json_ignore) == [], explain(outcomes)


# ---- tests/integration/test_integration_bundle_run.py ---------------------------------------------------------
def test_tiny_config_runs_the_training_id_with_a_four_field_metadata_file(tmp_path: Path) -> None:
    outcomes = run_both(tmp_path, tiny, ["training", "--config_file", "tiny_config.json", "--meta_file",
                                         "tiny_meta.json"])
    assert_same(outcomes, printed=("Runnable42 ran with 42",))


def test_tiny_config_without_the_id_to_run_fails_in_both(tmp_path: Path) -> None:
    outcomes = run_both(tmp_path, tiny, ["run", "--config_file", "tiny_config.json"])
    assert outcomes[MONAI].code == 1 and "run ID 'run' doesn't exist" in outcomes[MONAI].stderr, explain(outcomes)
    assert outcomes[HPCR].code == 2 and "entry 'run' is not an id of the config" in outcomes[HPCR].stderr
    assert "training" in outcomes[HPCR].stderr  # what the config has to run
    assert compare_artefacts(outcomes) == [] and not outcomes[HPCR].made  # refused before a run dir exists


def test_tiny_config_without_metadata_runs_and_says_so(tmp_path: Path) -> None:
    outcomes = run_both(tmp_path, lambda root: tiny(root, meta=False), ["training", "--config_file",
                                                                      "tiny_config.json"])
    assert_same(outcomes, printed=("metadata.json",))
    assert "ERROR" in outcomes[MONAI].printed and "no metadata file" in outcomes[HPCR].stderr


@pytest.mark.parametrize("meta", [True, False], ids=["with-metadata", "without-metadata"])
def test_the_scripts_folder_beside_the_config_is_importable(tmp_path: Path, meta: bool) -> None:
    def setup(root: Path) -> None:
        scripts_fold(root)
        if not meta:
            (root / "tiny_meta.json").unlink()

    argv = ["training", "--config_file", "tiny_config.json"] + (["--meta_file", "tiny_meta.json"] if meta else [])
    assert_same(run_both(tmp_path, setup, argv), printed=("successfully added scripts fold!",))


@pytest.mark.parametrize("config", ["inference.json", "inference.yaml"])
def test_inference_with_macros_new_ids_an_args_file_and_mlflow_settings(tmp_path: Path, config: str) -> None:
    """test_shape, first command: `%file#id` and a `%file` holding a string, a deep id naming a list item and a new
    top-level id (--no_epoch), a free-form YAML metadata file, --args_file, and --tracking with a settings file
    whose handler logs to its own store; MONAI saves the executed config as config_<time>.json."""
    argv = ["--postprocessing#transforms#2#output_postfix", "seg", *MACROS, "--no_epoch", "False",
            "--output_dir", "{root}/out", *CPU, "--meta_file", "meta.yaml", "--config_file", config,
            "--args_file", "def_args.json", "--tracking", "mlflow.json"]
    outcomes = run_both(tmp_path, shape_folder(config), argv)
    name = config.split(".")[1]
    assert_same(outcomes, printed=(f"{name}_test", "prediction shape:torch.Size([1, 64, 64, 64])"))
    assert {"out/image/image_seg.nii.gz", "out/mlflow_override1.db", "out/config_<time>.json"} <= set(
        outcomes[HPCR].made)


def test_inference_tracked_by_mlflow_into_the_users_store_only(tmp_path: Path) -> None:
    """test_shape, second command (MONAI's through google fire): `--tracking mlflow --tracking_uri URI` logs to that
    store, hpc-runner's own MLflow run included (one run, one store), and nowhere else."""
    argv = ["--tracking", "mlflow", "--evaluator#amp", "False", "--tracking_uri",
            "sqlite:///{root}/out/mlflow_override2.db", *MACROS, "--output_dir", "{root}/out", *CPU,
            "--meta_file", "meta.yaml", "--config_file", "inference.json"]
    outcomes = run_both(tmp_path, shape_folder("inference.json"), argv,
                        monai_command=("-m", "fire", "monai.bundle.scripts", "run"))
    # the executed config differs in two values only: hpc-runner names its own MLflow run's experiment and run
    # there, so MONAI's handler logs into that run (one run per run dir) instead of a new one
    names = ("experiment_name", "run_name")
    assert_same(outcomes, printed=("prediction shape:torch.Size([1, 64, 64, 64])",), json_ignore=names)
    executed = {k: json.loads(o.made["out/config_<time>.json"].read_text()) for k, o in outcomes.items()}
    assert [executed[MONAI][n] for n in names] == ["monai_experiment", None]
    assert [executed[HPCR][n] for n in names] == ["inference", "out"]
    made = set(outcomes[HPCR].made)
    assert {"out/image/image_trans.nii.gz", "out/mlflow_override2.db", "out/config_<time>.json"} <= made
    for outcome in outcomes.values():  # no second store anywhere (it used to be mlflow.db in the working dir)
        assert [p.name for p in outcome.root.rglob("*.db")] == ["mlflow_override2.db"], explain(outcomes)
    from mlflow import MlflowClient

    ours = outcomes[HPCR].root / "out"
    run_id = json.loads((ours / "mlflow-run.json").read_text())["run_id"]
    client = MlflowClient(tracking_uri=f"sqlite:///{ours / 'mlflow_override2.db'}")
    assert client.get_run(run_id).info.status == "FINISHED"


# ---- tests/bundle/test_bundle_utils.py ------------------------------------------------------------------------
def test_a_new_id_given_as_an_expression_runs_as_the_entry(tmp_path: Path) -> None:
    """`run test --test "$print('hello world')"`: the override adds the id that is run."""

    def setup(root: Path) -> None:
        write_json(root / "configs" / "metadata.json", {"test_value": 1, "test_list": [2, 3]})
        write_json(root / "configs" / "test.json", {
            "test_dict": {"a": 3, "b": "c"},
            "network_def": {"_target_": "UNet", "spatial_dims": 2, "in_channels": 1, "out_channels": 1,
                            "channels": [4, 8], "strides": [2]}})

    argv = ["test", "--test", "$print('hello world')", "--config_file", "configs/test.json", "--meta_file",
            "configs/metadata.json"]
    assert_same(run_both(tmp_path, setup, argv), printed=("hello world",))


# ---- tests/bundle/test_bundle_workflow.py (ConfigWorkflow's overrides, on the command line) ----------------------
@pytest.mark.parametrize("config", ["inference.json", "inference.yaml"])
def test_inference_config_with_a_literal_datalist_and_a_new_key_in_a_list_item(tmp_path: Path, config: str) -> None:
    def setup(root: Path) -> None:
        for name in (config, "logging.conf"):
            shutil.copy(DATA / name, root)
        image(root / "image.nii")

    argv = ["--network", "$@network_def.to(@device)", "--dataset#_target_", "Dataset", "--dataset#data",
            "[{'image': '{root}/image.nii'}]", "--postprocessing#transforms#2#output_postfix", "seg",
            "--output_dir", "{root}/out", "--logging_file", "logging.conf", "--config_file", config]
    outcomes = run_both(tmp_path, setup, argv)
    assert_same(outcomes, printed=("test finalize section.",) if config.endswith("yaml") else ())
    assert "out/image/image_seg.nii.gz" in outcomes[HPCR].made


def test_train_config_with_explicit_init_run_and_final_ids(tmp_path: Path) -> None:
    def setup(root: Path) -> None:
        import numpy as np
        from PIL import Image

        shutil.copy(DATA / "config_fl_train.json", root)
        shutil.copy(DATA / "logging.conf", root)
        folder = root / "tests" / "testing_data"  # the config's bundle_root, relative to where it runs
        folder.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for i in range(2):
            Image.fromarray((rng.random((64, 64)) * 255).astype("uint8")).save(folder / f"image{i}.jpeg")

    argv = ["--init_id", "initialize", "--run_id", "run", "--final_id", "finalize", "--config_file",
            "config_fl_train.json", "--logging_file", "logging.conf", "--train#trainer#max_epochs", "1"]
    assert_same(run_both(tmp_path, setup, argv), printed=("Epoch[1] Complete",))


# ---- --init_id / --final_id with ids other than MONAI's defaults (scripts.run's documented example) -------------
def steps(root: Path) -> None:
    """A config whose default initialize/finalize say so, beside the steps the command names."""
    write_json(root / "steps.json", {"initialize": "$print('default initialize')", "setup": "$print('setup ran')",
                                     "go": ["$print('go ran')"], "teardown": "$print('teardown ran')",
                                     "finalize": "$print('default finalize')"})
    write_json(root / "args.json", {"config_file": "steps.json", "run_id": "go", "init_id": "setup",
                                    "final_id": "teardown"})


@pytest.mark.parametrize("how", ["command-line", "args-file"])
def test_init_and_final_ids_name_the_steps_around_the_run(tmp_path: Path, how: str) -> None:
    argv = (["--run_id", "go", "--init_id", "setup", "--final_id", "teardown", "--config_file", "steps.json"]
            if how == "command-line" else ["--args_file", "args.json"])
    outcomes = run_both(tmp_path, steps, argv)
    assert_same(outcomes)
    for outcome in outcomes.values():
        lines = [ln for ln in outcome.stdout.splitlines() if ln.endswith(" ran") or ln.startswith("default")]
        assert lines == ["setup ran", "go ran", "teardown ran"], explain(outcomes)


# ---- tests/bundle/test_config_parser.py (duplicate keys and merged files, through `run`) -------------------------
DUPLICATED = {
    "json": '{"key": {"unique": 1, "duplicate": 0, "duplicate": 4}, "run": "$print(\'duplicate is\', @key#duplicate)"}',
    "yaml": "key:\n  unique: 1\n  duplicate: 0\n  duplicate: 4\nrun: \"$print('duplicate is', @key#duplicate)\"\n",
}


@pytest.mark.parametrize("fmt", sorted(DUPLICATED))
def test_a_duplicate_key_warns_and_the_last_value_wins(tmp_path: Path, fmt: str) -> None:
    outcomes = run_both(tmp_path, lambda root: (root / f"config.{fmt}").write_text(DUPLICATED[fmt]),
                        ["--config_file", f"config.{fmt}"])
    assert_same(outcomes, printed=("duplicate is 4", "Duplicate key: `duplicate`"))


@pytest.mark.parametrize("fmt", sorted(DUPLICATED))
def test_a_duplicate_key_fails_with_monai_fail_on_duplicate_config(tmp_path: Path, fmt: str) -> None:
    outcomes = run_both(tmp_path, lambda root: (root / f"config.{fmt}").write_text(DUPLICATED[fmt]),
                        ["--config_file", f"config.{fmt}"], env={"MONAI_FAIL_ON_DUPLICATE_CONFIG": "1"})
    assert outcomes[MONAI].code == 1 and outcomes[HPCR].code == 2, explain(outcomes)
    for outcome in outcomes.values():
        assert "Duplicate key: `duplicate`" in outcome.stderr and "duplicate is" not in outcome.stdout
    assert f"config.{fmt}:" in outcomes[HPCR].stderr and "Traceback" not in outcomes[HPCR].stderr
    assert compare_artefacts(outcomes) == [] and not outcomes[HPCR].made


def test_a_later_file_replaces_a_key_and_merges_a_plus_key(tmp_path: Path) -> None:
    def setup(root: Path) -> None:
        write_json(root / "config1.json", {"key1": [0], "key2": [0], "run": "$print('merged', @key1, @key2)"})
        write_json(root / "config2.json", {"key1": [1], "+key2": [4]})

    outcomes = run_both(tmp_path, setup, ["--config_file", "['config1.json','config2.json']"])
    assert_same(outcomes, printed=("merged [1] [0, 4]",))


# ---- a zoo config the pre-flight refused (ventricular_short_axis_3label's dataset) -------------------------------
def test_a_dataset_with_a_keys_mapping_named_images_is_not_taken_for_a_path(tmp_path: Path) -> None:
    def setup(root: Path) -> None:
        import numpy as np

        np.savez(root / "data.npz", images=np.zeros((2, 1, 8, 8), "float32"), segs=np.zeros((2, 1, 8, 8), "uint8"))
        write_json(root / "train.json", {
            "bundle_root": ".",
            "dataset": {"_target_": "NPZDictItemDataset", "npzfile": "$@bundle_root + '/data.npz'",
                        "keys": {"images": "image", "segs": "label"}},
            "run": ["$print('items', len(@dataset))"]})

    assert_same(run_both(tmp_path, setup, ["--config_file", "train.json"]), printed=("items 2",))
