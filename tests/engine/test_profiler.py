"""`run --profile`: a real tiny run writes a Chrome/TensorBoard trace and a table of real operators."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hpc_runner.engine.profiler import ENV, StepProfiler, requested_steps
from hpc_runner.errors import UserError


@pytest.mark.slow  # whole CLI runs (training, the pre-flight's MONAI import): the full suite runs it
def test_profile_writes_a_trace_with_events_and_a_table_of_real_operators(tiny_bundle: Path, tmp_path: Path,
                                                                          cli) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--max_epochs", "1", "--output_dir", "r", "--profile",
              "--profile-steps", "2", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    folder = tmp_path / "r" / "profile"
    trace = json.loads((folder / "rank0.pt.trace.json").read_text())  # the name TensorBoard's plugin reads
    events = trace["traceEvents"]
    names = {e.get("name") for e in events}
    assert len(events) > 100 and any(str(n).startswith("aten::conv") for n in names)
    assert sum(1 for n in names if str(n).startswith("ProfilerStep#")) == 2  # exactly the steps asked for
    assert {e.get("ph") for e in events} >= {"X"}  # complete events, which Perfetto and chrome://tracing draw
    table = (folder / "top_ops.txt").read_text()
    assert "Self CPU" in table and "aten::convolution_backward" in table
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    profile = summary["profile"]
    assert profile["steps"] == 2 and Path(profile["trace"]) == (folder / "rank0.pt.trace.json").resolve()
    assert any(op["name"].startswith("aten::") and op["self_cpu_ms"] > 0 for op in profile["top_ops"])
    assert not any(op["name"].startswith("ProfilerStep") for op in profile["top_ops"])
    assert "top operators by self time" in res.stdout and "aten::convolution_backward" in res.stdout


@pytest.mark.slow  # whole CLI runs (training, the pre-flight's MONAI import): the full suite runs it
def test_without_profile_nothing_is_profiled(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--max_epochs", "1", "--output_dir", "r", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert not (tmp_path / "r" / "profile").exists()
    assert "profile" not in json.loads((tmp_path / "r" / "summary.json").read_text())


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_profile_steps_must_be_a_positive_number(tiny_bundle: Path, tmp_path: Path, cli, bad: str) -> None:
    res = cli("run", "--bundle", str(tiny_bundle), "--profile", "--profile-steps", bad, cwd=tmp_path)
    assert res.returncode == 2 and "--profile-steps" in res.stderr
    assert not (tmp_path / "runs").exists()


def test_the_environment_variable_is_read_and_checked() -> None:
    assert requested_steps({}) == 0 and requested_steps({ENV: "0"}) == 0 and requested_steps({ENV: " 4 "}) == 4
    with pytest.raises(UserError, match="HPCR_PROFILE='lots' is not a number of steps"):
        requested_steps({ENV: "lots"})


def _step(net: torch.nn.Module) -> None:
    net(torch.randn(4, 8)).sum().backward()


def test_a_run_that_ends_during_the_warm_up_says_so_and_writes_nothing(tmp_path: Path) -> None:
    prof = StepProfiler(tmp_path / "profile", 3)
    _step(torch.nn.Linear(8, 2))
    prof.step()
    prof.stop()
    result = prof.result()
    assert result is not None and result.trace is None and "nothing recorded" in (result.note or "")
    assert not (tmp_path / "profile").exists()


def test_a_run_that_ends_inside_the_window_writes_what_it_recorded(tmp_path: Path) -> None:
    net = torch.nn.Linear(8, 2)
    prof = StepProfiler(tmp_path / "profile", 5)  # 1 skipped, 1 warm-up, then 5 recorded
    for _ in range(4):
        _step(net)
        prof.step()
    prof.stop()
    result = prof.result()
    assert result is not None and result.steps == 2 and result.trace is not None
    names = {e.get("name") for e in json.loads(Path(result.trace).read_text())["traceEvents"]}
    assert "aten::addmm" in names or "aten::linear" in names


@pytest.mark.slow  # whole CLI runs (training, the pre-flight's MONAI import): the full suite runs it
def test_sweep_profile_reaches_every_point(tiny_bundle: Path, tmp_path: Path, cli) -> None:
    """`sweep --profile`: each point's run is profiled (jobs get HPCR_PROFILE through sbatch --export, here too)."""
    res = cli("sweep", "--bundle", str(tiny_bundle), "--cluster", "local", "--output_dir", "sw", "--max_epochs", "1",
              "--sweep", "seed=1,2", "--profile", "--profile-steps", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    points = sorted((tmp_path / "sw" / "points").iterdir())
    assert len(points) == 2
    for point in points:
        trace = json.loads((point / "profile" / "rank0.pt.trace.json").read_text())
        # the host's step annotation (on a GPU the trace repeats it per stream as gpu_user_annotation)
        steps = [e for e in trace["traceEvents"] if str(e.get("name")).startswith("ProfilerStep#")
                 and not str(e.get("cat", "")).startswith("gpu_")]
        assert len(steps) == 1, steps


def event(key: str, self_cpu_us: float, self_device_us: float) -> object:
    """An entry of ``prof.key_averages()`` with the fields torch's FunctionEventAvg has (profiler_util.py)."""
    from types import SimpleNamespace

    return SimpleNamespace(key=key, count=3, self_cpu_time_total=self_cpu_us, cpu_time_total=self_cpu_us,
                           self_device_time_total=self_device_us, device_time_total=self_device_us)


def test_on_a_gpu_run_top_ops_rank_by_device_time_as_the_table_does() -> None:
    from hpc_runner.engine.profiler import top_operators

    averages = [event("aten::copy_", 900.0, 10.0), event("aten::convolution", 50.0, 4000.0),
                event("ProfilerStep#3", 5000.0, 5000.0)]
    gpu = top_operators(averages, device=True)  # a CUDA op's CPU time is its launch: it ranks by device time
    assert [op["name"] for op in gpu] == ["aten::convolution", "aten::copy_"]
    assert gpu[0]["self_device_ms"] == 4.0 and gpu[0]["self_cpu_ms"] == 0.05
    cpu = top_operators(averages)
    assert [op["name"] for op in cpu] == ["aten::copy_", "aten::convolution"] and "self_device_ms" not in cpu[0]
