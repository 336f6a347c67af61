"""The login side of ``hpc-runner cluster check NAME``: one short job per partition, their findings, the profile.

``submit_checks`` queues, through the profile's executor (any backend: scheduler/executor.py), one job per
partition running the probes of scheduler/site_check.py; ``wait_for_checks`` waits at most a timeout and cancels
what is left (also on Ctrl-C, by its caller); ``collect_findings`` reads each job's findings file and adds what only
the login side sees: whether the accounting answers for the job, and how long it waited in the queue;
``profile_with_checked`` returns the profile's text with its ``checked:`` section replaced, which the command checks
as a profile and writes atomically (cli/cluster.py).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from hpc_runner.records.read import RecordError
from hpc_runner.scheduler.executor import Executor, JobRequest
from hpc_runner.scheduler.job_logs import tail_line
from hpc_runner.scheduler.job_state import FROM_ACCOUNTING
from hpc_runner.scheduler.profile import ClusterProfile
from hpc_runner.scheduler.site_check import read_findings, run_site_check
from hpc_runner.scheduler.site_findings import CHECKED_KEY, CheckedSite, Finding, PartitionFindings, make_finding

DEFAULT_PARTITION = "default"  # the name the findings of a job on the cluster's default partition are kept under
SIGNAL_ROOM_S = 60  # besides the stop signal's delay: how much earlier a scheduler may send it, at most


@dataclass
class CheckJob:
    """One partition's check job: where its findings go, when it was queued."""

    partition: str
    executor: Executor
    job_id: str
    findings_file: Path
    submitted: float
    stderr: Path | None = None


def check_profile_for(profile: ClusterProfile, partition: str | None) -> ClusterProfile:
    """The profile a check job on ``partition`` is submitted with: the profile's own settings (its setup, python,
    CPUs, GPUs), that partition, one task, and a time limit just long enough for the stop signal to come."""
    settings = dict(profile.settings)
    if partition and partition != DEFAULT_PARTITION:
        settings["partition"] = partition
    delay = int(settings.get("signal_delay_s") or 0)
    settings["time"] = max(2, math.ceil((delay + SIGNAL_ROOM_S + 30) / 60))
    settings.pop("array_parallelism", None)
    return ClusterProfile(profile.name, list(profile.sources), settings)


def check_request(profile: ClusterProfile, partition: str, executor: Executor, *, scratch_mb: int = 64,
                  wait_for_signal: bool = True) -> dict[str, Any]:
    """What the check job is asked to probe (plain JSON: the job reads it back from its arguments file)."""
    container = profile.get("container") or {}
    return {"partition": partition, "gpus": executor.requested_gpus(), "cpus": profile.get("cpus_per_task"),
            "setup": [str(line) for line in profile.get("setup") or []],
            "container": container.get("runtime") if isinstance(container, dict) else None,
            "python": None, "scratch_mb": scratch_mb,
            "signal_wait_s": profile.time_minutes() * 60 if wait_for_signal else 0, "requeue": wait_for_signal}


def partitions_to_check(profile: ClusterProfile, named: Sequence[str] | None) -> list[str]:
    """The partitions named, else the profile's ``partitions``, else its ``partition``, else the cluster's default."""
    if named:
        return list(dict.fromkeys(named))
    listed = [str(p) for p in profile.get("partitions") or []]
    if listed:
        return listed
    return [str(profile.get("partition"))] if profile.get("partition") else [DEFAULT_PARTITION]


def submit_checks(profile: ClusterProfile, partitions: Sequence[str], folder: Path,
                  executor_for: Callable[[ClusterProfile], Executor], *, scratch_mb: int = 64,
                  wait_for_signal: bool = True, clock: Callable[[], float] = time.time) -> list[CheckJob]:
    """Queue one check job per partition (each through the executor of the profile on that partition); return them.
    A partition the scheduler refuses stops the check (its message said; the jobs queued before are returned in
    the error's ``jobs``, so the caller can cancel them)."""
    jobs: list[CheckJob] = []
    for partition in partitions:
        checked = check_profile_for(profile, partition)
        executor = executor_for(checked)
        executor.check_time()
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", partition)[:60] or "partition"
        job_folder = folder / safe
        job_folder.mkdir(parents=True, exist_ok=True)
        findings_file = job_folder / "findings.json"
        findings_file.unlink(missing_ok=True)
        request = JobRequest(job_name="hpcr-cluster-check", folder=job_folder,
                             describe=f"hpc-runner cluster check {profile.name}: probes partition {partition}")
        args = check_request(checked, partition, executor, scratch_mb=scratch_mb, wait_for_signal=wait_for_signal)
        try:
            job = executor.submit(run_site_check, [[str(findings_file.resolve())], [args]], request)[0]
        except BaseException as exc:
            exc.jobs = jobs  # type: ignore[attr-defined]
            raise
        jobs.append(CheckJob(partition, executor, job.job_id, findings_file, clock(), job.stderr))
    return jobs


def _settled(job: CheckJob) -> bool:
    """Whether the job's findings are all in: the probes done, and a requeue it asked for answered (refused, or
    the requeued attempt came back)."""
    try:
        data = read_findings(job.findings_file)
    except RecordError:
        return False
    return bool(data and data.get("done"))


def wait_for_checks(jobs: Sequence[CheckJob], timeout: float, *, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic, poll_s: float = 3.0,
                    log: Callable[[str], None] = print) -> list[CheckJob]:
    """Wait until every job has ended or written all its findings, at most ``timeout`` seconds; cancel what is still
    queued then (a job requeued by its own check is cancelled once it said so). Return the jobs cut short by the
    timeout."""
    deadline = clock() + timeout
    waiting = list(jobs)
    while waiting:
        waiting = [j for j in waiting if not _settled(j) and j.job_id in j.executor.still_queued([j.job_id])]
        if not waiting or clock() >= deadline:
            break
        sleep(min(poll_s, max(0.0, deadline - clock())))
    cancel_checks(jobs)
    if waiting:
        log(f"hpc-runner: cluster check: {len(waiting)} job(s) still queued after {round(timeout)} s, cancelled: "
            + ", ".join(f"{j.job_id} ({j.partition})" for j in waiting))
    return waiting


def cancel_checks(jobs: Sequence[CheckJob]) -> None:
    """Cancel the check jobs still queued (each through its own executor)."""
    for job in jobs:
        if job.executor.still_queued([job.job_id]):
            job.executor.cancel([job.job_id])


def accounting_finding(job: CheckJob) -> Finding:
    """Whether the scheduler's accounting answers for the check job: its state, elapsed time, peak memory, CPUs."""
    answer = job.executor.query([job.job_id])
    status = answer.status(job.job_id)
    if answer.source != FROM_ACCOUNTING or status is None:
        said = f" ({answer.error[:160]})" if answer.error else ""
        return make_finding("accounting", {"ok": False, "detail": f"no accounting for job {job.job_id}: states from "
                                           f"{answer.said()}{said}", "source": answer.source})
    usage = answer.usage.get(job.job_id)
    missing = [name for name, value in (("elapsed", status.elapsed_s),
                                        ("peak memory", usage.peak_memory_bytes if usage else None),
                                        ("CPUs", usage.cpus if usage else None)) if value is None]
    state = status.state.value
    unsampled = ""
    if missing == ["peak memory"] and status.requeues:
        # the usage is the current attempt's: the requeued check attempt ends within a second, before SLURM samples
        # a step's memory (seen on the local SLURM: MaxRSS empty for a 0.2 s step, set for the first attempt's)
        missing, unsampled = [], f"no memory sample in attempt {status.requeues + 1} (too short)"
    if missing:
        return make_finding("accounting", {"ok": False, "detail": f"{answer.said()} says {state} but not the job's "
                                           f"{', '.join(missing)}", "state": state})
    peak = unsampled or f"peak {round((usage.peak_memory_bytes or 0) / 2**20, 1) if usage else None} MB"
    return make_finding("accounting", {"ok": True, "detail": f"{answer.said()}: {state}, {round(status.elapsed_s or 0)}"
                                       f" s, {peak}, {usage.cpus if usage else '?'} CPU(s)", "state": state})


def _log_tail(path: Path | None) -> str:
    """The telling line of the job's stderr (why it ended before its probes), through the job logs' reader."""
    if path is None:
        return ""
    return (tail_line(path) or "")[-300:]


def collect_findings(job: CheckJob, *, timed_out: bool = False) -> PartitionFindings:
    """The partition's findings: what its job wrote, the accounting's answer, and the queue wait."""
    out = PartitionFindings(job.partition, job_id=job.job_id)
    try:
        data = read_findings(job.findings_file)
    except RecordError as err:
        data = None
        out.findings["job"] = make_finding("job", {"ok": False,
                                                   "detail": f"its findings cannot be read: {err.message}"})
    if data is None and "job" not in out.findings:
        why = ("it was still queued at the timeout" if timed_out
               else f"it ended before its probes ran: {_log_tail(job.stderr)}")
        out.findings["job"] = make_finding("job", {"ok": False, "detail": f"job {job.job_id} wrote no findings: {why}"})
    if data is not None:
        out.node = str(data.get("node") or "") or None
        for name, answer in data["findings"].items():
            if isinstance(answer, dict):
                out.findings[str(name)] = make_finding(str(name), answer)
        started = data.get("started")
        if isinstance(started, int | float) and not isinstance(started, bool) and math.isfinite(started):
            wait = max(0.0, started - job.submitted)
            out.findings["queue_wait"] = make_finding("queue_wait", {"ok": None, "detail": f"{round(wait)} s from "
                                                      "submission to the probes' start", "seconds": round(wait, 1)})
    if not timed_out or data is not None:
        out.findings["accounting"] = accounting_finding(job)
    return out


def checked_site(profile: ClusterProfile, found: Sequence[PartitionFindings], command: str,
                 now: datetime | None = None) -> CheckedSite:
    """The ``checked:`` section of these findings, dated now."""
    date = (now or datetime.now()).replace(microsecond=0).isoformat()
    return CheckedSite(date, command, {p.partition: p for p in found})


_TOP_KEY = re.compile(r"[^\s#]")


def profile_with_checked(text: str, site: CheckedSite) -> str:
    """The profile's YAML ``text`` with its top-level ``checked:`` block replaced by ``site`` (every other line,
    comments included, kept as it was). The section is written by the YAML serializer."""
    lines = text.splitlines()
    kept: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith(f"{CHECKED_KEY}:"):
            skipping = True
            continue
        if skipping and _TOP_KEY.match(line):
            skipping = False
        if skipping or line.startswith("# checked by `hpc-runner cluster check"):
            continue
        kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    block = yaml.safe_dump({CHECKED_KEY: site.to_record()}, sort_keys=False, default_flow_style=False,
                           allow_unicode=False, width=1000)
    head = f"# checked by `hpc-runner cluster check` ({site.date}); it rewrites this section, edit above it"
    return "\n".join([*kept, "", head, block.rstrip("\n")]) + "\n"
