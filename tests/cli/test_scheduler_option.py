"""The option for raw scheduler settings has a neutral name; --slurm stays as its alias (issue 45)."""

from __future__ import annotations

import argparse

from hpc_runner.cli.slurm_options import add_cluster_arguments


def test_scheduler_option_and_its_slurm_alias_fill_the_same_list():
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser)
    args = parser.parse_args(["--scheduler-option", "time=02:00:00", "--slurm", "partition=gpu"])
    assert args.slurm == ["time=02:00:00", "partition=gpu"]
