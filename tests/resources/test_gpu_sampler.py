"""The GPU sampler: when it samples (library, GPU, CUDA_VISIBLE_DEVICES, HPCR_GPU_SAMPLE_S) and what it writes,
checked without a GPU: a real thread writing a real file, fed by a reader function instead of NVML."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hpc_runner.jobs.usage import sampled_gpu
from hpc_runner.resources.gpu_sampler import SAMPLES_FILE, GpuSampler, plan, sampling


def test_nothing_is_sampled_without_the_library_a_gpu_or_a_visible_device() -> None:
    assert plan({}, have_library=False, gpu_count=4).reason == "nvidia-ml-py is not installed"
    assert plan({}, have_library=True, gpu_count=0).reason == "no GPU"
    assert not plan({"CUDA_VISIBLE_DEVICES": ""}, True, 2).sample
    assert not plan({"CUDA_VISIBLE_DEVICES": "-1"}, True, 2).sample
    assert not plan({"HPCR_GPU_SAMPLE_S": "0"}, True, 2).sample


def test_the_jobs_own_gpus_are_sampled_at_the_chosen_rate() -> None:
    p = plan({"CUDA_VISIBLE_DEVICES": "2,3"}, True, 4)
    assert p.sample and p.devices == ["2", "3"] and p.interval_s == 30
    assert plan({}, True, 2).devices is None  # all it sees
    assert plan({"HPCR_GPU_SAMPLE_S": "5", "CUDA_VISIBLE_DEVICES": "GPU-1a2b"}, True, 1).interval_s == 5
    assert plan({"HPCR_GPU_SAMPLE_S": "fast"}, True, 1).interval_s == 30  # garbled: the default


def test_samples_are_json_lines_that_usage_reads_back(tmp_path: Path) -> None:
    readings = iter([[{"index": 0, "util": 90, "mem_mb": 2048.0}], [{"index": 0, "util": 10, "mem_mb": 4096.0}]])
    sampler = GpuSampler(tmp_path, lambda: next(readings, []), interval_s=0.05).start()
    deadline = time.monotonic() + 10
    while sampler.samples < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    sampler.stop()
    lines = [json.loads(x) for x in (tmp_path / SAMPLES_FILE).read_text().splitlines()]
    assert [x["gpus"] for x in lines] == [[{"index": 0, "util": 90, "mem_mb": 2048.0}],
                                          [{"index": 0, "util": 10, "mem_mb": 4096.0}]]
    assert all(isinstance(x["t"], float) for x in lines)
    assert sampled_gpu(tmp_path) == {"gpu_util": 50.0, "gpu_util_max": 90.0, "gpu_mem_mb": 4096.0}


def test_a_failing_reader_never_fails_the_run(tmp_path: Path) -> None:
    def broken() -> list:
        raise RuntimeError("NVML went away")

    sampler = GpuSampler(tmp_path, broken, interval_s=0.01).start()
    time.sleep(0.1)
    sampler.stop()
    assert sampler.samples == 0 and not (tmp_path / SAMPLES_FILE).exists()


def test_without_nvml_here_the_run_goes_on_and_nothing_is_written(tmp_path: Path) -> None:
    with sampling(tmp_path, {}) as sampler:  # this machine: no GPU (and no nvidia-ml-py, or no driver)
        pass
    assert sampler is None and not (tmp_path / SAMPLES_FILE).exists()
