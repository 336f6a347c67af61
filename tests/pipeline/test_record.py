"""The pipeline record: each stage's state moves only through the table of transitions, bounded, under a lock."""

from __future__ import annotations

import threading

import pytest

from hpc_runner.pipeline import record as pr


@pytest.fixture
def pipeline_dir(tmp_path):
    stages = [{"name": n, "kind": k, "dir": n, "inputs": i, "state": pr.PLANNED, "jobs": []}
              for n, k, i in (("search", "sweep", []), ("best", "select", ["search"]), ("test", "run", ["best"]),
                              ("predict", "shards", ["best"]), ("export", "export", ["test"]))]
    pr.write_new(pr.PipelineRecord(tmp_path / "p", {"kind": pr.KIND, "version": 1}, stages))
    return tmp_path / "p"


def state(directory, name):
    return pr.PipelineRecord.load(directory).stage(name)["state"]


def test_a_stage_goes_planned_queued_done_and_the_history_says_when(pipeline_dir):
    with pr.locked(pipeline_dir) as led:
        led.queue("best", ["101"], "afterany:100")
        led.finish("best", chosen={"point": 1})
    record = pr.PipelineRecord.load(pipeline_dir)
    best = record.stage("best")
    assert best["state"] == pr.DONE and best["jobs"] == ["101"] and best["dependency"] == "afterany:100"
    assert record.choice("best") == {"point": 1}
    assert [(h["stage"], h["event"]) for h in record.data["history"]] == [("best", "queue"), ("best", "finish")]


@pytest.mark.parametrize(("moves", "refused"), [
    ((), "finish"),  # planned: nothing ran, nothing to finish
    (("queue", "finish"), "fail"),  # done is final
    (("queue", "finish"), "cancel"),
    (("queue", "cancel"), "defer"),
    (("queue",), "refuse"),  # only the start's sbatch is refused
])
def test_moves_outside_the_table_are_refused_and_change_nothing(pipeline_dir, moves, refused):
    with pr.locked(pipeline_dir) as led:
        for move in moves:
            {"queue": lambda: led.queue("best", ["1"], None), "finish": lambda: led.finish("best"),
             "cancel": lambda: led.cancel("best", "X", "why")}[move]()
    before = state(pipeline_dir, "best")
    with pytest.raises(pr.TransitionError), pr.locked(pipeline_dir) as led:
        {"finish": lambda: led.finish("best"), "fail": lambda: led.fail("best", "X", "why"),
         "cancel": lambda: led.cancel("best", "X", "why"), "defer": lambda: led.defer("best", "2", "afterany:1"),
         "refuse": lambda: led.refuse("best", "sbatch said no")}[refused]()
    assert state(pipeline_dir, "best") == before


def test_a_failed_or_cancelled_stage_is_queued_again_at_most_max_submissions_times(pipeline_dir):
    for n in range(pr.MAX_SUBMISSIONS):
        with pr.locked(pipeline_dir) as led:
            led.queue("test", [str(n)], "afterok:1")
            led.cancel("test", "INPUT_FAILED", "stage 'best' failed")
    with pytest.raises(pr.ClusterError, match="queued 4 times already"), pr.locked(pipeline_dir) as led:
        led.queue("test", ["9"], None)
    assert state(pipeline_dir, "test") == pr.CANCELLED


def test_a_select_stage_waits_again_at_most_max_deferrals_times(pipeline_dir):
    with pr.locked(pipeline_dir) as led:
        led.queue("best", ["1"], "afterany:0")
        for n in range(pr.MAX_DEFERRALS):
            led.defer("best", str(n + 2), f"afterany:{n + 100}")
        assert not led.can_defer("best")
        with pytest.raises(pr.ClusterError, match="waited 20 times"):
            led.defer("best", "99", "afterany:99")
    best = pr.PipelineRecord.load(pipeline_dir).stage("best")
    assert best["jobs"] == [str(pr.MAX_DEFERRALS + 1)] and best["deferrals"] == pr.MAX_DEFERRALS


def test_a_cancel_names_its_cause_and_descendants_follow_the_inputs(pipeline_dir):
    record = pr.PipelineRecord.load(pipeline_dir)
    assert [s["name"] for s in record.descendants("best")] == ["test", "predict", "export"]
    assert [s["name"] for s in record.consumers("best")] == ["test", "predict"]
    with pr.locked(pipeline_dir) as led:
        led.cancel("test", "INPUT_FAILED", "stage 'best' failed: no point completed")
    assert pr.PipelineRecord.load(pipeline_dir).stage("test")["cause"] == {
        "kind": "INPUT_FAILED", "message": "stage 'best' failed: no point completed"}


def test_concurrent_writers_under_the_lock_lose_no_transition(pipeline_dir):
    names = ["search", "best", "test", "predict", "export"]

    def queue(name):
        with pr.locked(pipeline_dir) as led:
            led.queue(name, [name], None)

    threads = [threading.Thread(target=queue, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    record = pr.PipelineRecord.load(pipeline_dir)
    assert all(record.stage(n)["state"] == pr.QUEUED and record.stage(n)["jobs"] == [n] for n in names)


def test_a_record_edited_into_an_unknown_state_is_refused_naming_the_file(pipeline_dir):
    path = pipeline_dir / pr.PIPELINE_FILE
    path.write_text(path.read_text().replace('"state": "planned"', '"state": "finished"', 1))
    with pytest.raises(pr.ClusterError) as err:
        pr.PipelineRecord.load(pipeline_dir)
    assert err.value.where == str(path)


def test_transitions_applied_before_an_error_are_written(pipeline_dir):
    with pytest.raises(RuntimeError), pr.locked(pipeline_dir) as led:
        led.queue("search", ["100"], None)
        raise RuntimeError("the next sbatch failed")
    assert state(pipeline_dir, "search") == pr.QUEUED
