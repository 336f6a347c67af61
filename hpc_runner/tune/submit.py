"""Start a tune: check the space, write the tune dir, then start its K workers (one array, or here).

Order of work: the space's corners are checked (ids, types, pre-flight) and, with ``--dry-run``,
nothing more. Then the tune dir is written (tune_dir.py) and one sbatch sends an array of K tasks
through submitit's ``map_array``, task i running ``run_tune_worker(dir, i, job)``; the array and the
task of each worker are recorded in sweep.yaml under the sweep lock, before any worker can write.
If the sbatch fails nothing is queued and the tune dir is removed again. With ``--cluster local``
the K workers run here, one after another (the first usually spends the whole budget).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.engine.runner import check_entry
from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import outside_the_job
from hpc_runner.jobs.ledger import SweepRecord
from hpc_runner.jobs.submit_run import fresh_dir
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.records.rundir import check_folder_path, now_iso
from hpc_runner.scheduler.executor import JobRequest
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.submission import _remove_sweep, default_sweep_dir
from hpc_runner.tune.trials import FAILED
from hpc_runner.tune.tune_dir import check_space, create_tune_dir
from hpc_runner.tune.worker import run_tune_worker

Log = Callable[[str], None]


def check_workers(parallel: int, trials: int) -> int:
    """Return the number of workers to start: ``--parallel``, at most one per trial."""
    if not isinstance(parallel, int) or parallel < 1:
        raise UserError(f"--parallel {parallel} is not a number of workers", expected="--parallel K with K >= 1")
    return min(parallel, trials)


def submit_tune(
    cfg: Any,
    entry: str | None,
    settings: Any,
    profile: Any,
    output_dir: str | Path | None = None,
    *,
    parallel: int = 1,
    argv: Sequence[str] | None = None,
    hold: bool = False,
    dry_run: bool = False,
    log: Log = print,
    preflight: bool = True,
) -> Any:
    """Check the space, write the tune dir and start ``parallel`` workers; return a Submitted."""
    workers = check_workers(parallel, settings.trials)
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    directory = Path(output_dir) if output_dir else default_sweep_dir(cfg.name, prefix="tune")
    check_folder_path(directory, "the tune dir")
    if dry_run:
        check_entry(cfg, entry)
        note = check_space(cfg, settings, preflight, entry)
        return _dry_run(cfg, directory, settings, executor, workers, hold, note)
    created = fresh_dir(directory, "the tune dir")
    try:
        record = create_tune_dir(cfg, directory, entry, settings, argv=argv, cluster=profile.to_record(),
                                 preflight=preflight)
    except BaseException:
        _remove_sweep(directory, created)
        raise
    note = record.data.get("checked", "")
    out = Submitted(directory)
    try:
        send_workers(directory, list(range(workers)), executor, reason="tune", out=out, hold=hold,
                     preflight=preflight)
    except BaseException as exc:
        _remove_sweep(directory, created)  # one sbatch: when it fails nothing is queued
        if isinstance(exc, Exception) and not isinstance(exc, UserError):
            raise ClusterError(f"submitting the tune failed: {exc}") from exc
        raise
    out.notes.append(f"{len(out.job_ids) or workers} worker(s) for {settings.trials} trial(s); {note}")
    if executor.runs_here:
        run_workers_here(directory, executor, out, log)
    return out


def run_workers_here(directory: Path, executor: Any, out: Any, log: Log) -> None:
    """Run the workers the local executor was given, one after another; count the trials that failed."""
    executor.run_pending(log)
    out.ran_here = True
    out.local_failures = sum(1 for p in SweepRecord.load(directory).points if p.get("state") == FAILED)


def workers_within(indices: list[int], limits: Any) -> tuple[list[int], str]:
    """The workers of ``indices`` the cluster's submit limits let in now (the first ones), and a note when some
    are left out. The workers share the trials, so fewer of them spend the same budget, more slowly; no free
    slot at all is a ClusterError naming the limit (nothing is queued)."""
    room = [n for n in (limits.free_slots, limits.max_array_size) if n is not None]
    cap = min(room) if room else len(indices)
    if cap >= len(indices):
        return list(indices), ""
    if cap <= 0:
        raise ClusterError(f"no submit slot is free for the tune's {len(indices)} worker(s): {limits.describe()}; "
                           "nothing was queued", expected="a free slot: wait for some of your jobs to end, "
                           "then resume the tune (hpc-runner resume DIR)")
    why = limits.describe() if limits.free_slots is not None and limits.free_slots <= cap else \
        f"MaxArraySize {limits.max_array_size} ({limits.max_array_source})"
    return list(indices[:cap]), f"{cap} of {len(indices)} worker(s) started, within the limit ({why})"


def send_workers(directory: Path, indices: list[int], executor: Any, *, reason: str, out: Any, hold: bool = False,
                 preflight: bool = True) -> None:
    """Submit workers ``indices`` of the tune in ``directory`` as one group (one job array), no more of them than
    the submit limits let in now (``workers_within``); record it. The submit call counts in the tune's budget of
    submit calls as a sweep's do (``Ledger.count_submit_call``: ClusterError, and nothing submitted, once it is
    spent)."""
    sweep_dir = str(Path(directory).resolve())
    # Held over the sbatch: a worker that starts at once must find its submission recorded.
    with sr.locked(directory) as ledger:
        record = ledger.record
        request = JobRequest(job_name=f"hpcr-tune-{record.data.get('bundle', 'tune')}", folder=record.job_folder,
                             chdir=(record.data.get("command") or {}).get("cwd") or os.getcwd(), hold=hold)
        limits = executor.limits()
        indices, capped = workers_within(indices, limits)
        if preflight:
            executor.check_resources(request, len(indices), f"the tune's {len(indices)} worker(s)")
        job_record = {"cluster": executor.name, "sweep": sweep_dir}
        ledger.count_submit_call()  # in the sweep's budget of submit calls (jobs/ledger.py), whatever the outcome
        with outside_the_job():
            jobs = executor.submit(run_tune_worker,
                                   [[sweep_dir] * len(indices), list(indices), [job_record] * len(indices)], request)
        array = {"job_id": jobs[0].job_id.split("_")[0], "size": len(indices)}
        submission = {"at": now_iso(), "reason": reason, "profile": executor.profile.to_record(),
                      "arrays": [array], "workers": {str(i): j.job_id for i, j in zip(indices, jobs)}}
        if capped:
            submission["limit"] = capped
        record.submissions().append(submission)
        ledger.all_submitted()
    if capped:
        out.notes.append(capped)
    out.arrays.append(array)
    for i, job in zip(indices, jobs):
        out.job_ids[int(i)] = job.job_id


def worker_jobs(record: Any) -> dict[int, str]:
    """Return the latest job (array task) of each worker index, from the submissions in sweep.yaml."""
    jobs: dict[int, str] = {}
    for s in record.submissions():
        for i, job in (s.get("workers") or {}).items():
            jobs[int(i)] = job
    return jobs


def _dry_run(cfg: Any, directory: Path, settings: Any, executor: Any, workers: int, hold: bool, note: str) -> Any:
    out = Submitted(directory, dry_run=True)
    out.notes.append(f"{settings.trials} trial(s) by {workers} worker(s), space valid ({note})")
    request = JobRequest(job_name=f"hpcr-tune-{cfg.name}", folder=directory / sr.JOB_FOLDER, chdir=os.getcwd(),
                         hold=hold)
    script = executor.script(request, workers)
    if script is None:
        out.notes.append(f"profile '{executor.name}' runs the workers here, one after another (no job script)")
    else:
        out.scripts.append(f"# job script for the array of {workers} worker(s)\n{script}")
    out.notes.append("# space\n" + "\n".join(f"  {s}" for s in settings.space))
    return out
