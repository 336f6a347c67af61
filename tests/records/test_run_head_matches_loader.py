"""run_head against the safe loader on generated run.yaml texts: whenever it answers, the loader reads the same."""

from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpc_runner.records.run_head import run_head
from hpc_runner.records.rundir import dump_yaml

WORDS = ["running", "completed", "failed", "123_4", "12_345", "0x1F", "1e3", ".inf", ".nan", "2001-12-14", "yes",
         "on", "null", "~", "NULL", "True", "-", "-x", "?x", "007", "0", "12:30", "1_0", "'completed'",
         '"completed"', "'it''s'", '"a\\"b"', '"esc\\n"', "!!str done", "&a done", "*a", "[done]", "{a: b}",
         "done # note", "done#x", "|", "|-", ">+", "|2", "'open", '"open', "[]", "{}", "a: b", "", " "]
KEYS = ["status", "job", "entry", "error", "note", "id", "base"]


def _value() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(WORDS), st.text(alphabet="ab:#'\"\\ -|>&*!{}[],\t\r\x85\u2028", max_size=8))


@st.composite
def _line(draw) -> str:
    kind = draw(st.sampled_from(["top", "top", "child", "deep", "comment", "raw", "marker", "blank"]))
    value = draw(_value())
    if kind == "top":
        key = draw(st.sampled_from([*KEYS, '"status"', "<<", "? status"]))
        return f"{key}: {value}" if value or draw(st.booleans()) else f"{key}:"
    if kind == "child":
        indent = draw(st.sampled_from(["  ", " ", "    ", "\t"]))
        key = draw(st.sampled_from(["id", "cluster", "<<", "- id", "status"]))
        return f"{indent}{key}: {value}" if value else f"{indent}{key}:"
    if kind == "deep":
        return draw(st.sampled_from(["    id: 9", "  status: completed", "   more", "  - x", "  ]", "  }"]))
    if kind == "comment":
        return draw(st.sampled_from(["# status: x", "  # c"]))
    if kind == "marker":
        return draw(st.sampled_from(["---", "...", "--- |", "%YAML 1.1"]))
    if kind == "blank":
        return ""
    return value


def _loaded(text: str) -> tuple[object, object] | None:
    """What the safe loader reads as (status, job id), or None when it refuses the text or it is no mapping."""
    try:
        rec = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(rec, dict):
        return None
    job = rec.get("job")
    return rec.get("status"), job.get("id") if isinstance(job, dict) else None


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_line(), min_size=1, max_size=8))
def test_whenever_run_head_answers_the_safe_loader_reads_the_same(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    head = run_head(text)
    if head is None:
        return
    loaded = _loaded(text)
    if loaded is None:
        return  # text the loader refuses where run_head does not look (inside an indented value): see its docstring
    status, job_id = loaded
    assert head[0] == status, (text, head, loaded)
    assert head[1] == (None if job_id is None else str(job_id)), (text, head, loaded)
    if job_id is not None:
        assert str(job_id) == head[1] and not isinstance(job_id, bool | float)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({
    "status": st.sampled_from(["running", "completed", "failed", "prepared", "preempted"]),
    "job": st.fixed_dictionaries({"id": st.one_of(st.from_regex(r"[1-9][0-9]{0,6}(_[0-9]{1,3})?", fullmatch=True),
                                                  st.integers(1, 10**7)),
                                  "cluster": st.sampled_from(["slurm", "local"])}),
    "error": st.text(max_size=200),
    "created": st.just("2026-11-27T10:00:00+00:00"),
    "overrides": st.lists(st.text(max_size=10), max_size=3),
}))
def test_what_dump_yaml_writes_is_read_the_same(record: dict) -> None:
    text = dump_yaml(record)
    head = run_head(text)
    if head is not None:
        assert head == (record["status"], str(record["job"]["id"])), text


def test_the_hostile_forms_of_the_issue_are_declined_or_read_as_the_loader_does() -> None:
    for text in ('status: "comp\\x6cted"\n', "status: completed\nstatus: failed\n",
                 "error: |\n  x\nstatus: completed # done\n", "status: !!str completed\n",
                 "status: completed # a comment\n", "status: completed\n  more\n", "job:\n    id: 5\n",
                 "job:\n  <<: {id: 5}\n", "note: [1,\nstatus: running\n  ]\n", "note: 'a''\nstatus: x'\n",
                 'note: "a\\"\nstatus: x"\n', "status: 1_000\n", "status: 2001-12-14\n", "status: .inf\n",
                 "status: running\r\n", "\ufeffstatus: running\n", "status:\n  running\n"):
        head = run_head(text)
        loaded = _loaded(text)
        assert head is None or (loaded is not None and head[0] == loaded[0]), (text, head, loaded)
    assert run_head("status: completed\njob:\n  id: '7'\n  cluster: slurm\n") == ("completed", "7")
