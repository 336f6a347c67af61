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

from hpc_runner.errors import ClusterError, UserError

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
    from hpc_runner.engine.runner import check_entry
    from hpc_runner.records.rundir import check_folder_path
    from hpc_runner.sweep.submission import Submitted, _fresh_dir, _remove_sweep, default_sweep_dir
    from hpc_runner.tune.tune_dir import check_space, create_tune_dir

    workers = check_workers(parallel, settings.trials)
    directory = Path(output_dir) if output_dir else default_sweep_dir(cfg.name, prefix="tune")
    check_folder_path(directory, "the tune dir")
    if dry_run:
        check_entry(cfg, entry)
        note = check_space(cfg, settings, preflight)
        return _dry_run(cfg, directory, settings, profile, workers, hold, note)
    created = _fresh_dir(directory, "the tune dir")
    try:
        record = create_tune_dir(cfg, directory, entry, settings, argv=argv, cluster=profile.to_record(),
                                 preflight=preflight)
    except BaseException:
        _remove_sweep(directory, created)
        raise
    note = record.data.get("checked", "")
    out = Submitted(directory)
    if profile.executor == "local":
        _run_workers_here(directory, range(workers), profile, "tune", out, log)
    else:
        try:
            send_workers(directory, list(range(workers)), profile, reason="tune", out=out, hold=hold,
                         preflight=preflight)
        except BaseException as exc:
            _remove_sweep(directory, created)  # one sbatch: when it fails nothing is queued
            if isinstance(exc, Exception) and not isinstance(exc, UserError):
                raise ClusterError(f"submitting the tune failed: {exc}") from exc
            raise
    out.notes.append(f"{workers} worker(s) for {settings.trials} trial(s); {note}")
    return out


def _run_workers_here(directory: Path, indices: Sequence[int], profile: Any, reason: str, out: Any,
                      log: Log) -> None:
    from hpc_runner.records.rundir import now_iso
    from hpc_runner.sweep import ledger as sr
    from hpc_runner.tune.worker import FAILED, run_tune_worker

    sweep_dir = str(directory.resolve())
    with sr.locked(directory) as record:
        record.submissions().append({"at": now_iso(), "reason": reason, "profile": profile.to_record(),
                                     "arrays": [{"job_id": "local", "size": len(indices)}],
                                     "workers": {str(i): "local" for i in indices}})
        record.data["state"] = "submitted"
    job_record = {"cluster": profile.name, "sweep": sweep_dir, "id": "local"}
    for i in indices:
        log(f"hpc-runner: tune worker {i} runs here")
        res = run_tune_worker(sweep_dir, int(i), job_record)
        out.job_ids[int(i)] = "local"
        out.local_failures += res["trials"][FAILED]


def send_workers(directory: Path, indices: list[int], profile: Any, *, reason: str, out: Any, hold: bool = False,
                 preflight: bool = True) -> None:
    """Submit workers ``indices`` of the tune in ``directory`` as one job array; record it in sweep.yaml."""
    from hpc_runner.records.rundir import now_iso
    from hpc_runner.scheduler.slurm_executor import make_executor, slurm_parameters, submit_array
    from hpc_runner.sweep import ledger as sr
    from hpc_runner.sweep.governor import outside_the_job
    from hpc_runner.tune.worker import run_tune_worker

    sweep_dir = str(Path(directory).resolve())
    # Held over the sbatch: a worker that starts at once must find its submission recorded.
    with sr.locked(directory) as record:
        params = slurm_parameters(
            profile,
            job_name=f"hpcr-tune-{record.data.get('bundle', 'tune')}"[:64],
            hold=hold,
            chdir=(record.data.get("command") or {}).get("cwd") or os.getcwd(),
        )
        if preflight:
            from hpc_runner.scheduler.resource_check import check_resources

            check_resources(profile, record.job_folder, params, map_count=len(indices) if len(indices) > 1 else None,
                            what=f"the tune's {len(indices)} worker(s)")
        executor = make_executor(profile, record.job_folder, params)
        job_record = {"cluster": profile.name, "sweep": sweep_dir}
        with outside_the_job():
            jobs = submit_array(executor, run_tune_worker,
                                [[sweep_dir] * len(indices), list(indices), [job_record] * len(indices)])
        array = {"job_id": jobs[0].job_id.split("_")[0], "size": len(indices)}
        record.submissions().append({"at": now_iso(), "reason": reason, "profile": profile.to_record(),
                                     "arrays": [array], "workers": {str(i): j.job_id for i, j in zip(indices, jobs)}})
        record.data["state"] = "submitted"
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


def _dry_run(cfg: Any, directory: Path, settings: Any, profile: Any, workers: int, hold: bool, note: str) -> Any:
    from hpc_runner.scheduler.slurm_executor import sbatch_script, slurm_parameters
    from hpc_runner.sweep import ledger as sr
    from hpc_runner.sweep.submission import Submitted

    out = Submitted(directory, dry_run=True)
    out.notes.append(f"{settings.trials} trial(s) by {workers} worker(s), space valid ({note})")
    if profile.executor == "local":
        out.notes.append(f"profile '{profile.name}' runs the workers here, one after another (no sbatch script)")
    else:
        params = slurm_parameters(profile, job_name=f"hpcr-tune-{cfg.name}"[:64], hold=hold, chdir=os.getcwd())
        script = sbatch_script(profile, directory / sr.SWEEP_JOB_FOLDER, params,
                               map_count=workers if workers > 1 else None)
        out.scripts.append(f"# sbatch script for the array of {workers} worker(s)\n{script}")
    out.notes.append("# space\n" + "\n".join(f"  {s}" for s in settings.space))
    return out
