"""Grid Engine's commands as argv lists (no shell), and the one place they are run.

Each is run by records.command_output.run_command (bounded, decoded with bad bytes replaced, a timeout) and its
answer parsed by answers.py. ``qsub -terse`` submits, ``qsub -w v`` checks that a script could ever start
(nothing is submitted: "verification: found suitable queue(s)"), ``qstat -xml -g d`` lists queued and running
jobs task by task, ``qacct -j`` the finished ones, ``qdel`` cancels (``1234.3`` is task 3), ``qalter -hold_jid``
changes a queued job's dependencies, ``qconf -sconf`` and ``qconf -sq`` give the limits.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import CommandOutput, run_command
from hpc_runner.scheduler.gridengine.answers import (
    GlobalLimits,
    QueueLimits,
    Report,
    Submitted,
    limits_from_sconf,
    native_id,
    parse_submission,
    queue_limits,
    reports_from_qacct,
    statuses_from_qstat,
)
from hpc_runner.scheduler.job_status import JobStatus

TIMEOUT_S = 60
CLIENT_HINT = "the Grid Engine client commands on PATH and SGE_ROOT/SGE_CELL set (scripts/local-sge.sh env)"


def run(argv: list[str], timeout: float = TIMEOUT_S) -> CommandOutput:
    """Run one Grid Engine command; ClusterError when it cannot be run at all."""
    try:
        return run_command(argv, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"{argv[0]} could not be run ({str(exc)[:200]})", expected=CLIENT_HINT) from None


def said(out: CommandOutput) -> str:
    """What a command said when it refused: its stderr and stdout, without qsub's ``Exiting.``, on one line."""
    lines = [ln.strip() for ln in f"{out.stderr}\n{out.stdout}".splitlines()]
    return " ".join(ln for ln in lines if ln and ln != "Exiting.")[:600] or f"exit status {out.returncode}"


def submit(script: Path) -> Submitted:
    """``qsub -terse SCRIPT``; ClusterError with qsub's own words when it refuses."""
    out = run(["qsub", "-terse", str(script)])
    if out.returncode != 0:
        raise ClusterError(f"qsub refused the job: {said(out)}",
                           hint="Check the queue, the parallel environment, h_rt/h_vmem and the limits "
                           "(qconf -sconf, qconf -sq QUEUE)")
    return parse_submission(out.stdout)


def verify(script: Path) -> str | None:
    """``qsub -w v SCRIPT``: None when some queue could run the job in an empty cluster, else why not (Grid
    Engine's words). Nothing is submitted."""
    out = run(["qsub", "-w", "v", str(script)])
    return None if out.returncode == 0 else said(out)


def queued_statuses(user: str = "*") -> dict[str, JobStatus]:
    """Every queued or running job (task by task) of ``user`` (``*``: everyone's), one qstat call."""
    out = run(["qstat", "-xml", "-g", "d", "-u", user])
    if out.returncode != 0:
        raise ClusterError(f"qstat failed: {said(out)}", expected=CLIENT_HINT)
    return statuses_from_qstat(out.stdout)


def finished_reports(job_number: str) -> dict[str, Report]:
    """What ``qacct -j JOB`` says of a finished job (or each task of an array); empty when qacct has no record
    of it yet ("job id N not found": still queued, or the accounting file not yet written)."""
    native_id(job_number)  # a plain number, checked before it reaches the command line
    out = run(["qacct", "-j", job_number])
    if out.returncode != 0:
        if "not found" in out.stderr or "not found" in out.stdout:
            return {}
        raise ClusterError(f"qacct failed: {said(out)}", expected=CLIENT_HINT)
    return reports_from_qacct(out.stdout)


def native_words(job_ids: Sequence[str]) -> list[str]:
    """qdel's and qalter's words for our ids: ``1234`` for a job or a whole array, ``1234.3`` for our ``1234_2``."""
    words = []
    for job_id in job_ids:
        number, task = native_id(job_id)
        words.append(number if task is None else f"{number}.{task}")
    return list(dict.fromkeys(words))


def cancel(job_ids: Sequence[str]) -> CommandOutput:
    """``qdel`` of our ids (a job that ended already is no error of ours: qdel says it does not exist)."""
    return run(["qdel", *native_words(job_ids)])


def hold_on(job_ids: Sequence[str], after: Sequence[str]) -> None:
    """``qalter -hold_jid AFTER JOB...``: queued jobs wait for others; ClusterError with qalter's words."""
    jobs = native_words(job_ids)
    after_ids = native_words(after)
    out = run(["qalter", "-hold_jid", ",".join(after_ids), *jobs])
    if out.returncode != 0:
        raise ClusterError(f"qalter -hold_jid refused: {said(out)}")


def global_limits() -> GlobalLimits:
    """``qconf -sconf``: the global configuration's job limits."""
    out = run(["qconf", "-sconf"])
    if out.returncode != 0:
        raise ClusterError(f"qconf -sconf failed: {said(out)}", expected=CLIENT_HINT)
    return limits_from_sconf(out.stdout)


def queue(name: str) -> QueueLimits:
    """``qconf -sq NAME``: one queue's slots, limits and parallel environments."""
    out = run(["qconf", "-sq", name])
    if out.returncode != 0:
        raise ClusterError(f"qconf -sq {name[:80]} failed: {said(out)}")
    return queue_limits(out.stdout)


def qmaster_problem(timeout: float) -> str | None:
    """Why no job can be submitted from here (no qstat, or no qmaster answers), None when one answers."""
    try:
        out = run_command(["qstat", "-xml", "-u", "hpcr-nobody"], timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"qstat cannot be run here ({str(exc)[:200]}); needs {CLIENT_HINT}"
    return None if out.returncode == 0 else f"no Grid Engine qmaster answers: {said(out)}"
