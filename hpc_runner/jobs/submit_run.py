"""Submit one run: check it, write its run dir, queue one job (the local executor runs it here).

A sweep's submission (sweep/submission.py) shares the steps every submission takes: the job's name, the
resolved config a dry run shows, a fresh folder, the --safe grant, the warnings said once before queueing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config import preflight as config_preflight
from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.config.ids import has_id
from hpc_runner.config.monai_bridge import warn_code_once
from hpc_runner.config.networks import network_ids, runs_on_cpu
from hpc_runner.config.overrides import Override
from hpc_runner.engine.runner import BUNDLE_ROOT_ID, OUTPUT_DIR_ID, check_entry, prepare_run
from hpc_runner.engine.sandbox import Grants
from hpc_runner.errors import ClusterError
from hpc_runner.jobs import ledger as sr
from hpc_runner.jobs.earlier_runs import time_note
from hpc_runner.jobs.governor import outside_the_job
from hpc_runner.jobs.job import run_submitted
from hpc_runner.jobs.submitted import Submitted
from hpc_runner.records.rundir import RunDir, check_folder_path, default_run_dir, now_iso
from hpc_runner.scheduler.executor import Executor, JobRequest
from hpc_runner.scheduler.profiles import ClusterProfile
from hpc_runner.scheduler.select import executor_for

Log = Callable[[str], None]


CONFIG_HINT = "`hpc-runner config` with the same bundle, config files and overrides prints it"


def job_name_for(cfg_name: str, kind: str) -> str:
    """The job's name: ``hpcr-<kind>-<bundle>``, at most 64 characters."""
    return f"hpcr-{kind}-{cfg_name}"[:64]


def resolved_for_display(cfg: BundleConfig, run_dir: Path) -> dict:
    """The config as prepare_run would write it (output_dir and bundle_root set), without writing it."""
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


def fresh_dir(path: Path, what: str) -> bool:
    """Refuse a non-empty folder; return True when this call has to create it."""
    if path.exists():
        if not path.is_dir() or any(path.iterdir()):
            raise ClusterError(
                f"{what} {path} already exists and is not empty",
                expected="a new --output_dir (or `hpc-runner resume DIR` to continue a sweep)",
            )
        return False
    return True


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
    dependency: str | None = None,
) -> Submitted:
    """Prepare a run dir for ``cfg`` and submit one job running it (the local executor runs it here);
    ``dependency``: SLURM's --dependency of the job (a pipeline stage waits on its inputs)."""
    run_id = check_entry(cfg, entry)
    executor = executor_for(profile)
    executor.check_time()
    executor.check_site()  # what `cluster check` found that this job depends on, said before queueing
    if preflight:  # nothing is written or queued for a config that cannot start (config/preflight.py)

        config_preflight.check_config(cfg, entry=entry or "run")
    warn_code_once_for(cfg)
    warn_no_gpu(cfg, executor)
    path = Path(output_dir) if output_dir else default_run_dir(cfg.name)
    check_folder_path(path)  # a dry run too: it promises the real submission would go through
    # jobs run where the user submitted (relative paths in the config), even when resubmitted from elsewhere
    request = JobRequest(job_name=job_name_for(cfg.name, "run"), folder=path / sr.JOB_FOLDER, chdir=os.getcwd(),
                         describe=f"hpc-runner: runs entry {entry or 'run'} of {Path(path).resolve()}/config.yaml "
                         f"(what `hpc-runner run --resume {Path(path).resolve()}` runs)",
                         hold=hold, dependency=dependency)
    if dry_run:
        out = Submitted(path, dry_run=True)
        script = executor.script(request, 1)
        if script is None:
            out.notes.append(f"profile '{profile.name}' runs the job here, in the foreground (no job script)")
        else:
            out.scripts.append(script)
            out.notes.extend(dry_run_notes(cfg, run_id, executor, path))
        resolved_for_display(cfg, path)  # a config that does not resolve is refused by a dry run too
        # the config is not dumped below the script (hundreds of lines): one command prints it
        out.notes.append(f"# resolved config: not shown; {CONFIG_HINT}; the job reads it from "
                         f"{Path(path).resolve()}/config.yaml")
        return out
    if preflight:
        executor.check_resources(request, 1, "the job")
    created = fresh_dir(path, "the run dir")
    job_record = {"cluster": profile.to_record(), "submitted": now_iso(), **sandbox_grant(cfg)}
    run_dir, _ = prepare_run(cfg, entry, path, argv)
    try:
        with outside_the_job():
            job = executor.submit(run_submitted, [[str(run_dir.path.resolve())], [entry], [job_record]], request)[0]
    except BaseException as exc:
        _undo_run_dir(run_dir, created, exc)
        raise
    run_dir.update_record(status="submitted", job={**job_record, "id": job.job_id, **job.logs})
    out = Submitted(run_dir.path, {0: job.job_id}, [{"job_id": job.job_id, "points": [0]}])
    if job.logs:
        out.logs[0] = job.logs
    if executor.runs_here:
        log(f"hpc-runner: running {run_dir.path} here (profile '{profile.name}': no scheduler)")
        out.local_failures = executor.run_pending(log)
        out.ran_here = True
    return out


def dry_run_notes(cfg: BundleConfig, run_id: str, executor: Executor, folder: Path | None = None) -> list[str]:
    """The dry run's notes on what the jobs would meet before they run: the scheduler's (an account it requires
    that they do not name) and a time limit far longer than earlier runs of the bundle's ``run_id`` took, or
    not compared with any; earlier runs are looked for next to ``folder`` (the run dir or sweep dir submitted)
    and under runs/<bundle>."""

    notes = list(executor.submission_notes())
    note = time_note(executor.profile, cfg.name, run_id, near=folder)
    return [*notes, note] if note else notes


def _undo_run_dir(run_dir: RunDir, created: bool, exc: BaseException) -> None:
    if created:
        shutil.rmtree(run_dir.path, ignore_errors=True)
    else:
        run_dir.update_record(status=sr.NOT_SUBMITTED, error={"type": type(exc).__name__, "message": str(exc)[:500]})


def sandbox_grant(cfg: BundleConfig) -> dict[str, Any]:
    """``{"sandbox": grants}`` for a --safe submission (the job call's arguments decide the sandbox), else {}."""
    if not cfg.safe:
        return {}

    return {"sandbox": Grants(tuple(cfg.sandbox_writable), tuple(cfg.sandbox_readable)).to_record()}


def warn_no_gpu(cfg: BundleConfig, executor: Executor) -> str | None:
    """Warn (and return the text) when the bundle builds one of MONAI's networks but its jobs ask for no GPU: it
    would train on the CPU, hours instead of minutes. Silent for a config whose device is the CPU."""
    import warnings

    hint = executor.no_gpu_hint()
    if hint is None or runs_on_cpu(cfg.config):
        return None
    nets = network_ids(cfg.config)
    if not nets:
        return None
    where, target = nets[0]
    text = (f"{where} builds {target}, but profile '{executor.name}' asks for no GPU: the job would run it on "
            f"the CPU. Ask for one with {hint}, or set device: cpu to mean it")
    warnings.warn(text, UserWarning, stacklevel=2)
    return text


def warn_code_once_for(cfg: BundleConfig) -> None:
    """MONAI's "this config runs code" warning, once for the whole submission (never in each array task)."""
    warn_code_once(cfg, trusted=bool(getattr(cfg, "trusted", False)))
