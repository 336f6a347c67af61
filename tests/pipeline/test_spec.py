"""The pipeline file: a pipeline that cannot start is refused before anything is loaded, written or queued."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hpc_runner.errors import UserError
from hpc_runner.pipeline.spec import descendants, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]


def stages_of(*stages: dict) -> dict:
    return {"bundle": "bundles/synthetic_seg", "stages": list(stages)}


SEARCH = {"name": "search", "sweep": ["learning_rate=1e-3,4e-3"]}
BEST = {"name": "best", "select": {"from": "search", "metric": "val_dice"}}


def refusal(data: dict) -> UserError:
    with pytest.raises(UserError) as err:
        parse_spec(data, Path("study.yaml"))
    return err.value


def test_the_issue_example_parses_into_kinds_inputs_and_submission_order():
    spec = parse_spec(stages_of({"name": "predict", "entry": "inference", "from": "best", "shards": 2}, SEARCH, BEST,
                                {"name": "test", "entry": "evaluate", "from": "best"}), Path("study.yaml"))
    assert [(s.name, s.kind.name) for s in spec.stages] == [("predict", "shards"), ("search", "sweep"),
                                                             ("best", "select"), ("test", "run")]
    assert [s.name for s in spec.order()] == ["search", "best", "predict", "test"]  # inputs first, else file order
    assert spec.stage("best").inputs == ["search"] and spec.stage("best").mode == "max"
    assert descendants(spec.stages, "search") == ["best", "predict", "test"]


@pytest.mark.parametrize(("stage", "words"), [
    ({"name": "bad name", "entry": "evaluate"}, "cannot name its folder"),
    ({"name": "slurm", "entry": "evaluate"}, "cannot name its folder"),
    ({"name": "jobs", "entry": "evaluate"}, "cannot name its folder"),
    ({"name": "x"}, "has nothing to do"),
    ({"name": "x", "sweep": ["a=1,2"], "tune": {"space": ["a=int(1,2)"]}}, "has both"),
    ({"name": "x", "entry": "evaluate", "shards": 0}, "not a number of shards"),
    ({"name": "x", "entry": "evaluate", "sweeps": ["a=1"]}, "Did you mean: sweep?"),
    ({"name": "x", "select": {"from": "search", "metric": "val_dice", "mode": "best"}}, "is not a direction"),
    ({"name": "x", "sweep": ["a=1"], "from": "best"}, "a sweep stage takes no from"),
])
def test_a_bad_stage_is_refused_naming_its_field(stage, words):
    err = refusal(stages_of(SEARCH, BEST, stage))
    assert words in err.paragraph(), err.paragraph()
    assert err.id_path and err.id_path.startswith("stages.2")


def test_an_unknown_from_is_refused_with_the_closest_stage_name():
    err = refusal(stages_of(SEARCH, BEST, {"name": "test", "entry": "evaluate", "from": "bset"}))
    assert "not a stage of this pipeline" in err.message and err.hint == "Did you mean: best?"
    assert err.id_path == "stages.2.from"


def test_stages_that_wait_on_each_other_in_a_cycle_are_refused():
    err = refusal(stages_of({"name": "best", "select": {"from": "test"}},
                            {"name": "test", "entry": "evaluate", "from": "best"}))
    assert "cycle: best -> test -> best" in err.message


@pytest.mark.parametrize(("stages", "words"), [
    ((SEARCH, {"name": "test", "entry": "evaluate", "from": "search"}), "from: a select stage"),
    ((SEARCH, BEST, {"name": "again", "select": {"from": "best", "metric": "val_dice"}}), "a select stage"),
    ((SEARCH, {"name": "best", "select": {"from": "search"}}), "has no metric"),
    ((SEARCH, SEARCH), "two stages are called 'search'"),
])
def test_inputs_that_cannot_give_what_a_stage_takes_are_refused(stages, words):
    assert words in refusal(stages_of(*stages)).paragraph()


def test_a_select_stage_of_one_run_needs_no_metric():
    spec = parse_spec(stages_of({"name": "train", "entry": "training"}, {"name": "pick", "select": {"from": "train"}},
                                {"name": "test", "entry": "evaluate", "from": "pick"}), Path("p.yaml"))
    assert spec.stage("pick").metric is None and [s.name for s in spec.order()] == ["train", "pick", "test"]


def test_errors_name_the_line_of_the_pipeline_file(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text("bundle: bundles/synthetic_seg\nstages:\n  - name: search\n    sweep: [\"learning_rate=1,2\"]\n"
                    "  - name: test\n    entry: evaluate\n    from: nowhere\n")
    with pytest.raises(UserError) as err:
        load_spec(path)
    assert err.value.where == f"{path}:7"


def _set(stage: int, key: str, value):
    def edit(stages: list[dict]) -> None:
        stages[stage][key] = value
    return edit


@pytest.mark.parametrize(("edit", "words"), [
    (_set(3, "from", "nowhere"), "not a stage of this pipeline"),
    (_set(2, "entry", "evalute"), "no configs/evalute.*"),
    (_set(1, "select", {"from": "search", "metric": "val_dice", "extra": 1}), "unknown field 'extra'"),
    (_set(0, "overrides", {"max_epoch": 1}), "max_epoch"),
    (_set(1, "from", "search"), "a select stage takes no from"),
    (_set(2, "config_file", "configs/missing.yaml"), "does not exist"),
])
def test_the_command_refuses_a_pipeline_that_cannot_start_with_exit_2_and_writes_nothing(
        tmp_path, write_pipeline, example, edit, words):
    stages = example()
    edit(stages)
    path = write_pipeline(stages)
    res = subprocess.run([sys.executable, "-m", "hpc_runner", "pipeline", str(path), "--cluster", "local",
                          "--output_dir", str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert words in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()
