"""The select stage's job, as SLURM runs it: its input ended, the stages from it are queued with a placeholder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.select_job import SelectFailed, run_select_stage


@pytest.fixture
def queued_pipeline(tmp_path, write_pipeline, example):
    """``queued_pipeline(search_overrides)``: a pipeline dir as the cluster has it when the select job starts: the
    search ran (here), the select stage and the evaluation are queued, the evaluation's config holds the
    placeholder weights."""
    from hpc_runner.engine.runner import prepare_run
    from hpc_runner.pipeline.configs import build_configs
    from hpc_runner.pipeline.spec import load_spec
    from hpc_runner.pipeline.submit import new_record
    from hpc_runner.scheduler.profiles import load_profile
    from hpc_runner.sweep.submission import submit_sweep

    def make(search_overrides: dict | None = None) -> Path:
        spec = load_spec(write_pipeline(example(search_overrides)[:3]))
        profile = load_profile("local")
        out = tmp_path / "study"
        configs = build_configs(spec, profile, out)
        pr.write_new(new_record(spec, configs, out, profile, None, "checked"))
        submit_sweep(configs["search"].cfg, None, configs["search"].sweep, profile, out / "search", preflight=False,
                     log=lambda m: None)
        prepare_run(configs["test"].cfg, "evaluate", out / "test")
        with pr.locked(out) as led:
            for name in ("search", "best", "test"):
                led.queue(name, ["local"], None)
        return out

    return make


@pytest.mark.slow
def test_the_select_job_records_its_choice_and_writes_it_into_the_queued_stage(queued_pipeline):
    out = queued_pipeline()
    assert yaml.safe_load((out / "test" / "config.yaml").read_text())["ckpt"] == str(out / "best" / "chosen")
    result = run_select_stage(str(out), "best")
    record = pr.PipelineRecord.load(out)
    chosen = record.choice("best")
    assert result == {"status": "chosen", "point": chosen["point"], "run_dir": chosen["run_dir"]}
    assert record.stage("search")["state"] == pr.DONE and record.stage("test")["state"] == pr.QUEUED
    assert yaml.safe_load((out / "test" / "config.yaml").read_text())["ckpt"] == chosen["run_dir"]
    assert yaml.safe_load((out / "test" / "run.yaml").read_text())["pipeline"]["not_in_config"] == ["learning_rate"]


def test_a_select_job_with_nothing_to_choose_cancels_the_stages_that_wait_on_it(queued_pipeline):
    out = queued_pipeline({"batch_size": 0})
    with pytest.raises(SelectFailed, match="nothing to choose from stage 'search'"):
        run_select_stage(str(out), "best")
    record = pr.PipelineRecord.load(out)
    assert record.stage("best")["state"] == pr.FAILED
    assert record.stage("test")["state"] == pr.CANCELLED
    assert "batch_size should be a positive integer" in record.stage("test")["cause"]["message"]


@pytest.mark.slow
def test_a_select_job_that_is_not_its_stages_current_one_does_nothing(queued_pipeline):
    out = queued_pipeline()
    run_select_stage(str(out), "best")
    assert run_select_stage(str(out), "best") == {"status": "skipped", "state": pr.DONE}  # e.g. requeued by SLURM
