"""A received sweep.yaml is hostile until checked, and it is checked in one place, as it is read
(jobs/ledger.py's ``SweepRecord.load``): every leaf of a real record, replaced in turn by each of a few values of the
wrong type, is refused there with one paragraph naming the file and the id, or tolerated by every reader; no
reader (collect, status, resume --dry-run) ends in a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpc_runner.cli import main
from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr
from hpc_runner.scheduler.profiles import BUILTIN_DIR

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "bundles" / "synthetic_seg"
AT = "2026-11-30T06:53:37+00:00"
HOSTILE = [float("nan"), None, [], {}, "x", 10**30, -1]
READERS = [["collect"], ["status", "--no-submit", "--json"], ["resume", "--dry-run"]]


def real_record(cwd: Path) -> dict[str, Any]:
    """What `hpc-runner sweep --bundle bundles/synthetic_seg --sweep seed=1,2 --cluster local` wrote for a finished
    two-point sweep, with the keys other sweeps have besides (packing, bounds, --retry rules, a pipeline's
    dependency and waiters, a top-up's error, a resume, a cancel, and a point that was returned, retried, excluded
    a node and gave up): every key a reader of sweep.yaml uses is one of its leaves."""
    local = {"profile": "local", "file": str(BUILTIN_DIR / "local.yaml"),
             "settings": {"description": "this machine", "executor": "local", "time": 1440}}
    argv = ["hpc-runner", "sweep", "--bundle", str(BUNDLE), "--sweep", "seed=1,2", "--cluster", "local"]
    return {
        "kind": sr.KIND, "version": 1, "created": AT, "bundle": "synthetic_seg", "bundle_dir": str(BUNDLE),
        "entry": None, "command": {"argv": argv, "shell": " ".join(argv), "cwd": str(cwd)},
        "spec": [{"ids": ["seed"], "values": [[1], [2]], "source": "--sweep 'seed=1,2'"}],
        "params": ["seed"], "checked": "2 distinct values checked once each", "cluster": local,
        "base": sr.BASE_DIR, "job_folder": sr.JOB_FOLDER, "state": sr.SUBMITTED,
        "error": {"at": AT, "message": "top-up: refused"},
        "submissions": [{"at": AT, "reason": "sweep", "array_parallelism": 2, "profile": local, "sbatch_calls": 1,
                         "arrays": [{"job_id": "local", "size": 2, "points": 2, "first": 0, "last": 1}]}],
        "submit_calls": 1, "pack": {"points": 1, "parallel": 1},
        "bounds": {"max_returns": 3, "max_retries": 3, "max_submit_calls": 20},
        "retry": {"OUT_OF_MEMORY": "mem*2"}, "dependency": "afterany:7", "waiters": ["7"], "leaving": ["8"],
        "resumed": [{"at": AT, "points": 1, "fixes": {}}], "cancelled": [{"at": AT, "jobs": [], "waiting": []}],
        "points": [
            {"index": 0, "dir": "points/0000", "params": {"seed": 1}, "job_id": "local", "submit": "submitted",
             "jobs": ["local"]},
            {"index": 1, "dir": "points/0001", "params": {"seed": 2}, "extra": {"seed": 3}, "request": {"time": 20},
             "job_id": "local", "submit": "gave-up", "jobs": ["local", "local"], "returns": 1, "retries": 1,
             "exclude": ["node1"], "attempts": ["attempts/0001-1"], "node_failures": {"local": ["node1"]},
             "cause": {"kind": "RETURNED", "message": "returned unrun 4 times"},
             "history": [{"at": AT, "job_id": "local", "cause": "TIMEOUT", "rule": "TIMEOUT:time*2",
                          "next_request": {"time": 20}, "change": "time 10 -> 20"}]},
        ],
    }


def leaves(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) to a value of ``doc``, containers included (as tests/fuzz counts leaves)."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    out: list[tuple] = []
    for key, value in items:
        out += [(*prefix, key), *leaves(value, (*prefix, key))]
    return out


def replaced(doc: dict[str, Any], path: tuple, value: Any) -> dict[str, Any]:
    """A copy of ``doc`` with the value at ``path`` replaced by ``value``."""
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def write(sweep: Path, doc: dict[str, Any]) -> None:
    (sweep / sr.SWEEP_FILE).write_text(json.dumps(doc, allow_nan=True))  # NaN as JSON writes it, as YAML's .nan


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    folder = tmp_path / "sw"
    folder.mkdir()
    write(folder, real_record(tmp_path))
    return folder


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    """``main(argv)``: its exit code (an exception's name when one escaped) and what it printed."""
    try:
        code: Any = main(argv)
    except SystemExit as exc:
        code = exc.code
    except Exception as exc:  # what escaped is the finding
        code = f"{type(exc).__name__}: {str(exc)[:200]}"
    out = capsys.readouterr()
    return code, out.out + out.err


def contract_broken(code: Any, printed: str) -> str | None:
    """What a reader's call did against the contract (exit 0, 1 or 2; no traceback; exit 2 is one paragraph)."""
    if code not in (0, 1, 2):
        return f"exit {code!r}"
    if "Traceback" in printed:
        return "a traceback"
    errors = [line for line in printed.splitlines() if ": error: " in line]
    if code == 2 and len(errors) != 1:
        return f"exit 2 with {len(errors)} error paragraphs"
    return None


def test_the_real_record_reads_and_each_reader_takes_it(sweep: Path, capsys) -> None:
    sr.SweepRecord.load(sweep)
    for reader in READERS:
        code, printed = run([reader[0], str(sweep), *reader[1:]], capsys)
        assert code in (0, 1) and contract_broken(code, printed) is None, (reader, code, printed[-2000:])


def test_every_leaf_of_a_real_record_replaced_by_a_value_of_the_wrong_type(sweep: Path, capsys) -> None:
    """Each leaf, each hostile value: ``SweepRecord.load`` refuses it (one paragraph naming the file and the id) or
    tolerates it; a reader then exits 0, 1 or 2 without a traceback (every reader where the load tolerated it, one
    in turn where it refused it: they all read the record through the same load)."""
    doc = real_record(sweep.parent)
    broken = []
    turn = 0
    for path in leaves(doc):
        for value in HOSTILE:
            write(sweep, replaced(doc, path, value))
            try:
                sr.SweepRecord.load(sweep)
                readers = READERS
            except ClusterError as err:
                paragraph = err.paragraph()
                if err.where != str(sweep / sr.SWEEP_FILE) or not err.id_path or "\n" in paragraph:
                    broken.append((path, value, f"refused without the file and the id: {paragraph}"))
                turn += 1
                readers = [READERS[turn % len(READERS)]]
            for reader in readers:
                code, printed = run([reader[0], str(sweep), *reader[1:]], capsys)
                problem = contract_broken(code, printed)
                if problem:
                    broken.append((path, value, reader[0], problem, printed[-300:]))
    assert not broken, f"{len(broken)} broken, first ones: {broken[:50]}"


@pytest.mark.parametrize(("path", "value", "reader", "culprit"), [
    # the fuzz harness's findings: collect's param_ids, resume's profile_from_record
    (("params",), float("nan"), ["collect"], "at id 'params'"),
    (("submissions", 0, "profile"), float("nan"), ["resume", "--dry-run"], "at id 'submissions[0].profile'"),
    (("cluster",), "x", ["resume", "--dry-run"], "at id 'cluster'"),
    (("cluster", "settings"), [], ["status", "--no-submit"], "at id 'cluster.settings'"),
    (("submissions", 0, "profile", "file"), -1, ["collect"], "at id 'submissions[0].profile.file'"),
    (("params", 0), {}, ["collect"], "at id 'params[0]'"),
    (("retry",), [], ["status", "--no-submit"], "at id 'retry'"),
    (("pack", "points"), 0, ["status", "--no-submit"], "at id 'pack.points'"),
    (("points", 1, "retries"), "x", ["resume", "--dry-run"], "at id 'points[1].retries'"),
    (("points", 0, "job_id"), 10**30, ["collect"], "at id 'points[0].job_id'"),
])
def test_a_value_of_the_wrong_type_is_one_paragraph_naming_the_file_and_the_id(sweep: Path, capsys, path, value,
                                                                               reader, culprit) -> None:
    write(sweep, replaced(real_record(sweep.parent), path, value))
    code, printed = run([reader[0], str(sweep), *reader[1:]], capsys)
    assert code == 2 and contract_broken(code, printed) is None, (code, printed[-2000:])
    assert f"{sweep / sr.SWEEP_FILE}: {culprit}" in printed and "Expected " in printed


def test_a_job_reading_its_own_point_line_gets_the_same_refusal(sweep: Path) -> None:
    doc = replaced(real_record(sweep.parent), ("points", 1, "retries"), "x")
    points = doc.pop("points")
    sr.SweepRecord(sweep, doc, points).save()  # the layout hpc-runner writes: a job reads its own line only
    assert sr.read_point(sweep, 0)["params"] == {"seed": 1}
    with pytest.raises(ClusterError) as err:
        sr.read_point(sweep, 1)
    assert err.value.id_path == "points[1].retries" and err.value.where == str(sweep / sr.SWEEP_FILE)


def test_a_trial_whose_metric_diverged_is_a_trial_like_any_other(sweep: Path) -> None:
    doc = real_record(sweep.parent)
    doc["points"][0].update(trial=0, trial_id=1, worker=0, state="failed", value=float("nan"), epochs=2)
    write(sweep, doc)
    assert sr.SweepRecord.load(sweep).points[0]["epochs"] == 2


@pytest.mark.parametrize("option", ["--max-retries", "--max-submit-calls", "--max-returns"])
def test_a_bound_past_64_bits_is_refused_on_the_command_line_not_recorded(option: str, tmp_path: Path,
                                                                          capsys) -> None:
    """sweep.yaml refuses a bound past 64 bits when read back: the option that would record one refuses it first."""
    code, printed = run(["sweep", "--bundle", str(BUNDLE), "--cluster", "local", "--dry-run", "--sweep", "seed=1,2",
                         option, str(2**63), "--output_dir", str(tmp_path / "sw")], capsys)
    assert code == 2 and "at most 9223372036854775807" in printed and not (tmp_path / "sw").exists()
