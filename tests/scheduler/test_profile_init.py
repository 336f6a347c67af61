"""`hpc-runner cluster init`'s decisions (scheduler/slurm/profile_init.py) on what the local SLURM printed (golden
files recorded from it) and on a JADE-like cluster's lines; the command itself runs on the local SLURM in
tests/slurm/test_cluster_init.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.slurm.limits import parse_associations, parse_qos
from hpc_runner.scheduler.slurm.profile_init import parse_sinfo, profile_lines

GOLDEN = Path(__file__).parent / "golden"


def test_the_local_slurms_answers_make_a_profile_whose_every_value_says_where_it_came_from() -> None:
    partitions = parse_sinfo((GOLDEN / "sinfo_partitions.txt").read_text())
    assert [(p.name, p.default, p.cpus, p.mem_mb, p.gpus) for p in partitions] == [
        ("small", True, 2, 23081, 2), ("gpu", False, 2, 23081, 2)]
    lines = profile_lines(partitions, parse_associations((GOLDEN / "sacctmgr_assoc.txt").read_text()),
                          parse_qos((GOLDEN / "sacctmgr_qos.txt").read_text()), (1001, "scontrol show config"),
                          cluster_name="hpcr-local")
    found = {k: v for k, v, _ in lines}
    assert found == {"extends": "slurm", "description": "hpcr-local, partition small, one GPU a job",
                     "partition": "small", "partitions": ["small", "gpu"], "cpus_per_task": 1, "gpus_per_node": 1,
                     "mem_gb": 11, "time": "04:00:00", "account": "hpcr", "qos": "normal", "max_array_size": 1001}
    assert all(where for _, _, where in lines)
    assert "sinfo: the default partition (*)" in dict((k, w) for k, _, w in lines)["partition"]


def test_a_jade_like_partition_gives_a_gpu_share_the_qos_limit_and_a_time_within_the_partition() -> None:
    sinfo = ("small*|up|6-00:00:00|10|40|380000|gpu:v100:8(S:0-1)\n"
             "devel|up|1:00:00|2|40|380000|gpu:v100:8(S:0-1)\nbig|up|1-00:00:00|5|40|380000|gpu:v100:8(S:0-1)\n")
    assoc = "u|proj1|proj1||normal,devel|normal||\nu|proj1|proj2||normal|normal||\n"
    qos = "normal|40|\ndevel|2|\n"
    lines = profile_lines(parse_sinfo(sinfo), parse_associations(assoc), parse_qos(qos), (1001, "scontrol"))
    found = {k: v for k, v, _ in lines}
    assert (found["cpus_per_task"], found["gpus_per_node"], found["mem_gb"]) == (5, 1, 46)
    assert found["time"] == "04:00:00" and found["max_submit_jobs"] == 40 and found["account"] == "proj1"
    devel = {k: v for k, v, _ in profile_lines(parse_sinfo(sinfo), [], {}, (1001, "scontrol"), "devel")}
    assert devel["partition"] == "devel" and devel["time"] == "01:00:00"  # the partition's limit, if shorter
    with pytest.raises(ClusterError, match="'nope' is not one sinfo lists"):
        profile_lines(parse_sinfo(sinfo), [], {}, (1001, "scontrol"), "nope")
