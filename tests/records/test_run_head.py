"""run_head reads status and job id from run.yaml's lines exactly as the safe loader would, or declines."""

from __future__ import annotations

import pytest
import yaml

from hpc_runner.records.run_head import run_head
from hpc_runner.records.rundir import dump_yaml


def _loaded(text: str) -> tuple[object, str]:
    rec = yaml.safe_load(text) or {}
    return rec.get("status"), str((rec.get("job") or {}).get("id") or "")


RECORDS = [
    {"status": "completed", "entry": "training", "job": {"id": "123_4", "cluster": "slurm"}},
    {"status": "running", "job": {"cluster": "local", "id": "local-7"}, "error": "x" * 300},
    {"status": "failed", "error": "Traceback (most recent call last):\n  status: completed\nid: 9\n" * 5,
     "job": {"id": "0_0"}},
    {"status": "preempted", "job": {"id": 12345, "logs": {"id": "not this one"}}},
    {"status": "prepared"},
    {"entry": "training", "job": None},
    {"status": "completed", "sweep": {"dir": "/a/b", "overrides": {"id": "nested"}}, "job": {"id": "77"}},
]


@pytest.mark.parametrize("record", RECORDS)
def test_same_as_the_safe_loader_on_what_dump_yaml_writes(record: dict) -> None:
    text = dump_yaml(record)
    head = run_head(text)
    if head is None:  # declined: the caller parses it whole (a long quoted error may span lines)
        return
    status, job = head
    assert (status, job or "") == _loaded(text)


def test_plain_records_are_read_from_their_lines() -> None:
    assert run_head(dump_yaml(RECORDS[0])) == ("completed", "123_4")
    assert run_head(dump_yaml(RECORDS[3])) == ("preempted", "12345")


HOSTILE = [
    "status: completed\nstatus: failed\n",  # a key twice: the loader keeps the last
    "base: &a completed\nstatus: *a\n",  # an alias
    "status: !!str completed\n",  # a tag
    "job: {id: '1_1'}\nstatus: completed\n",  # flow style
    "note: 'x\nstatus: completed\n  y'\n",  # a quoted value over lines
    "--- \nstatus: completed\n",  # a document marker
    "# a comment\nstatus: completed\n",
    "status: yes\n",  # a bool, not a string
    "status: [completed]\n",
    "job:\n  id: 1\n  id: 2\n",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_anything_unusual_is_declined(text: str) -> None:
    assert run_head(text) is None


def test_a_collect_reads_the_same_states_either_way(tmp_path) -> None:
    """The sweep's state of a point is the same whether run.yaml is read from its lines or parsed whole."""
    from hpc_runner.jobs.states import DONE, _state_from_record

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "run.yaml").write_text(dump_yaml({"status": "completed", "job": {"id": "5_1"}}))
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "run.yaml").write_text("# edited by hand\njob: {id: '5_1'}\nstatus: completed\n")
    assert _state_from_record(plain, False, "5_1") == _state_from_record(edited, False, "5_1") == (DONE, "run.yaml")
    assert _state_from_record(plain, False, "6_1")[0] == "UNKNOWN"  # an earlier job's record
