"""What each point used: the one sacct call's text (real output of the local cluster), folded and read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpc_runner.jobs.states import PointState
from hpc_runner.jobs.usage import MB, cpu_efficiency, point_usage, sampled_gpu
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING
from hpc_runner.scheduler.job_status import JobState
from hpc_runner.scheduler.slurm.accounting import (
    fold_steps,
    mem_request_bytes,
    parse_duration_s,
    parse_sacct,
    parse_size_bytes,
    parse_tres,
)

# sacct -D --parsable2 -o SACCT_FIELDS on the local cluster: job 12 trained 64 s on 2 CPUs; job 16 was
# requeued once (its first attempt's steps must not count); 42_1 timed out; 42_5's steps have no MaxRSS
# (shorter than JobAcctGatherFrequency=30)
SACCT = """\
JobID|State|Elapsed|ExitCode|Timelimit|TotalCPU|AllocCPUS|ReqMem|MaxRSS|TRESUsageInAve|TRESUsageInMax
12|COMPLETED|00:01:04|0:0|00:10:00|00:30.789|2|23081M|||
12.batch|COMPLETED|00:01:04|0:0||00:00.021|2||12180K|cpu=00:00:00,energy=0,fs/disk=38832,mem=12180K,pages=0,vmem=221016K|cpu=00:00:00,energy=0,fs/disk=38832,mem=12180K,pages=0,vmem=221016K
12.0|COMPLETED|00:01:04|0:0||00:30.767|2||620768K|cpu=00:00:14,energy=0,fs/disk=121997138,mem=620206K,pages=1,vmem=1881478K|cpu=00:00:14,energy=0,fs/disk=122231195,mem=620768K,pages=2,vmem=1918968K
16|REQUEUED|00:00:49|0:0|00:10:00|00:24.747|2|23081M|||
16.batch|FAILED|00:00:50|15:0||00:00.024|2||12308K|cpu=00:00:00,energy=0,fs/disk=36628,mem=12308K,pages=0,vmem=221016K|cpu=00:00:00,energy=0,fs/disk=36628,mem=12308K,pages=0,vmem=221016K
16.0|CANCELLED|00:00:50|0:15||00:24.723|2||953160K|cpu=00:00:07,energy=0,fs/disk=83052536,mem=451438K,pages=0,vmem=1146476K|cpu=00:00:07,energy=0,fs/disk=83388835,mem=953160K,pages=0,vmem=1146912K
16|COMPLETED|00:00:51|0:0|00:10:00|00:25.683|2|23081M|||
16.batch|COMPLETED|00:00:51|0:0||00:00.019|2||11940K|cpu=00:00:00,energy=0,fs/disk=36628,mem=11940K,pages=0,vmem=221016K|cpu=00:00:00,energy=0,fs/disk=36628,mem=11940K,pages=0,vmem=221016K
16.0|COMPLETED|00:00:51|0:0||00:25.664|2||454060K|cpu=00:00:07,energy=0,fs/disk=82523321,mem=449628K,pages=0,vmem=1144584K|cpu=00:00:07,energy=0,fs/disk=83441051,mem=454060K,pages=0,vmem=1149012K
42_1|TIMEOUT|00:01:04|0:0|00:01:00|00:08.297|1|23081M|||
42_1.batch|CANCELLED|00:01:04|0:15||00:00.003|1||11932K|cpu=00:00:00,energy=0,fs/disk=32703,mem=11932K,pages=0,vmem=221012K|cpu=00:00:00,energy=0,fs/disk=32703,mem=11932K,pages=0,vmem=221012K
42_1.0|CANCELLED|00:01:09|0:9||00:08.293|1||541708K|cpu=00:00:08,energy=0,fs/disk=112993623,mem=541708K,pages=0,vmem=1202708K|cpu=00:00:08,energy=0,fs/disk=112993623,mem=541708K,pages=0,vmem=1202708K
42_5|COMPLETED|00:00:15|0:0|00:10:00|00:13.207|1|23081M|||
42_5.batch|COMPLETED|00:00:15|0:0||00:00.017|1|||energy=0|
42_5.0|COMPLETED|00:00:15|0:0||00:13.189|1|||energy=0|
"""
# the TRES fields of a site that gathers GPU usage (AcctGatherGpu, SLURM >= 23.02), as sacct prints them
GPU_SACCT = """\
JobID|State|Elapsed|ExitCode|Timelimit|TotalCPU|AllocCPUS|ReqMem|MaxRSS|TRESUsageInAve|TRESUsageInMax
77_0|COMPLETED|02:00:00|0:0|04:00:00|03:00:00|8|32G|||
77_0.0|COMPLETED|02:00:00|0:0||03:00:00|8||3G|cpu=01:30:00,gres/gpumem=8000M,gres/gpuutil=35,mem=2G|cpu=03:00:00,gres/gpumem=10G,gres/gpuutil=90,mem=3G
"""


def state(job_id: str | None, run_dir: Path, index: int = 0) -> PointState:
    return PointState(index, run_dir, {}, job_id, "COMPLETED", FROM_ACCOUNTING)


def test_sacct_sizes_durations_and_tres_are_read_as_numbers() -> None:
    assert parse_size_bytes("620768K") == 620768 * 1024
    assert parse_size_bytes("23081M") == 23081 * MB and parse_size_bytes("4Gn") == 4 * 1024**3
    assert parse_size_bytes("") is None and parse_size_bytes("lots") is None
    assert parse_duration_s("00:30.789") == pytest.approx(30.789)
    assert parse_duration_s("00:01:04") == 64 and parse_duration_s("1-02:00:00") == 93600
    assert parse_duration_s("UNLIMITED") is None and parse_duration_s("Partition_Limit") is None
    tres = parse_tres("cpu=00:00:14,energy=0,mem=620768K,gres/gpuutil=90,gres/gpumem=10G")
    assert tres == {"cpu": 14, "energy": 0, "mem": 620768 * 1024, "gres/gpuutil": 90, "gres/gpumem": 10 * 1024**3}


def test_steps_fold_into_their_job_and_a_requeued_job_shows_its_last_attempt() -> None:
    folded = fold_steps(SACCT)
    assert folded["12"]["max_rss"] == 620768 * 1024  # the larger of its two steps
    assert folded["16"]["max_rss"] == 454060 * 1024  # not the first attempt's 953160K
    assert "max_rss" not in folded["42_5"]  # no step recorded its memory
    answer = parse_sacct(SACCT)
    assert answer.statuses["16"].state is JobState.COMPLETED and answer.requeues("16") == 1


def test_point_usage_is_elapsed_of_limit_cpu_efficiency_and_peak_of_request(tmp_path: Path) -> None:
    answer = parse_sacct(SACCT)
    u = point_usage(state("12", tmp_path), answer)
    assert u.elapsed_s == 64 and u.time_limit_s == 600 and u.cpus == 2
    assert u.cpu_efficiency == pytest.approx(30.789 / (64 * 2)) and u.cpus_used == pytest.approx(30.789 / 64)
    assert u.max_rss_mb == pytest.approx(620768 / 1024) and u.mem_request_mb == 23081
    assert u.gpu_util is None and u.gpu_source is None
    short = point_usage(state("42_5", tmp_path), answer).to_json()
    assert short["max_rss_mb"] is None and short["cpu_efficiency"] == pytest.approx(13.207 / 15, abs=1e-3)
    assert set(short) >= {"elapsed_s", "time_limit_s", "cpu_efficiency", "max_rss_mb", "mem_request_mb",
                          "gpu_util", "gpu_mem_mb"}
    assert point_usage(state(None, tmp_path), answer).empty  # never submitted: nothing known


def test_gpu_use_comes_from_sacct_tres_where_the_site_records_it(tmp_path: Path) -> None:
    u = point_usage(state("77_0", tmp_path), parse_sacct(GPU_SACCT))
    assert (u.gpu_util, u.gpu_util_max, u.gpu_mem_mb, u.gpu_source) == (35, 90, 10 * 1024, FROM_ACCOUNTING)
    assert u.cpu_efficiency == pytest.approx(3 * 3600 / (2 * 3600 * 8)) and u.mem_request_mb == 32 * 1024


def test_gpu_use_comes_from_the_run_dirs_samples_when_sacct_has_none(tmp_path: Path) -> None:
    lines = [{"t": 1.0, "gpus": [{"index": 0, "util": 80, "mem_mb": 1000.0}, {"index": 1, "util": 40, "mem_mb": 500}]},
             {"t": 31.0, "gpus": [{"index": 0, "util": 20, "mem_mb": 3000.0}, {"index": 1, "util": 0, "mem_mb": 100}]}]
    (tmp_path / "gpu_usage.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + '\n{"t": 61, "gp')
    assert sampled_gpu(tmp_path) == {"gpu_util": 35.0, "gpu_util_max": 60.0, "gpu_mem_mb": 3100.0}
    u = point_usage(state("12", tmp_path), parse_sacct(SACCT))
    assert (u.gpu_util, u.gpu_mem_mb, u.gpu_source) == (35.0, 3100.0, "sampled")
    assert sampled_gpu(tmp_path / "none") is None


def test_efficiency_and_request_edge_cases() -> None:
    assert cpu_efficiency(10, 0, 4) is None and cpu_efficiency(None, 10, 1) is None
    assert cpu_efficiency(50, 10, 4) == 1.0  # never above 1 (a clock skew or a rounded Elapsed)
    assert mem_request_bytes("1000Mc", 4) == 4000 * MB and mem_request_bytes("0", 1) is None


def test_a_step_the_memory_cgroup_killed_makes_its_job_out_of_memory(tmp_path: Path) -> None:
    # SLURM 22.05 with task/cgroup: the step says OUT_OF_MEMORY, the job (its batch script saw srun fail) FAILED
    text = """\
JobID|State|Elapsed|ExitCode|Timelimit|TotalCPU|AllocCPUS|ReqMem|MaxRSS|TRESUsageInAve|TRESUsageInMax
315|FAILED|00:00:19|1:0|00:10:00|00:12.101|1|1G|||
315.batch|FAILED|00:00:19|1:0||00:00.020|1||5000K||
315.0|OUT_OF_MEMORY|00:00:19|0:125||00:12.081|1||1048000K||
316|FAILED|00:00:09|1:0|00:10:00|00:08.000|1|1G|||
316.0|FAILED|00:00:09|1:0||00:08.000|1||500000K||
"""
    answer = parse_sacct(text)
    assert answer.statuses["315"].state is JobState.OUT_OF_MEMORY and answer.statuses["316"].state is JobState.FAILED
    assert point_usage(state("315", tmp_path), answer).max_rss_mb == pytest.approx(1048000 / 1024)
