"""``pipeline --cluster local``: the stages run here, one after another, with the same records as on a cluster."""

from __future__ import annotations

import json
import shutil

import pytest
import yaml

from hpc_runner.cli import main
from hpc_runner.pipeline import record as pr


def run_cli(*args: str) -> int:
    return main([*args])


@pytest.fixture
def example_dir(tmp_path, write_pipeline, example):
    """The issue's example pipeline, run here to the end."""
    out = tmp_path / "study"
    assert run_cli("pipeline", str(write_pipeline(example())), "--cluster", "local", "--output_dir", str(out)) == 0
    return out


@pytest.mark.slow
def test_the_example_pipeline_runs_here_to_the_end_with_the_metrics_and_the_shards_predictions(example_dir, capsys):
    record = pr.PipelineRecord.load(example_dir)
    assert [(s["name"], s["state"]) for s in record.stages] == [
        ("search", pr.DONE), ("best", pr.DONE), ("test", pr.QUEUED), ("predict", pr.QUEUED)]
    chosen = record.choice("best")
    assert chosen["point"] in (0, 1) and chosen["metric"] == "val_dice" and "is the max of 2 point(s)" in chosen["why"]
    # the evaluation ran with the chosen point's weights, and wrote its metrics
    test_config = yaml.safe_load((example_dir / "test" / "config.yaml").read_text())
    assert test_config["ckpt"] == chosen["run_dir"]
    metrics = json.loads((example_dir / "test" / "summary.json").read_text())["metrics"]
    assert set(metrics) >= {"dice", "hd95"} and metrics["dice"]["mean"] is not None
    # each of the 2 shards predicted its case into the one predictions folder
    predictions = sorted(p.name for p in (example_dir / "predict" / "predictions").glob("*_seg.nii.gz"))
    assert len(predictions) == 2
    assert json.loads((example_dir / "best" / "choice.json").read_text())["considered"][0]["state"] == "COMPLETED"
    capsys.readouterr()
    assert run_cli("status", str(example_dir)) == 0
    table = capsys.readouterr().out
    assert "4 COMPLETED" in table and f"chose point {chosen['point']} of search" in table
    assert run_cli("collect", str(example_dir)) == 0
    chain = (example_dir / "pipeline.md").read_text()
    assert "| point | learning_rate | state |" in chain  # the search table
    assert f"chosen: point {chosen['point']} of search" in chain and "mean dice" in chain
    assert f"predictions: {example_dir / 'predict' / 'predictions'} (2 file(s))" in chain
    assert run_cli("report", str(example_dir)) == 0
    assert "search: its own report" in (example_dir / "report.html").read_text()


def test_search_points_that_all_fail_cancel_the_later_stages_and_status_names_the_cause(tmp_path, write_pipeline,
                                                                                        example, capsys):
    out = tmp_path / "study"
    # batch_size 0 passes every check before the run and fails when the loader is built: every point fails
    path = write_pipeline(example({"batch_size": 0}))
    assert run_cli("pipeline", str(path), "--cluster", "local", "--output_dir", str(out)) == 1
    record = pr.PipelineRecord.load(out)
    assert record.stage("best")["state"] == pr.FAILED
    assert record.stage("best")["cause"]["kind"] == "NO_CHOICE"
    for name in ("test", "predict"):
        cause = record.stage(name)["cause"]
        assert record.stage(name)["state"] == pr.CANCELLED and cause["kind"] == "INPUT_FAILED"
        assert cause["message"].startswith("stage 'best' failed: nothing to choose from stage 'search'")
        assert not (out / name).exists()  # never queued: nothing of it was written
    capsys.readouterr()
    assert run_cli("status", str(out), "--json") == 0
    states = {s["stage"]: s for s in map(json.loads, capsys.readouterr().out.splitlines())}
    assert states["search"]["state"] == "FAILED" and states["best"]["state"] == "FAILED"
    assert "batch_size should be a positive integer" in states["best"]["detail"]
    assert states["test"]["state"] == "CANCELLED" and "INPUT_FAILED" in states["test"]["detail"]


@pytest.mark.slow
def test_resume_runs_again_only_the_stage_that_failed(tmp_path, write_pipeline, example, dataset_dir, capsys):
    labels = tmp_path / "labels"
    labels.mkdir()  # empty: the evaluation finds no label for its cases and fails
    stages = example()
    stages[2]["overrides"] = {"labels": str(labels)}
    out = tmp_path / "study"
    assert run_cli("pipeline", str(write_pipeline(stages)), "--cluster", "local", "--output_dir", str(out)) == 1
    before = pr.PipelineRecord.load(out)
    search_runs = {p: (p / "run.yaml").read_text() for p in sorted((out / "search" / "points").iterdir())}
    shard_runs = {p: (p / "run.yaml").read_text() for p in sorted((out / "predict" / "points").iterdir())}
    capsys.readouterr()
    assert run_cli("status", str(out)) == 0
    assert "test     run     FAILED" in capsys.readouterr().out
    for case in ("002", "003"):  # the validation cases of num_train 2, num_val 2, named as the images
        shutil.copy(dataset_dir / f"seg{case}.nii.gz", labels / f"img{case}.nii.gz")
    assert run_cli("resume", str(out)) == 0
    assert "3 stage(s) kept (search, best, predict); 1 to queue again (test: points)" in capsys.readouterr().out
    after = pr.PipelineRecord.load(out)
    assert after.choice("best") == before.choice("best")
    assert {p: (p / "run.yaml").read_text() for p in search_runs} == search_runs  # completed points untouched
    assert {p: (p / "run.yaml").read_text() for p in shard_runs} == shard_runs
    assert after.stage("test")["submissions"] == 2
    assert json.loads((out / "test" / "summary.json").read_text())["metrics"]["dice"]["mean"] is not None


@pytest.mark.slow
def test_a_tune_search_and_an_export_of_the_chosen_trial_run_here(tmp_path, write_pipeline):
    pytest.importorskip("optuna")
    torch = pytest.importorskip("torch")
    stages = [
        {"name": "search", "overrides": {"max_epochs": 1},
         "tune": {"space": ["learning_rate=loguniform(1e-4,1e-2)"], "trials": 2, "metric": "val_dice",
                  "pruner": "none", "sampler": "random", "seed": 0}},
        {"name": "best", "select": {"from": "search"}},  # the tune's own metric and direction
        {"name": "export", "export": {"filepath": "model.ts"}, "from": "best"},
    ]
    out = tmp_path / "study"
    assert run_cli("pipeline", str(write_pipeline(stages)), "--cluster", "local", "--output_dir", str(out)) == 0
    chosen = pr.PipelineRecord.load(out).choice("best")
    assert chosen["metric"] == "val_dice" and chosen["mode"] == "max"
    command = yaml.safe_load((out / "export" / "command.yaml").read_text())
    assert command["argv"][command["argv"].index("--ckpt_file") + 1] == chosen["run_dir"]
    net = torch.jit.load(str(out / "export" / "model.ts"))
    assert net(torch.zeros(1, 1, 16, 16, 16)).shape == (1, 2, 16, 16, 16)
