"""The launcher's variables: a value that is not an integer, or a rank outside the world, is named."""

from __future__ import annotations

import pytest

from hpc_runner.engine.launch_env import check_launch_env, env_int, launched_world, local_rank, node_rank
from hpc_runner.errors import ClusterError

SRUN = {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_STEP_ID": "0", "SLURM_LOCALID": "1", "SLURM_NODEID": "0"}
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "GROUP_RANK": "0"}


def test_each_variable_that_is_read_as_a_number_is_named_with_its_value_when_it_is_not_one():
    for base in (SRUN, TORCHRUN):
        for name in base:
            if name == "SLURM_STEP_ID":
                continue  # only its presence says "inside a step"
            env = {**base, name: "abc"}
            with pytest.raises(ClusterError, match=f"{name}='abc' is not an integer"):
                check_launch_env(env)


def test_a_rank_outside_the_world_is_refused():
    with pytest.raises(ClusterError, match="0 <= RANK < WORLD_SIZE"):
        launched_world({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(ClusterError, match="SLURM_PROCID"):
        launched_world({**SRUN, "SLURM_PROCID": "-1"})


def test_well_formed_variables_give_rank_world_local_rank_and_node():
    assert check_launch_env(SRUN) == (1, 2) and local_rank(SRUN) == 1 and node_rank({**SRUN, "SLURM_NODEID": "3"}) == 3
    assert check_launch_env(TORCHRUN) == (1, 2) and local_rank(TORCHRUN) == 1
    assert check_launch_env({}) == (0, 1)
    assert env_int({"X": " 7 "}, "X") == 7 and env_int({"X": ""}, "X", 3) == 3
