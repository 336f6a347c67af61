"""Issue 47 (d): a dry run notes a time limit far longer than earlier runs of the same bundle and entry took, with a
shorter one to ask for; earlier runs are the completed run dirs next to the run dir or sweep dir submitted
(--output_dir's parent) and under runs/<bundle>/, recorded as the runner records them (run.yaml's started and
ended), single runs and sweep points alike; a damaged run.yaml among them is skipped. With none, a time over an
hour is noted as not compared (a new user's first dry run). Against the in-memory cluster."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.jobs.earlier_runs import longest_earlier_s
from hpc_runner.jobs.submit_run import submit_run
from hpc_runner.records.read import MAX_BYTES
from hpc_runner.records.rundir import RunDir
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.sweep.spec import build_spec
from hpc_runner.sweep.submission import submit_sweep

EXAMPLE = Path(__file__).resolve().parents[2] / "bundles" / "synthetic_seg"


def earlier_run(folder: Path, minutes: float, *, entry: str = "run", status: str = "completed",
                bundle: str = "synthetic_seg") -> None:
    """A run dir as the runner leaves it: run.yaml with the entry, the bundle, started and ended (ISO, offset)."""
    start = dt.datetime(2026, 3, 1, 9, 0, 0).astimezone()
    run = RunDir(folder).create()
    run.update_record(entry=entry, status="prepared", bundle={"name": bundle}, attempts=0)
    run.update_record(status="running", started=start.isoformat(timespec="seconds"), ended=None, attempts=1)
    run.update_record(status=status, ended=(start + dt.timedelta(minutes=minutes)).isoformat(timespec="seconds"))


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "runs" / "synthetic_seg"
    earlier_run(root / "2026-03-01_09-00-00", 29)
    earlier_run(root / "2026-03-01_10-00-00", 12)
    earlier_run(root / "2026-03-02_09-00-00", 300, status="failed")  # a failed run says nothing of its length
    earlier_run(root / "2026-03-03_09-00-00", 600, entry="evaluate")  # another entry
    earlier_run(root / "sweep-2026-03-04_09-00-00" / "points" / "0000", 20)
    return root


def _profile(time: str) -> ClusterProfile:
    return ClusterProfile("mem", [], {"executor": "memory", "time": time, "mem_gb": 1})


def test_the_longest_completed_earlier_run_of_the_entry_is_read_from_the_run_dirs(runs: Path) -> None:
    assert longest_earlier_s("synthetic_seg", "run") == 29 * 60
    assert longest_earlier_s("synthetic_seg", "evaluate") == 600 * 60
    assert longest_earlier_s("other", "run") is None


def test_a_dry_run_notes_a_time_50x_the_longest_earlier_run_with_a_shorter_one(make_cluster, runs: Path,
                                                                               tmp_path: Path) -> None:
    make_cluster()
    cfg = load_bundle_config(EXAMPLE)
    res = submit_run(cfg, None, _profile("24:00:00"), tmp_path / "new", dry_run=True, preflight=False)
    notes = [n for n in res.notes if "earlier run" in n]
    assert notes == ["# note: time 24:00:00 is 50x the longest earlier run of this bundle (29 min); a shorter time "
                     "starts sooner (--scheduler-option time=01:00:00)"], res.notes
    assert not (tmp_path / "new").exists()  # a dry run writes nothing

    spec = build_spec(["learning_rate=0.001,0.002"])
    res = submit_sweep(cfg, None, spec, _profile("24:00:00"), tmp_path / "sw", dry_run=True, preflight=False)
    assert any("is 50x the longest earlier run" in n for n in res.notes[2:]), res.notes  # printed below the scripts


@pytest.mark.parametrize("time", ["04:00:00", "01:00:00"])  # under 10x (4 h is 8x), or not over an hour
def test_a_time_within_10x_of_earlier_runs_or_an_hour_is_not_noted(make_cluster, runs: Path, tmp_path: Path,
                                                                     time: str) -> None:
    make_cluster()
    res = submit_run(load_bundle_config(EXAMPLE), None, _profile(time), tmp_path / "new", dry_run=True,
                     preflight=False)
    assert not [n for n in res.notes if "earlier run" in n], res.notes


def _time_notes(res) -> list[str]:
    return [n for n in res.notes if n.startswith("# note: time ")]


def test_a_first_dry_run_with_no_earlier_run_notes_that_its_time_is_not_compared(make_cluster, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch
                                                                                 ) -> None:
    make_cluster()
    monkeypatch.chdir(tmp_path)
    cfg = load_bundle_config(EXAMPLE)
    res = submit_run(cfg, None, _profile("24:00:00"), Path("out") / "new", dry_run=True, preflight=False)
    assert _time_notes(res) == [
        "# note: time 24:00:00 (profile mem) is not compared with an earlier run: none of synthetic_seg's entry run "
        "has completed under out or runs/synthetic_seg; once one has, this note suggests a time (after a sweep, "
        "`status` and `collect` do: `--right-size`)"], res.notes
    res = submit_run(cfg, None, _profile("24:00:00"), None, dry_run=True, preflight=False)  # the default run dir
    assert [n for n in _time_notes(res) if "is not compared" in n and "under runs/synthetic_seg;" in n], res.notes

    spec = build_spec(["learning_rate=0.001,0.002"])
    res = submit_sweep(cfg, None, spec, _profile("24:00:00"), None, dry_run=True, preflight=False)
    assert [n for n in _time_notes(res) if "is not compared" in n], res.notes
    assert not (tmp_path / "runs").exists() and not (tmp_path / "out").exists()  # a dry run writes nothing


def test_earlier_runs_next_to_the_output_dir_are_compared(make_cluster, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    make_cluster()
    monkeypatch.chdir(tmp_path)  # ./runs holds nothing: the runs went to --output_dir's folder
    scratch = tmp_path / "scratch" / "seg"
    earlier_run(scratch / "first", 20)
    earlier_run(scratch / "lr-sweep" / "points" / "0000", 29)
    cfg = load_bundle_config(EXAMPLE)
    res = submit_run(cfg, None, _profile("24:00:00"), scratch / "second", dry_run=True, preflight=False)
    assert _time_notes(res) == ["# note: time 24:00:00 is 50x the longest earlier run of this bundle (29 min); a "
                                "shorter time starts sooner (--scheduler-option time=01:00:00)"], res.notes
    spec = build_spec(["learning_rate=0.001,0.002"])
    res = submit_sweep(cfg, None, spec, _profile("24:00:00"), scratch / "sweep-2", dry_run=True, preflight=False)
    assert [n for n in _time_notes(res) if "is 50x the longest earlier run" in n], res.notes


@pytest.mark.parametrize("damage", ["a: [unclosed", "!!python/object/apply:os.system ['true']", "- a list\n",
                                    "folder", "fifo", "devzero", "huge"])
def test_a_damaged_run_yaml_among_the_earlier_runs_is_skipped(make_cluster, tmp_path: Path, damage: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    make_cluster()
    monkeypatch.chdir(tmp_path)
    scratch = tmp_path / "scratch"
    earlier_run(scratch / "a-good", 29)
    bad = scratch / "z-damaged" / "run.yaml"  # newest by name: read first
    bad.parent.mkdir(parents=True)
    if damage == "folder":
        bad.mkdir()
    elif damage == "fifo":
        os.mkfifo(bad)  # reading it would block: refused as not a regular file
    elif damage == "devzero":
        bad.symlink_to("/dev/zero")  # reading it would never end
    elif damage == "huge":
        with bad.open("wb") as f:  # over the records' bound: refused by its size, not read
            f.truncate(MAX_BYTES + 1)
    else:
        bad.write_text(damage)
    earlier_run(scratch / "m-odd-times", 0)
    (scratch / "m-odd-times" / "run.yaml").write_text(  # a naive start and an aware end: no length
        "status: completed\nentry: run\nbundle: {name: synthetic_seg}\nstarted: 2026-03-01T09:00:00\n"
        "ended: 2026-03-05T09:00:00+01:00\n")
    res = submit_run(load_bundle_config(EXAMPLE), None, _profile("24:00:00"), scratch / "new", dry_run=True,
                     preflight=False)
    assert [n for n in _time_notes(res) if "is 50x the longest earlier run of this bundle (29 min)" in n], res.notes


@pytest.mark.parametrize("time", ["01:00:00", "00:30:00"])
def test_a_time_of_an_hour_or_less_gets_no_note_with_or_without_earlier_runs(make_cluster, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             time: str) -> None:
    make_cluster()
    monkeypatch.chdir(tmp_path)
    res = submit_run(load_bundle_config(EXAMPLE), None, _profile(time), tmp_path / "new", dry_run=True,
                     preflight=False)
    assert not _time_notes(res), res.notes
    res = submit_run(load_bundle_config(EXAMPLE), None, _profile("01:00:01"), tmp_path / "new", dry_run=True,
                     preflight=False)
    assert [n for n in _time_notes(res) if "is not compared" in n], res.notes  # just over the hour: noted
