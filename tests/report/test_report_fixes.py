"""The sweep report, readable: swept floats to the digits that tell them apart, a log axis past a decade,
where the states came from in words, and one line (not sacct's errors) when the scheduler cannot be reached."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from hpc_runner.report.status_table import scheduler_note, states_source
from hpc_runner.report.sweep_plots import label_digits, short_cell, spans_decades
from hpc_runner.scheduler.executor import SchedulerAnswer
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING, FROM_QUEUE
from hpc_runner.scheduler.slurm.accounting import query_scheduler


def test_swept_floats_get_the_digits_that_tell_them_apart() -> None:
    lrs = [0.02655009721467717, 0.1, 0.0035111917342151308]
    d = label_digits(lrs)
    assert d == 3 and [short_cell(v, d) for v in lrs] == ["0.0266", "0.1", "0.00351"]
    close = [0.1, 0.1001, 0.10011]
    assert [short_cell(v, label_digits(close)) for v in close] == ["0.1", "0.1001", "0.10011"]
    assert short_cell(8, 3) == "8" and short_cell("adam", 3) == "adam" and short_cell([8, 16], 3) == "[8, 16]"


def test_a_log_axis_when_values_span_more_than_a_decade() -> None:
    assert spans_decades([1e-4, 1e-3, 1e-2]) and not spans_decades([0.01, 0.05, 0.1])
    assert not spans_decades([0.0, 1.0, 100.0]) and not spans_decades([])


def test_the_states_source_reads_as_words() -> None:
    said = {FROM_ACCOUNTING: "sacct", FROM_QUEUE: "squeue"}  # what the backend calls them (SLURM's words)
    assert states_source(SchedulerAnswer({}, FROM_ACCOUNTING, 1, words=said)) == "sacct, 1 call"
    assert states_source(SchedulerAnswer({}, FROM_ACCOUNTING, 1)) == "accounting, 1 call"  # a backend with no words
    assert states_source(SchedulerAnswer({}, "none")) == "the run records"  # local runs, not "none"
    gone = SchedulerAnswer({}, "none", 2, "sacct: ... resolve_ctls_from_dns_srv ...", at="2026-11-25T21:26:57+00:00")
    assert states_source(gone) == "the run records (the scheduler cannot be reached, as of 2026-11-25 21:26:57)"
    assert scheduler_note(gone) == ("the scheduler cannot be reached; states are from the run records, as of "
                                    "2026-11-25 21:26:57")
    assert scheduler_note(SchedulerAnswer({}, FROM_ACCOUNTING, 1, words=said)) is None


@pytest.fixture
def unreachable(tmp_path: Path, monkeypatch) -> None:
    """SLURM's clients pointed at a cluster that does not exist (as after the cluster was stopped)."""
    if shutil.which("sacct") is None:
        pytest.skip("no sacct on this machine")
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=gone(127.0.0.9)\nSlurmctldPort=1\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))


@pytest.mark.slow  # sacct and squeue each wait ~9 s for a controller that is not there
def test_real_sacct_errors_become_one_line(unreachable) -> None:
    answer = query_scheduler(["123_0"], timeout=30)
    assert answer.source == "none" and answer.error  # sacct's and squeue's own words, kept for the record
    assert "\n" not in scheduler_note(answer) and "cannot be reached" in scheduler_note(answer)


@pytest.mark.slow
def test_a_report_made_when_the_scheduler_is_gone_says_so_in_one_line(local_sweep: Path, tmp_path: Path,
                                                                       unreachable) -> None:
    from hpc_runner.report.build import build_report

    sweep = Path(shutil.copytree(local_sweep, tmp_path / "sw"))
    record = json.loads((sweep / "sweep.yaml").read_text())
    for n, p in enumerate(record["points"]):  # as if a cluster had run them: job ids it gave
        p["job_id"], p["jobs"] = f"4242_{n}", [f"4242_{n}"]
    for profile in [record["cluster"]] + [s["profile"] for s in record.get("submissions", []) if s.get("profile")]:
        profile.setdefault("settings", {})["executor"] = "slurm"  # and its profile a SLURM one: sacct is asked
    (sweep / "sweep.yaml").write_text(json.dumps(record))
    text = build_report(sweep).html.read_text(encoding="utf-8")
    assert "The scheduler cannot be reached; states are from the run records, as of " in text
    for raw in ("resolve_ctls", "Could not establish", "sacct:", "squeue:", "states from none"):
        assert raw not in text, raw
    assert text.count('<td class="state-COMPLETED">COMPLETED</td>') == 4  # the run records still tell
    assert os.path.isfile(sweep / "plots" / "usage.png")


def test_when_squeue_answered_the_note_gives_sacct_s_own_reason_in_one_line() -> None:
    answer = SchedulerAnswer({}, FROM_QUEUE, 2, "sacct: Slurm accounting storage is disabled\n(see slurm.conf)",
                             at="2026-11-25T21:26:57+00:00", words={FROM_ACCOUNTING: "sacct", FROM_QUEUE: "squeue"})
    assert scheduler_note(answer) == ("sacct did not answer (Slurm accounting storage is disabled (see slurm.conf)); "
                                      "states are from squeue and the run records, as of 2026-11-25 21:26:57")
