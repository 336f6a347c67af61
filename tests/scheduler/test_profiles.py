"""Cluster profiles: built-ins, the user's folders, extends, unknown names and keys, submitit parameters."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.profiles import (
    BUILTIN_DIR,
    available_profiles,
    load_profile,
    parse_setting_overrides,
    parse_time_minutes,
)
from hpc_runner.scheduler.slurm.executor import slurm_parameters


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "user").mkdir()
    return {"HPCR_CLUSTER_PATH": str(tmp_path / "user"), "HOME": str(tmp_path / "home")}


def test_builtin_profiles_load_and_map_to_submitit(env):
    assert {"jade", "slurm", "local"} <= set(available_profiles(env))
    jade = load_profile("jade", environ=env)
    assert jade.executor == "slurm" and jade.get("partition") == "small"
    params = slurm_parameters(jade, job_name="x")
    assert params["gpus_per_node"] == 1 and params["time"] == 24 * 60 and params["mem"] == "32GB"
    assert params["additional_parameters"]["export"] == "ALL,PYTHONUNBUFFERED=1"
    assert any(line.startswith("module load") for line in params["setup"])
    assert load_profile("local", environ=env).executor == "local"
    assert "partition" not in slurm_parameters(load_profile("slurm", environ=env), job_name="x")


def test_user_profile_extends_a_builtin_and_wins_over_it(env, tmp_path):
    user = Path(env["HPCR_CLUSTER_PATH"])
    (user / "mine.yaml").write_text("extends: jade\npartition: big\ngpus_per_node: 4\naccount: proj1\n")
    (user / "slurm.yaml").write_text("partition: override\n")  # shadows the built-in of the same name
    mine = load_profile("mine", environ=env)
    assert mine.get("partition") == "big" and mine.get("gpus_per_node") == 4 and mine.get("cpus_per_task") == 5
    assert mine.sources == [BUILTIN_DIR / "jade.yaml", user / "mine.yaml"]
    assert load_profile("slurm", environ=env).get("partition") == "override"
    params = slurm_parameters(mine, job_name="x", hold=True, array_parallelism=3)
    assert params["account"] == "proj1" and params["array_parallelism"] == 3
    assert params["additional_parameters"]["hold"] is True


def test_xdg_config_home_is_searched(tmp_path):
    folder = tmp_path / "xdg" / "hpc-runner" / "clusters"
    folder.mkdir(parents=True)
    (folder / "lab.yaml").write_text("partition: lab\n")
    assert load_profile("lab", environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg")}).get("partition") == "lab"


def test_profile_by_path(tmp_path, env):
    path = tmp_path / "p.yaml"
    path.write_text("extends: slurm\ntime: '02:00:00'\n")
    assert load_profile(str(path), environ=env).time_minutes() == 120


def test_unknown_profile_lists_the_valid_names(env):
    with pytest.raises(ClusterError) as err:
        load_profile("jadee", environ=env)
    text = err.value.paragraph()
    assert "unknown cluster profile 'jadee'" in text
    assert "jade, local, sge-local, slurm" in text and "Did you mean: jade" in text


def test_unknown_key_names_the_file_and_the_valid_keys(env):
    (Path(env["HPCR_CLUSTER_PATH"]) / "bad.yaml").write_text("partiton: gpu\n")
    with pytest.raises(ClusterError) as err:
        load_profile("bad", environ=env)
    text = err.value.paragraph()
    assert "bad.yaml" in text and "unknown key partiton" in text
    assert "Did you mean: partition?" in text and "cpus_per_task" in text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpus_per_node: two\n", "gpus_per_node"),
        ("time: soon\n", "not a time limit"),
        ("export: SOME\n", "export base"),
        ("env: {A: 'x,y'}\n", "sbatch --export"),
        ("executor: pbs\n", "executor"),
        ("setup: module load x\n", "setup"),
        ("- a\n- b\n", "mapping"),
        ("extends: bad2\n", "circle"),
    ],
)
def test_bad_values_are_clear_errors(env, text, message):
    user = Path(env["HPCR_CLUSTER_PATH"])
    (user / "bad2.yaml").write_text(text)
    with pytest.raises(ClusterError, match=message):
        load_profile("bad2", environ=env)


def test_partition_must_be_one_the_profile_lists(env):
    with pytest.raises(ClusterError, match="partition 'gpu' is not one of this cluster's partitions"):
        load_profile("jade", {"partition": "gpu"}, environ=env)


def test_setting_overrides_from_the_command_line(env):
    changes = parse_setting_overrides(["partition=gpu", "time=00:30:00", "cpus-per-task=2", "qos=null"])
    assert changes == {"partition": "gpu", "time": "00:30:00", "cpus_per_task": 2, "qos": None}
    profile = load_profile("slurm", changes, environ=env)
    assert profile.time_minutes() == 30 and profile.get("cpus_per_task") == 2
    with pytest.raises(ClusterError, match="KEY=VALUE"):
        parse_setting_overrides(["partition"])
    with pytest.raises(ClusterError, match="unknown key"):
        load_profile("slurm", {"nope": 1}, environ=env)


@pytest.mark.parametrize(
    ("value", "minutes"),
    [(30, 30), ("30", 30), ("1:30", 2), ("02:00:00", 120), ("1-0", 1440), ("1-2:30", 1590), ("0:0:30", 1)],
)
def test_time_formats(value, minutes):
    assert parse_time_minutes(value) == minutes


@pytest.mark.parametrize("value", ["soon", 0, "0:00", True, "1:2:3:4", None])
def test_bad_times(value):
    with pytest.raises(ClusterError):
        parse_time_minutes(value)


def test_one_registry_names_every_executor_and_the_keys_each_understands():
    from hpc_runner.scheduler.profile import COMMON_KEYS
    from hpc_runner.scheduler.profiles import check_settings
    from hpc_runner.scheduler.select import EXECUTORS, profile_keys

    assert {name: cls.kind for name, cls in EXECUTORS.items()} == {"slurm": "slurm", "gridengine": "gridengine",
                                                                   "local": "local", "memory": "memory"}
    keys = profile_keys()
    assert set(COMMON_KEYS) | {k for cls in EXECUTORS.values() for k in cls.profile_keys} == set(keys)
    check_settings({"executor": "local", "time": 5, "partition": "gpu"}, "p.yaml")  # any executor's key is known
    with pytest.raises(ClusterError, match="executor: 'pbs' is not known") as err:
        check_settings({"executor": "pbs"}, "p.yaml")
    assert err.value.expected == "slurm or gridengine or local or memory"
    with pytest.raises(ClusterError, match="partition"):  # SLURM's own check of its keys' values
        check_settings({"executor": "local", "partition": "a;b"}, "p.yaml")


def test_each_backends_profile_keys_are_the_fields_of_its_settings_dataclass():
    from dataclasses import fields

    from hpc_runner.scheduler.gridengine.executor import GridEngineExecutor
    from hpc_runner.scheduler.gridengine.settings import GridEngineSettings
    from hpc_runner.scheduler.profile import keys_help
    from hpc_runner.scheduler.slurm.executor import SlurmExecutor
    from hpc_runner.scheduler.slurm.settings import SlurmSettings

    assert list(SlurmExecutor.profile_keys) == [f.name for f in fields(SlurmSettings)]
    assert SlurmExecutor.profile_keys["mem_gb"] == ((int, float, type(None)), "memory per node in GB (a number)")
    ge = set(GridEngineExecutor.profile_keys)
    assert {"queue", "pe", "h_rt", "h_vmem", "project", "qsub_options", "gridengine"} <= ge
    assert not ge & set(SlurmExecutor.profile_keys)  # a Grid Engine profile holds Grid Engine's words
    assert any(line.startswith("h_vmem: memory per slot") for line in keys_help(GridEngineSettings))


def test_a_recorded_profile_comes_back_as_it_was_recorded(env):
    from hpc_runner.scheduler.profiles import ClusterProfile, checked_from_record

    jade = load_profile("jade", environ=env)
    back = checked_from_record(jade.to_record(), "run.yaml")
    assert (back.name, back.where, back.settings) == (jade.name, jade.where, jade.settings)
    assert ClusterProfile.from_record(None).name == "recorded"
    with pytest.raises(ClusterError, match="unknown key"):
        checked_from_record({"profile": "x", "settings": {"partitoin": "gpu"}}, "sweep.yaml")
    assert ClusterProfile.from_record({"settings": {"partitoin": "gpu"}}).get("partitoin") == "gpu"  # unchecked


def test_the_scheduler_option_help_lists_each_backends_keys_from_its_settings_only_when_shown():
    import subprocess
    import sys

    from hpc_runner.cli.slurm_options import add_cluster_arguments
    from hpc_runner.scheduler.select import scheduler_option_help

    text = scheduler_option_help()
    assert "gridengine: queue, pe, slots, h_rt, h_vmem, project, qsub_options" in text and "slurm: partition" in text
    parser = __import__("argparse").ArgumentParser(prog="x")
    add_cluster_arguments(parser)
    assert "h_vmem" in parser.format_help()
    # the keys are asked for when the help is shown, not when a command's parser is built
    code = ("import argparse; from hpc_runner.scheduler import select; from hpc_runner.cli import slurm_options; "
            "select.scheduler_option_help = lambda: 1 / 0; "
            "slurm_options.add_cluster_arguments(argparse.ArgumentParser()); print('built')")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "built"
