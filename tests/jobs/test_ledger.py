"""The ledger: every change of a point's state is a transition it allows, bounded, under a lock; a job reads
its own point only. The model-based test drives random interleavings from two processes."""

from __future__ import annotations

import multiprocessing
import traceback
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr


def _sweep(folder: Path, n: int = 4, bounds: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"kind": sr.KIND, "version": 1, "submissions": [], "bounds": bounds or {}}
    sr.write_new(sr.SweepRecord(folder, data, sr.new_points([{"a": i} for i in range(n)], n)))
    return folder


def test_a_transition_the_table_does_not_allow_is_refused_and_nothing_is_written(tmp_path: Path):
    sweep = _sweep(tmp_path / "s")
    with sr.locked(sweep) as ledger:
        ledger.submit(0, "10_0")
    before = (sweep / sr.SWEEP_FILE).read_text()
    with pytest.raises(sr.TransitionError, match="point 0 cannot submit from state submitted"), \
            sr.locked(sweep) as ledger:
        ledger.submit(0, "11_0")  # a point with a live job is never given a second one
    assert (sweep / sr.SWEEP_FILE).read_text() == before


def test_a_point_returned_past_the_bound_gives_up_with_the_cause_returned(tmp_path: Path):
    sweep = _sweep(tmp_path / "s", bounds={"max_returns": 2})
    for n in range(3):
        with sr.locked(sweep) as ledger:
            ledger.submit(1, f"{n}_0")
            assert ledger.return_point(1, f"{n}_0", "59 s left")
    point = sr.SweepRecord.load(sweep).points[1]
    assert point["submit"] == sr.GAVE_UP and point["returns"] == 3
    assert point["cause"]["kind"] == "RETURNED" and "returned unrun 3 times" in point["cause"]["message"]


def test_a_job_that_no_longer_owns_a_point_cannot_return_it(tmp_path: Path):
    sweep = _sweep(tmp_path / "s")
    with sr.locked(sweep) as ledger:
        ledger.submit(2, "5_2")
        assert not ledger.return_point(2, "4_2", "late")  # another job's point: nothing changes
    assert sr.SweepRecord.load(sweep).points[2]["job_id"] == "5_2"


def test_resubmissions_are_bounded_and_the_refusal_names_the_point(tmp_path: Path):
    sweep = _sweep(tmp_path / "s", bounds={"max_retries": 1})
    with sr.locked(sweep) as ledger:
        ledger.submit(0, "1_0")
        ledger.retry(0, {"lr": 0.1})
        ledger.submit(0, "2_0")
    with pytest.raises(ClusterError, match="point 0 was resubmitted 1 times already"), sr.locked(sweep) as ledger:
        ledger.retry(0)
    point = sr.SweepRecord.load(sweep).points[0]
    assert point["retries"] == 1 and point["extra"] == {"lr": 0.1} and point["jobs"] == ["1_0", "2_0"]


def test_a_job_reads_its_own_point_from_its_line(tmp_path: Path):
    sweep = _sweep(tmp_path / "s", n=2000)
    with sr.locked(sweep) as ledger:
        ledger.submit(1234, "7_1234")
    assert sr.read_point(sweep, 1234)["job_id"] == "7_1234"
    assert sr.read_point(sweep, 0)["params"] == {"a": 0}
    # a hand-edited YAML record still reads (the slow path)
    text = (sweep / sr.SWEEP_FILE).read_text()
    import json

    import yaml

    (sweep / sr.SWEEP_FILE).write_text(yaml.safe_dump(json.loads(text)))
    assert sr.read_point(sweep, 1234)["job_id"] == "7_1234"


@pytest.mark.parametrize(("damage", "culprit"), [
    ({"job_folder": "/tmp"}, "job_folder '/tmp' resolves to /tmp, outside"),
    ({"base": "../other/base"}, "base '../other/base' resolves to"),
    ({"base": ""}, "base is '', not a folder name"),
    ({"points": "link"}, "the folder points/ 'points' resolves to"),
    ({"point": "link"}, "the folder points/, entry 0001 'points/0001' resolves to"),
    ({"attempts": "link"}, "the folder attempts/ 'attempts' resolves to"),
    ({"attempts": ["../../elsewhere"]}, "point 1 of the sweep record has attempts"),
])
def test_a_record_naming_a_folder_outside_its_sweep_dir_is_refused_naming_the_key(tmp_path: Path, damage, culprit):
    """Issue 32: every folder sweep.yaml names resolves inside the sweep dir (symbolic links and '..' resolved)."""
    from hpc_runner.records.atomic import write_text_atomic

    sweep, outside = _sweep(tmp_path / "s"), tmp_path / "outside"
    outside.mkdir()
    record = sr.SweepRecord.load(sweep)
    if damage.get("points") == "link":
        (sweep / sr.POINTS_DIR).symlink_to(outside)
    elif damage.get("point") == "link":
        (sweep / sr.POINTS_DIR).mkdir()
        (sweep / record.points[1]["dir"]).symlink_to(outside)
    elif damage.get("attempts") == "link":
        (sweep / sr.ATTEMPTS_DIR).symlink_to(outside)
    elif "attempts" in damage:
        record.points[1]["attempts"] = damage["attempts"]
    else:
        record.data.update(damage)
    write_text_atomic(record.file, record.text())
    with pytest.raises(ClusterError) as err:
        sr.SweepRecord.load(sweep)
    assert culprit in err.value.paragraph() and err.value.where == str(sweep / sr.SWEEP_FILE)
    assert list(outside.iterdir()) == []


def test_a_sweep_dir_reached_through_a_link_and_its_own_links_inside_it_are_fine(tmp_path: Path):
    sweep = _sweep(tmp_path / "s")
    (tmp_path / "link").symlink_to(sweep)  # runs/ on scratch, reached through a link
    (sweep / sr.POINTS_DIR).mkdir()
    (sweep / sr.POINTS_DIR / "0000").symlink_to(sweep / "elsewhere-inside")
    assert len(sr.SweepRecord.load(tmp_path / "link").points) == 4


# ---------------------------------------------------------------- the model-based test


def _serve(conn: Any) -> None:
    """A second process that applies ledger transitions on request (so the lock is exercised across processes)."""
    from hpc_runner.records.rundir import RunDir

    while True:
        message = conn.recv()
        if message is None:
            return
        op, folder, args = message
        try:
            if op == "finish":
                index, status = args
                RunDir(Path(folder) / sr.point_dir_name(index, 4)).update_record(status=status)
                conn.send(("ok", None))
                continue
            with sr.locked(folder) as ledger:
                if op == "submit":
                    for i in args[0]:
                        ledger.submit(i, args[1])
                    result = None
                elif op == "wait":
                    for i in args[0]:
                        ledger.wait(i)
                    result = None
                elif op == "return":
                    result = ledger.return_point(args[0], args[1], "model")
                elif op == "retry":
                    ledger.retry(args[0])
                    result = None
                elif op == "cancel":
                    ledger.cancel(args[0])
                    result = None
                else:
                    raise ValueError(op)
            conn.send(("ok", result))
        except ClusterError as exc:
            conn.send(("refused", exc.message))
        except Exception:  # a bug: the test shows it
            conn.send(("error", traceback.format_exc()))


class _Pool:
    """Two long-lived processes (started once for every example hypothesis runs)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns = []
        self.procs = []
        for _ in range(2):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_serve, args=(child,), daemon=True)
            proc.start()
            self.conns.append(parent)
            self.procs.append(proc)

    def call(self, which: int, op: str, folder: Path, *args: Any) -> tuple[str, Any]:
        self.conns[which].send((op, str(folder), args))
        status, value = self.conns[which].recv()
        assert status != "error", value
        return status, value

    def close(self) -> None:
        for c in self.conns:
            c.send(None)
        for p in self.procs:
            p.join(10)


N, MAX_RETURNS, MAX_RETRIES = 4, 2, 2


@pytest.fixture(scope="module")
def pool():
    p = _Pool()
    yield p
    p.close()


def test_the_ledger_holds_its_invariants_under_random_interleavings_from_two_processes(pool, tmp_path_factory):
    class LedgerMachine(RuleBasedStateMachine):
        """The model: what each point's state must be after each event, and every job ever submitted."""

        @initialize()
        def setup(self) -> None:
            self.dir = _sweep(tmp_path_factory.mktemp("ledger"), N, {"max_returns": MAX_RETURNS,
                                                                    "max_retries": MAX_RETRIES})
            self.state = {i: sr.SUBMITTING for i in range(N)}
            self.owner: dict[int, str | None] = {i: None for i in range(N)}
            self.ended: dict[str, bool] = {}  # job -> it ended (cannot run anything again)
            self.holders: dict[int, set[str]] = {i: set() for i in range(N)}  # live jobs holding each point
            self.returns = {i: 0 for i in range(N)}
            self.retries = {i: 0 for i in range(N)}
            self.jobs = {i: 0 for i in range(N)}
            self.sbatch = 0
            self.next_job = 0

        def _job(self) -> str:
            self.next_job += 1
            return f"{self.next_job}_0"

        @rule(proc=st.integers(0, 1), data=st.data())
        def submit_what_waits(self, proc: int, data: Any) -> None:
            free = [i for i, s in self.state.items() if s in (sr.SUBMITTING, sr.WAITING, sr.NOT_SUBMITTED)]
            if not free:
                return
            chosen = data.draw(st.lists(st.sampled_from(free), min_size=1, unique=True))
            job = self._job()
            self.sbatch += 1
            assert pool.call(proc, "submit", self.dir, chosen, job) == ("ok", None)
            for i in chosen:
                self.state[i], self.owner[i] = sr.SUBMITTED, job
                self.holders[i].add(job)
                self.jobs[i] += 1
            self.ended[job] = False

        @rule(proc=st.integers(0, 1), index=st.integers(0, N - 1))
        def no_slot_free(self, proc: int, index: int) -> None:
            if self.state[index] not in (sr.SUBMITTING, sr.NOT_SUBMITTED, sr.WAITING):
                return
            assert pool.call(proc, "wait", self.dir, [index])[0] == "ok"
            self.state[index] = sr.WAITING

        @rule(proc=st.integers(0, 1), index=st.integers(0, N - 1))
        def task_returns_its_point(self, proc: int, index: int) -> None:
            job = self.owner[index]
            if self.state[index] != sr.SUBMITTED or job is None or self.ended[job]:
                return
            status, returned = pool.call(proc, "return", self.dir, index, job)
            assert status == "ok" and returned
            self.holders[index].discard(job)
            self.returns[index] += 1
            self.owner[index] = None
            self.state[index] = sr.GAVE_UP if self.returns[index] > MAX_RETURNS else sr.WAITING

        @rule(proc=st.integers(0, 1), index=st.integers(0, N - 1), how=st.sampled_from(["completed", "failed"]))
        def task_ends(self, proc: int, index: int, how: str) -> None:
            job = self.owner[index]
            if self.state[index] != sr.SUBMITTED or job is None or self.ended[job]:
                return
            assert pool.call(proc, "finish", self.dir, index, how) == ("ok", None)
            self.ended[job] = True
            for holders in self.holders.values():
                holders.discard(job)

        @rule(proc=st.integers(0, 1), index=st.integers(0, N - 1))
        def a_late_task_tries_to_return_a_point_it_lost(self, proc: int, index: int) -> None:
            stale = [j for j, ended in self.ended.items() if j != self.owner[index]]
            if not stale:
                return
            status, returned = pool.call(proc, "return", self.dir, index, stale[0])
            assert status == "ok" and returned is False  # nothing changes

        @rule(proc=st.integers(0, 1), index=st.integers(0, N - 1))
        def resume(self, proc: int, index: int) -> None:
            job = self.owner[index]
            ended_job = job is not None and self.ended[job]
            if not (ended_job or self.state[index] in (sr.NOT_SUBMITTED, sr.CANCELLED, sr.GAVE_UP)):
                return
            status, _ = pool.call(proc, "retry", self.dir, index)
            if self.retries[index] + 1 > MAX_RETRIES:
                assert status == "refused"
                return
            assert status == "ok"
            self.retries[index] += 1
            self.state[index], self.owner[index] = sr.WAITING, None

        @rule(proc=st.integers(0, 1), index=st.integers(0, N - 1))
        def cancel(self, proc: int, index: int) -> None:
            status, _ = pool.call(proc, "cancel", self.dir, index)
            if self.state[index] in (sr.SUBMITTING, sr.WAITING, sr.NOT_SUBMITTED):
                assert status == "ok"
                self.state[index] = sr.CANCELLED
            else:
                assert status == "refused"  # a point with a job is cancelled by cancelling the job

        @invariant()
        @precondition(lambda self: hasattr(self, "dir"))
        def the_record_is_what_the_events_made_it(self) -> None:
            points = sr.SweepRecord.load(self.dir).points
            for i, p in enumerate(points):
                assert p["submit"] == self.state[i], (i, p)  # the final state matches the last event
                assert p.get("job_id") == self.owner[i]
                assert len(p.get("jobs", [])) == self.jobs[i]  # no lost update
                assert p.get("returns", 0) == self.returns[i] and p.get("retries", 0) == self.retries[i]
                assert len(self.holders[i]) <= 1  # never two live jobs for one point

        @invariant()
        @precondition(lambda self: hasattr(self, "dir"))
        def sbatch_calls_are_bounded(self) -> None:
            assert self.sbatch <= N * (1 + MAX_RETRIES + MAX_RETURNS)
            assert all(self.jobs[i] <= 1 + MAX_RETRIES + MAX_RETURNS for i in range(N))

    LedgerMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=40, deadline=None,
                                               suppress_health_check=list(HealthCheck))
    LedgerMachine.TestCase().runTest()
