"""Submit a run or a sweep: check everything first, write the records, then one sbatch per array.

Order of work for a sweep: expand and check every point (nothing written), create the sweep dir with
its base config and sweep.yaml (state ``submitting``), submit the points as arrays of at most
MaxArraySize tasks through submitit's ``map_array``, then record the job id of every point. If the
first sbatch fails nothing is queued and the sweep dir is removed again; if a later one fails, the
points already queued keep their job ids, the others are marked ``not-submitted`` (``resume`` sends
them), and the error says so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.errors import ClusterError, UserError
from hpc_runner.records.rundir import RunDir, check_folder_path, now_iso, timestamp_name
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.sweep import ledger as sr
from hpc_runner.sweep.spec import SweepSpec

Log = Callable[[str], None]


@dataclass
class ArrayPlan:
    """The point indices one sbatch array will run."""

    indices: list[int]
    script: str = ""


@dataclass
class Submitted:
    """What a submission did: job ids per point index, arrays, sbatch calls, and the texts shown."""

    directory: Path
    job_ids: dict[int, str] = field(default_factory=dict)
    arrays: list[dict[str, Any]] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    local_failures: int = 0
    logs: dict[int, dict[str, str]] = field(default_factory=dict)
    waiting: list[int] = field(default_factory=list)  # points that wait for a free submit slot
    limits: Any = None  # the SubmitLimits the governor read (slurm/limits.py)
    pack: tuple[int, int] = (1, 1)  # points per task, points at once per task


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


def _job_name(cfg_name: str, kind: str) -> str:
    return f"hpcr-{kind}-{cfg_name}"[:64]


def _max_array(profile: ClusterProfile) -> tuple[int, str]:
    from hpc_runner.scheduler.cluster_info import max_array_size

    return max_array_size(profile.get("max_array_size"))


def _resolved_for_display(cfg: BundleConfig, run_dir: Path) -> dict:
    """The config as prepare_run would write it (output_dir and bundle_root set), without writing it."""
    from hpc_runner.config.ids import has_id
    from hpc_runner.config.overrides import Override
    from hpc_runner.engine.runner import BUNDLE_ROOT_ID, OUTPUT_DIR_ID

    extra = []
    if (
        cfg.bundle_dir is not None
        and has_id(cfg.config, BUNDLE_ROOT_ID)
        and not any(o.id == BUNDLE_ROOT_ID for o in cfg.overrides)
    ):
        extra.append(Override(BUNDLE_ROOT_ID, str(cfg.bundle_dir.resolve()), "hpc-runner", "--bundle"))
    extra.append(
        Override(
            OUTPUT_DIR_ID, str(run_dir.resolve()), "hpc-runner", "run dir", add=not has_id(cfg.config, OUTPUT_DIR_ID)
        )
    )
    return cfg.with_overrides(extra, check=False).expanded()


def _fresh_dir(path: Path, what: str) -> bool:
    """Refuse a non-empty folder; return True when this call has to create it."""
    if path.exists():
        if not path.is_dir() or any(path.iterdir()):
            raise ClusterError(
                f"{what} {path} already exists and is not empty",
                expected="a new --output_dir (or `hpc-runner resume DIR` to continue a sweep)",
            )
        return False
    return True


# ---------------------------------------------------------------- single run


def submit_run(
    cfg: BundleConfig,
    entry: str | None,
    profile: ClusterProfile,
    output_dir: str | Path | None = None,
    *,
    argv: Sequence[str] | None = None,
    hold: bool = False,
    dry_run: bool = False,
    log: Log = print,
    preflight: bool = True,
) -> Submitted:
    """Prepare a run dir for ``cfg`` and submit one job running it (or run it here with a local profile)."""
    from hpc_runner.engine.runner import check_entry, prepare_run
    from hpc_runner.records.rundir import default_run_dir
    from hpc_runner.scheduler.slurm_executor import make_executor, sbatch_script, slurm_parameters, submit_one
    from hpc_runner.sweep.job import run_submitted

    check_entry(cfg, entry)
    if preflight:  # nothing is written or queued for a config that cannot start (config/preflight.py)
        from hpc_runner.config.preflight import check_config

        check_config(cfg)
    path = Path(output_dir) if output_dir else default_run_dir(cfg.name)
    check_folder_path(path)  # a dry run too: it promises the real submission would go through
    # jobs run where the user submitted (relative paths in the config), even when resubmitted from elsewhere
    params = slurm_parameters(profile, job_name=_job_name(cfg.name, "run"), hold=hold, chdir=os.getcwd())
    folder = path / sr.RUN_JOB_FOLDER
    if dry_run:
        from hpc_runner.config.display import to_plain
        from hpc_runner.records.rundir import dump_yaml

        out = Submitted(path, dry_run=True)
        if profile.executor == "local":
            out.notes.append(f"profile '{profile.name}' runs the job here, in the foreground (no sbatch script)")
        else:
            out.scripts.append(sbatch_script(profile, folder, params))
        out.notes.append(
            "# resolved config (config.yaml of the run dir)\n" + dump_yaml(to_plain(_resolved_for_display(cfg, path)))
        )
        return out
    if preflight and profile.executor != "local":
        from hpc_runner.scheduler.resource_check import check_resources

        check_resources(profile, folder, params, what="the job")
    created = _fresh_dir(path, "the run dir")
    job_record = {"cluster": profile.to_record(), "submitted": now_iso()}
    run_dir, _ = prepare_run(cfg, entry, path, argv)
    if profile.executor == "local":
        run_dir.update_record(job={**job_record, "id": "local"})
        log(f"hpc-runner: running {run_dir.path} here (profile '{profile.name}': no scheduler)")
        out = Submitted(run_dir.path, {0: "local"})
        try:
            run_submitted(str(run_dir.path), entry, {**job_record, "id": "local"})
        except Exception as exc:  # the run's own record says what failed
            out.local_failures = 1
            log(f"hpc-runner: the run failed: {exc}")
        return out
    try:
        executor = make_executor(profile, folder, params)
        job = submit_one(executor, run_submitted, str(run_dir.path.resolve()), entry, job_record)
    except BaseException as exc:
        _undo_run_dir(run_dir, created, exc)
        raise
    logs = {"stdout": str(job.paths.stdout), "stderr": str(job.paths.stderr)}
    run_dir.update_record(status="submitted", job={**job_record, "id": job.job_id, **logs})
    out = Submitted(run_dir.path, {0: job.job_id}, [{"job_id": job.job_id, "points": [0]}])
    out.logs[0] = logs
    return out


def _undo_run_dir(run_dir: RunDir, created: bool, exc: BaseException) -> None:
    if created:
        shutil.rmtree(run_dir.path, ignore_errors=True)
    else:
        run_dir.update_record(status=sr.NOT_SUBMITTED, error={"type": type(exc).__name__, "message": str(exc)[:500]})


# ---------------------------------------------------------------- sweeps


def submit_points(
    record: sr.SweepRecord,
    indices: Sequence[int],
    profile: ClusterProfile,
    *,
    entry: str | None,
    reason: str,
    hold: bool = False,
    array_parallelism: int | None = None,
    before_chunk: Callable[[list[int]], Callable[[], None]] | None = None,
    log: Log = print,
    preflight: bool = True,
) -> Submitted:
    """Submit ``indices`` of a recorded sweep as tasks of K points, never more tasks than there are free
    submit slots (the rest wait, slurm/governor.py), in arrays of at most MaxArraySize; record job ids.

    ``before_chunk(indices)`` runs before each sbatch and returns an undo for when that sbatch fails.
    """
    from hpc_runner.sweep.governor import pack_of, send_points

    out = Submitted(record.path, pack=pack_of(record))
    if profile.executor == "local":
        job_record = {"cluster": profile.name, "sweep": str(record.path.resolve())}
        submission: dict[str, Any] = {"at": now_iso(), "reason": reason, "profile": profile.to_record(), "arrays": []}
        record.submissions().append(submission)
        if before_chunk:
            before_chunk(list(indices))
        return _run_points_here(record, indices, entry, job_record, submission, out, log)
    try:
        send_points(record, indices, profile, entry=entry, reason=reason, out=out, hold=hold,
                    array_parallelism=array_parallelism, before_chunk=before_chunk, log=log, preflight=preflight)
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


def _run_points_here(
    record: sr.SweepRecord,
    indices: Sequence[int],
    entry: str | None,
    job_record: dict[str, Any],
    submission: dict[str, Any],
    out: Submitted,
    log: Log,
) -> Submitted:
    from hpc_runner.sweep.job import run_sweep_point

    for i in indices:
        p = record.points[i]
        p.update(job_id="local", submit=sr.SUBMITTED)
        p.setdefault("jobs", []).append("local")
    record.save()
    for n, i in enumerate(indices):
        p = record.points[i]
        log(f"hpc-runner: point {i} ({n + 1}/{len(indices)}) runs here in {record.point_dir(p)}")
        try:
            run_sweep_point(
                str(record.path.resolve()),
                i,
                str(record.point_dir(p).resolve()),
                record.effective_overrides(p),
                entry,
                {**job_record, "id": "local"},
            )
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # the point's run.yaml and error.txt say what failed; go on with the next
            out.local_failures += 1
            log(f"hpc-runner: point {i} failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        out.job_ids[i] = "local"
    submission["arrays"].append({"job_id": "local", "size": len(indices)})
    return out


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
    from hpc_runner.records.rundir import command_line

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
        "job_folder": sr.SWEEP_JOB_FOLDER,
        "state": "submitting",
        "error": None,
        "submissions": [],
    }
    recs = [
        {"index": i, "dir": sr.point_dir_name(i, len(points)), "params": p, "job_id": None, "submit": "submitting"}
        for i, p in enumerate(points)
    ]
    return sr.SweepRecord(directory, data, recs)


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
) -> Submitted:
    """Check every point, write the sweep dir and submit its points (``pack`` a task) as job arrays."""
    from hpc_runner.engine.runner import check_entry, prepare_run
    from hpc_runner.sweep.check import check_points

    check_pack(pack, pack_parallel)
    check_entry(cfg, entry)
    points = spec.points()
    note = check_points(cfg, points)
    if preflight:
        from hpc_runner.config.preflight import check_points as preflight_points
        from hpc_runner.sweep.check import make_override

        note += "; " + preflight_points(cfg, [[make_override(k, v) for k, v in p.items()] for p in points])
    directory = Path(output_dir) if output_dir else default_sweep_dir(cfg.name)
    check_folder_path(directory, "the sweep dir")
    if dry_run:
        return _dry_run_sweep(cfg, directory, points, profile, hold, array_parallelism, note, pack)
    created = _fresh_dir(directory, "the sweep dir")
    record = new_sweep_record(directory, cfg, entry, spec, points, profile, argv, note)
    if pack > 1 or pack_parallel > 1:
        record.data["pack"] = {"points": pack, "parallel": pack_parallel}
    record.data.update(record_extra or {})
    try:
        base, _ = prepare_run(cfg, entry, directory / sr.BASE_DIR, argv)
        base.update_record(status="sweep-base", note="the shared config of the sweep; points/NNNN are its runs")
        record.save()
        # Held from the first sbatch until the waiting points are recorded: a task that ends at once
        # must find them, or no one would top them up (slurm/governor.py).
        with sr.locked(directory) as record:
            try:
                out = submit_points(
                    record,
                    range(len(points)),
                    profile,
                    entry=entry,
                    reason="sweep",
                    hold=hold,
                    array_parallelism=array_parallelism,
                    log=log,
                    preflight=preflight,
                )
            except BaseException:
                if any(p.get("job_id") for p in record.points):
                    record.save()
                raise
            record.data["state"] = "submitted"  # waiting points are a per-point state
    except BaseException as exc:
        if not any(p.get("job_id") for p in record.points):
            _remove_sweep(directory, created)  # nothing is queued: leave nothing behind
        if isinstance(exc, Exception) and not isinstance(exc, UserError):
            raise ClusterError(f"submitting the sweep failed: {exc}") from exc
        raise
    out.notes.append(note)
    return out


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
    profile: ClusterProfile,
    hold: bool,
    array_parallelism: int | None,
    note: str,
    pack: int = 1,
) -> Submitted:
    from hpc_runner.config.display import to_plain
    from hpc_runner.records.rundir import dump_yaml
    from hpc_runner.scheduler.slurm_executor import sbatch_script, slurm_parameters
    from hpc_runner.sweep.governor import group_tasks, plan_arrays
    from hpc_runner.sweep.spec import describe_point

    out = Submitted(directory, dry_run=True, pack=(pack, 1))
    out.notes.append(f"{len(points)} points, all valid ({note})")
    if profile.executor == "local":
        out.notes.append(f"profile '{profile.name}' runs the points here, one after another (no sbatch script)")
    else:
        from hpc_runner.scheduler.limits import read_limits

        limits = read_limits(profile.settings)
        out.limits = limits
        tasks = group_tasks(range(len(points)), pack)
        sizes, waiting_tasks = plan_arrays(len(tasks), limits.free_slots, limits.max_array_size)
        params = slurm_parameters(
            profile,
            job_name=_job_name(cfg.name, "sweep"),
            hold=hold,
            array_parallelism=array_parallelism,
            chdir=os.getcwd(),
        )
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
            script = sbatch_script(
                profile, directory / sr.SWEEP_JOB_FOLDER, params, map_count=size if size > 1 else None
            )
            out.scripts.append(f"# sbatch script for the array(s) of points {', '.join(covered)}\n{script}")
    width = len(str(len(points) - 1))
    lines = [f"  {i:>{width}}  {describe_point(p)}" for i, p in enumerate(points[:50])]
    if len(points) > 50:
        lines.append(f"  ... and {len(points) - 50} more")
    out.notes.append("# points\n" + "\n".join(lines))
    base = _resolved_for_display(cfg, directory / sr.BASE_DIR)
    out.notes.append("# resolved base config (each point is this plus its overrides)\n" + dump_yaml(to_plain(base)))
    return out
