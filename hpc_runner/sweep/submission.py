"""Submit a run or a sweep: check everything first, write the records, then one sbatch per array.

Order of work for a sweep: expand and check every point (nothing written), create the sweep dir with
its base config and sweep.yaml (points ``submitting``), submit the points through the profile's
executor as arrays of at most MaxArraySize tasks (one sbatch each), recording each point's job id in
the ledger. If the first sbatch fails nothing is queued and the sweep dir is removed again; if a later
one fails, the points already queued keep their job ids, the others are ``not-submitted`` (``resume``
sends them), and the error says so. With the local executor the tasks run here once they are recorded.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.engine.runner import check_entry, prepare_run
from hpc_runner.errors import ClusterError, UserError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.governor import (
    group_tasks,
    pack_of,
    plan_arrays,
    points_description,
    send_points,
)
from hpc_runner.jobs.governor import top_up as governor_top_up
from hpc_runner.jobs.submit_run import (
    CONFIG_HINT,
    dry_run_notes,
    fresh_dir,
    job_name_for,
    resolved_for_display,
    sandbox_grant,
    warn_code_once_for,
    warn_no_gpu,
)
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.jobs.targets import states_of
from hpc_runner.jobs.task import run_sweep_task
from hpc_runner.records.rundir import check_folder_path, command_line, now_iso, timestamp_name
from hpc_runner.scheduler.executor import Executor, JobRequest
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.read_ahead import read_ahead
from hpc_runner.scheduler.select import executor_for
from hpc_runner.sweep.check import check_points, preflight_overrides
from hpc_runner.sweep.spec import SweepSpec, describe_point

Log = Callable[[str], None]


def chunk(indices: Sequence[int], size: int) -> list[list[int]]:
    """Split ``indices`` into consecutive lists of at most ``size``."""
    return [list(indices[i : i + size]) for i in range(0, len(indices), size)]


def default_sweep_dir(bundle_name: str, root: Path = Path("runs"), prefix: str = "sweep") -> Path:
    """Return ``runs/<bundle>/<prefix>-<timestamp>``, made unique with a suffix."""
    import re

    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", bundle_name) or "bundle"
    base = root / safe / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', prefix)}-{timestamp_name()}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}_{n}")
    return path


# ---------------------------------------------------------------- sweeps


def submit_points(
    ledger: sr.Ledger,
    indices: Sequence[int],
    executor: Executor,
    *,
    entry: str | None,
    reason: str,
    hold: bool = False,
    array_parallelism: int | None = None,
    log: Log = print,
    preflight: bool = True,
    limits_reader: Callable[[Executor], Any] | None = None,
) -> Submitted:
    """Submit ``indices`` of a recorded sweep (under its lock) as tasks of K points, never more tasks than there
    are free submit slots (the rest wait, jobs/governor.py), in arrays of at most MaxArraySize."""
    record = ledger.record
    out = Submitted(record.path, pack=pack_of(record))
    try:
        send_points(ledger, indices, executor, run_sweep_task, entry=entry, reason=reason, out=out, hold=hold,
                    array_parallelism=array_parallelism, log=log, preflight=preflight, limits_reader=limits_reader)
    except BaseException as exc:
        if out.job_ids and isinstance(exc, Exception):
            left = sum(1 for p in record.points if p.get("submit") == sr.NOT_SUBMITTED)
            raise _partial_error(record, exc, out, left) from None
        raise
    return out


def _partial_error(record: sr.SweepRecord, exc: BaseException, out: Submitted, left: int) -> ClusterError:
    arrays = ", ".join(a["job_id"] for a in out.arrays)
    base = exc.message if isinstance(exc, UserError) else str(exc)
    return ClusterError(
        f"{base.rstrip('.')}. {len(out.job_ids)} points were queued (arrays {arrays}) and {left} were not; "
        f"they are marked not-submitted in {record.file}",
        hint=f"`hpc-runner resume {record.path}` submits them later; "
        f"`hpc-runner cancel {record.path}` cancels the queued ones",
    )


def new_sweep_record(
    directory: Path,
    cfg: BundleConfig,
    entry: str | None,
    spec: SweepSpec,
    points: list[dict[str, Any]],
    profile: ClusterProfile,
    argv: Sequence[str] | None,
    check_note: str,
) -> sr.SweepRecord:
    """Return the record of a new sweep (not yet written)."""
    data = {
        "kind": sr.KIND,
        "version": 1,
        "created": now_iso(),
        "bundle": cfg.name,
        "bundle_dir": str(cfg.bundle_dir.resolve()) if cfg.bundle_dir else None,
        "entry": entry,
        "command": command_line(argv),
        "spec": spec.to_record(),
        "params": spec.ids,
        "checked": check_note,
        "cluster": profile.to_record(),
        "base": sr.BASE_DIR,
        "job_folder": sr.JOB_FOLDER,
        "state": "submitting",
        "error": None,
        "submissions": [],
        **sandbox_grant(cfg),  # what the sweep's --safe jobs may write and read: its tasks' arguments carry it
    }
    return sr.SweepRecord(directory, data, sr.new_points(points, len(points)))


def submit_sweep(
    cfg: BundleConfig,
    entry: str | None,
    spec: SweepSpec,
    profile: ClusterProfile,
    output_dir: str | Path | None = None,
    *,
    argv: Sequence[str] | None = None,
    hold: bool = False,
    array_parallelism: int | None = None,
    dry_run: bool = False,
    log: Log = print,
    preflight: bool = True,
    pack: int = 1,
    pack_parallel: int = 1,
    record_extra: dict[str, Any] | None = None,
    bounds: dict[str, int] | None = None,
    limits_reader: Callable[[Executor], Any] | None = None,
) -> Submitted:
    """Check every point, write the sweep dir and submit its points (``pack`` a task) as job arrays
    (``limits_reader``: the submit limits the governor counts with, e.g. less the slots a pipeline keeps)."""
    check_pack(pack, pack_parallel)
    check_entry(cfg, entry)
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    limits_reader = read_ahead(executor, limits_reader)  # the scheduler answers while the points are checked
    points = spec.points()
    note = check_points(cfg, points)
    if preflight:
        note += "; " + config_preflight.check_points(cfg, preflight_overrides(points), entry=entry or "run")
    warn_code_once_for(cfg)
    warn_no_gpu(cfg, executor)
    directory = Path(output_dir) if output_dir else default_sweep_dir(cfg.name)
    check_folder_path(directory, "the sweep dir")
    if dry_run:
        return _dry_run_sweep(cfg, directory, points, executor, hold, array_parallelism, note, pack, limits_reader,
                              entry=entry)
    created = fresh_dir(directory, "the sweep dir")
    record = new_sweep_record(directory, cfg, entry, spec, points, profile, argv, note)
    if pack > 1 or pack_parallel > 1:
        record.data["pack"] = {"points": pack, "parallel": pack_parallel}
    if bounds:
        record.data["bounds"] = dict(bounds)
    record.data.update(record_extra or {})
    try:
        base, _ = prepare_run(cfg, entry, directory / sr.BASE_DIR, argv)
        base.update_record(status="sweep-base", note="the shared config of the sweep; points/NNNN are its runs")
        # Held from the first sbatch until the waiting points are recorded: a task that ends at once
        # must find them, or no one would top them up (jobs/governor.py).
        with sr.created(record) as ledger:
            out = submit_points(ledger, range(len(points)), executor, entry=entry, reason="sweep", hold=hold,
                                array_parallelism=array_parallelism, log=log, preflight=preflight,
                                limits_reader=limits_reader)
            ledger.all_submitted()  # waiting points are a per-point state
    except BaseException as exc:
        if not _any_queued(directory):
            _remove_sweep(directory, created)  # nothing is queued: leave nothing behind
        if isinstance(exc, Exception) and not isinstance(exc, UserError):
            raise ClusterError(f"submitting the sweep failed: {exc}") from exc
        raise
    out.notes.append(note)
    if executor.runs_here:
        out.local_failures = executor.run_pending(log)
        out.ran_here = True
    return out


def _any_queued(directory: Path) -> bool:
    """Whether any point of the sweep in ``directory`` was handed to a job (the record may not exist)."""
    try:
        record = sr.SweepRecord.load(directory)
    except UserError:
        return False
    return any(p.get("job_id") for p in record.points)


def check_pack(points: int, parallel: int) -> None:
    """Raise UserError unless 1 <= parallel <= points (``--pack K --pack-parallel P``)."""
    if points < 1:
        raise UserError(f"--pack {points} is not a number of points per task", expected="--pack K with K >= 1")
    if not 1 <= parallel <= points:
        raise UserError(
            f"--pack-parallel {parallel} does not fit --pack {points}",
            expected="1 <= --pack-parallel <= --pack (a task cannot run more points at once than it has)",
        )


def _remove_sweep(directory: Path, created: bool) -> None:
    if created:
        shutil.rmtree(directory, ignore_errors=True)
    else:
        for child in directory.iterdir():
            shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)


def _dry_run_sweep(
    cfg: BundleConfig,
    directory: Path,
    points: list[dict[str, Any]],
    executor: Executor,
    hold: bool,
    array_parallelism: int | None,
    note: str,
    pack: int = 1,
    limits_reader: Callable[[Executor], Any] | None = None,
    entry: str | None = None,
) -> Submitted:
    out = Submitted(directory, dry_run=True, pack=(pack, 1))
    out.notes.append(f"{len(points)} points, all valid ({note})")
    request = JobRequest(job_name=job_name_for(cfg.name, "sweep"), folder=directory / sr.JOB_FOLDER,
                         chdir=os.getcwd(), hold=hold, array_parallelism=array_parallelism,
                         describe=f"hpc-runner: each task runs points of {Path(directory).resolve()} "
                         "(points/NNNN/config.yaml; sweep.yaml says which)")
    if executor.script(request, 1) is None:
        out.notes.append(f"profile '{executor.name}' runs the points here, one after another (no job script)")
    else:
        limits = limits_reader(executor) if limits_reader else executor.limits()
        out.limits = limits
        tasks = group_tasks(range(len(points)), pack)
        sizes, waiting_tasks = plan_arrays(len(tasks), limits.free_slots, limits.max_array_size)
        now = tasks[: len(tasks) - waiting_tasks]
        waiting = [i for t in tasks[len(now):] for i in t]
        out.notes.append(
            f"{len(sizes)} array(s) of at most {limits.max_array_size} tasks (MaxArraySize from "
            f"{limits.max_array_source}): {len(tasks)} task(s) of {pack} point(s), {len(now)} submitted now, "
            f"{len(waiting)} point(s) would wait for a free slot ({limits.describe()})"
        )
        out.waiting = waiting
        arrays, start = [], 0
        for size in sizes:  # the point indices each array would run
            arrays.append((size, now[start][0], now[start + size - 1][-1]))
            start += size
        for size in sorted(set(sizes)):
            covered = [f"{a}-{b}" for n, a, b in arrays if n == size]
            shown = [i for n, a, b in arrays if n == size for i in range(a, b + 1)]
            bundle = str(cfg.bundle_dir.resolve()) if cfg.bundle_dir else cfg.name
            described = points_description(Path(directory).resolve(), shown, entry, bundle)
            script = executor.script(dataclasses.replace(request, describe=described), size)
            out.scripts.append(f"# job script for the array(s) of points {', '.join(covered)}\n{script}")

        out.notes.extend(dry_run_notes(cfg, check_entry(cfg, entry), executor, Path(directory)))
    width = len(str(len(points) - 1))
    lines = [f"  {i:>{width}}  {describe_point(p)}" for i, p in enumerate(points[:50])]
    if len(points) > 50:
        lines.append(f"  ... and {len(points) - 50} more")
    out.notes.append("# points\n" + "\n".join(lines))
    resolved_for_display(cfg, directory / sr.BASE_DIR)  # a config that does not expand is refused here too
    out.notes.append(f"# resolved base config (each point is it plus its overrides): not shown; {CONFIG_HINT}")
    return out


def top_up(sweep_dir: str | Path, log: Log = print, **options: Any) -> int:
    """Submit the sweep's waiting points into the free submit slots (the governor's one top-up step, with the
    sweep's task); the step ``status``, ``status --watch`` and ``resume`` take, as the tasks do when they end."""
    options.setdefault("states_reader", states_of)  # failed points with a --retry rule go again first
    return governor_top_up(sweep_dir, run_sweep_task, log, **options)
