"""A request without a partition gets one that fits it: decisions on sinfo's text (the local SLURM's golden
output, and a JADE-like cluster whose default partition holds neither long CPU jobs nor 4-GPU jobs)."""

from __future__ import annotations

from pathlib import Path

from hpc_runner.scheduler.profile import ClusterProfile
from hpc_runner.scheduler.slurm.partition_choice import Request, choose_partition
from hpc_runner.scheduler.slurm.profile_init import parse_sinfo

GOLDEN = Path(__file__).with_name("golden") / "sinfo_partitions.txt"
JADE_LIKE = """\
small*|up|1-00:00:00|10|40|512000|gpu:2
big|up|1-00:00:00|5|40|512000|gpu:8
devel|up|1:00:00|2|40|512000|gpu:8
long|up|3-00:00:00|20|64|256000|(null)
"""


def _request(**settings: object) -> Request:
    return Request.of(ClusterProfile("p", [], {"time": 60, "cpus_per_task": 1, **settings}))


def test_the_default_partition_is_kept_when_it_holds_the_job() -> None:
    assert choose_partition(parse_sinfo(GOLDEN.read_text()), _request(gpus_per_node=2, time="2-00:00:00")) \
        == (None, "")
    assert choose_partition(parse_sinfo(JADE_LIKE), _request(gpus_per_node=1, time=240)) == (None, "")


def test_a_job_the_default_cannot_hold_goes_where_it_fits_and_the_reason_is_said() -> None:
    parts = parse_sinfo(JADE_LIKE)
    name, why = choose_partition(parts, _request(time="2-00:00:00"))  # a 2-day CPU job
    assert name == "long" and "the default partition small allows 1-00:00:00, the job asks 2880 min" in why
    name, why = choose_partition(parts, _request(gres="gpu:4", time=600))
    assert name == "big" and "has 2 GPU(s) per node, the job asks 4" in why  # devel's hour is too short
    # nothing fits (8 GPUs for 2 days): no choice, the pre-flight's sbatch --test-only says why
    assert choose_partition(parts, _request(gpus_per_node=8, time="2-00:00:00")) == (None, "")


def test_a_cpu_job_is_not_sent_to_the_gpu_nodes_when_another_partition_takes_it() -> None:
    parts = parse_sinfo(JADE_LIKE.replace("small*|up|1-00:00:00|10|40", "small*|up|1-00:00:00|10|4"))
    name, _ = choose_partition(parts, _request(cpus_per_task=16, time=120))  # small has 4 CPUs per node
    assert name == "long"  # big and devel would hold it too, but with 8 GPUs idle
