"""Run a bundle entry in a run directory: record everything, run initialize/ENTRY/finalize, keep results."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import USUAL_ENTRIES, BundleConfig, apply_overrides
from hpc_runner.config.display import to_plain
from hpc_runner.config.ids import BUNDLE_ROOT_ID, OUTPUT_DIR_ID, has_id
from hpc_runner.config.monai_bridge import (
    apply_logging_file,
    build_parser,
    bundle_on_sys_path,
    failing_id,
    run_expr,
    silence_monai_code_warning,
)
from hpc_runner.config.overrides import Override, suggest_ids
from hpc_runner.config.recorded import check_recorded_bundle, load_recorded_config
from hpc_runner.config.sandbox_marks import inside_sandbox
from hpc_runner.data import reads
from hpc_runner.data.cache_plan import log_cache_summary
from hpc_runner.data.staging import (
    RunData,
    clean_after_run,
    in_use,
    prepare_run_data,
    record_io,
    record_loads,
    settings_from_env,
    staged_config,
)
from hpc_runner.engine.assigned_gpus import check_assigned_gpus
from hpc_runner.engine.cuda_arch import check_cuda_arch
from hpc_runner.engine.distributed import (
    init_distributed,
    launched_world,
    owns_process_group,
    rank_records,
    settle_distributed_threads,
    shutdown_distributed,
    start_together,
)
from hpc_runner.engine.launch_env import check_launch_env
from hpc_runner.engine.stop import Preempted, Pruned, install_stop_handlers
from hpc_runner.errors import ConfigError, UserError
from hpc_runner.heap import settle_after_imports
from hpc_runner.quick_exit import flush_open_files
from hpc_runner.records import environment
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.logtee import tee_to_log
from hpc_runner.records.read import parse_yaml_record, read_record_text
from hpc_runner.records.rundir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    ERROR_FILE,
    LOG_FILE,
    OVERRIDES_FILE,
    RunDir,
    command_line,
    default_run_dir,
    dump_yaml,
    now_iso,
)
from hpc_runner.records.safe_mark import write_mark
from hpc_runner.registry.trust import manifest_record
from hpc_runner.resources.threads import use_cpu_budget
from hpc_runner.scheduler.job_env import job_id, job_record, local_rank, restart_count
from hpc_runner.tracking.session import finish_tracking, patch_monai_workflow, record_for_run, start_tracking

INIT_ID, RUN_ID, FINAL_ID = "initialize", "run", "finalize"
log = logging.getLogger("hpc_runner.runner")


@dataclass
class RunOutcome:
    """How a run ended."""

    run_dir: Path
    status: str  # "completed", "failed", "preempted", "pruned" (tune stopped it early) or "interrupted"
    error: BaseException | None = None
    failing_id: str | None = None


def _preemption_in(exc: BaseException) -> BaseException | None:
    """Return the Preempted inside ``exc``: MONAI wraps what an expression raises in a RuntimeError."""
    return _found_in(exc, Preempted)


def _pruning_in(exc: BaseException) -> BaseException | None:
    """Return the Pruned inside ``exc`` (a validation listener stopped the run early)."""
    return _found_in(exc, Pruned)


def _found_in(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def _looks_like_entry(key: object, value: Any) -> bool:
    """An id that does something when run: a usual entry name, a ``$`` expression, or a list of them."""
    if str(key) in (INIT_ID, FINAL_ID) or str(key).startswith("_"):
        return False
    if str(key) in USUAL_ENTRIES:
        return True
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(v, str) and v.startswith("$") and not v.startswith("$import") for v in items)


def check_entry(cfg: BundleConfig, entry: str | None) -> str:
    """Return the id to run (``run`` by default); raise ConfigError naming close ids if it is missing."""
    run_id = entry or RUN_ID
    if not has_id(cfg.config, run_id):
        entries = [str(k) for k, v in cfg.config.items() if _looks_like_entry(k, v)]
        close = suggest_ids(run_id, {k: None for k in cfg.config if not str(k).startswith("_")})
        raise ConfigError(
            f"entry '{run_id}' is not an id of the config",
            where=", ".join(str(f) for f in cfg.config_files),
            expected=f"an id to run; this config has: {', '.join(entries) or '(none)'}",
            hint=f"Did you mean: {', '.join(close)}?" if close else None,
        )
    return run_id


def _set_runner_value(cfg: BundleConfig, id_path: str, value: Any, source: str) -> None:
    ov = Override(id_path, value, "hpc-runner", source, add=not has_id(cfg.config, id_path))
    apply_overrides(cfg, [ov], os.environ)


def prepare_run(
    cfg: BundleConfig,
    entry: str | None,
    output_dir: str | Path | None = None,
    argv: Sequence[str] | None = None,
) -> tuple[RunDir, dict]:
    """Create the run dir and write config.yaml, overrides.yaml and run.yaml; return it and the config.

    Several ranks meet first (:func:`hpc_runner.engine.distributed.init_distributed`): a rank whose
    peers never come (a bad environment) gives up after HPCR_RENDEZVOUS_TIMEOUT with nothing written.
    A filesystem that refuses the writes (read-only, full, no permission) is bad input: the folder this
    call made is removed again and the UserError names it. Rank 0 refusing once the group exists (another
    config in the run dir, a write) tells the other ranks at once (distributed.start_together), as they
    wait to vote in :func:`execute_run`."""
    target = Path(output_dir) if output_dir is not None else None
    made = target is not None and not target.exists()
    try:
        try:
            return _prepare_run(cfg, entry, output_dir, argv)
        except OSError as exc:
            if made and target is not None:
                import shutil

                shutil.rmtree(target, ignore_errors=True)
            where = target or exc.filename
            raise UserError(f"cannot write the run dir {where} ({exc.strerror or exc})",
                            expected="--output_dir on a filesystem with free space that this user may write") from None
    except Exception as exc:
        start_together(exc)  # a no-op unless a group started here awaits this rank's vote
        raise


def _prepare_run(
    cfg: BundleConfig,
    entry: str | None,
    output_dir: str | Path | None = None,
    argv: Sequence[str] | None = None,
) -> tuple[RunDir, dict]:
    run_id = check_entry(cfg, entry)
    rank, world = check_launch_env()  # a variable that is not an integer: one paragraph, exit 2
    if output_dir is None and world > 1:
        # every rank must pick the same folder, so it cannot come from each rank's clock
        job = job_id() or os.environ.get("TORCHELASTIC_RUN_ID") or "dist"
        output_dir = default_run_dir(cfg.name).parent / f"job-{job}"  # runs/<safe name>/job-<id>
    run_dir = RunDir(Path(output_dir) if output_dir else default_run_dir(cfg.name))
    if cfg.recorded and cfg.logging_file is None:  # resumed runs and jobs log as the recorded run did
        recorded_logging = (run_dir.record().get("bundle") or {}).get("logging_file")
        cfg.logging_file = Path(recorded_logging) if recorded_logging else None
    if (
        not cfg.recorded  # a recorded config already holds the bundle_root it ran with
        and cfg.bundle_dir is not None
        and has_id(cfg.config, BUNDLE_ROOT_ID)
        and not any(o.id == BUNDLE_ROOT_ID for o in cfg.overrides)
    ):
        _set_runner_value(cfg, BUNDLE_ROOT_ID, str(cfg.bundle_dir.resolve()), "--bundle")
    _set_runner_value(cfg, OUTPUT_DIR_ID, str(run_dir.path.resolve()), "run dir")
    expanded = cfg.expanded()
    determinism = _deterministic_env(expanded)  # before anything (the rendezvous' set_device) starts CUDA
    if world > 1:
        init_distributed(bundle_config=expanded)  # every rank is here before rank 0 writes anything
    if rank != 0:
        return run_dir, expanded  # only rank 0 writes the record
    run_dir.create()
    config_text = dump_yaml(to_plain(expanded))
    existing = run_dir.file(CONFIG_FILE)
    recorded_text = read_record_text(existing, "run config", error=ConfigError)
    if (
        recorded_text is not None
        and recorded_text != config_text
        and not (cfg.recorded and _moved_copy_of(existing, recorded_text, config_text))
    ):
        raise ConfigError(
            "the run dir already holds a run of a different config",
            where=str(existing),
            expected="a new --output_dir, or --resume DIR to continue the recorded run unchanged",
        )
    write_text_atomic(existing, config_text)
    entries = [
        {"id": o.spelling(), "value": to_plain(o.value), "source": o.source, "origin": o.origin,
         "replaced": o.replaced}
        for o in cfg.overrides
    ]
    if cfg.recorded:  # resuming: keep the overrides the run was made with, add only new ones
        kept = run_dir.read_yaml(OVERRIDES_FILE) or []
        entries = kept + [e for e in entries if e not in kept and e["source"] != "hpc-runner"]
    run_dir.write_yaml(OVERRIDES_FILE, entries)

    record_for_run(run_dir.path, cfg)  # --tracking: kept in the run dir for jobs, requeues and resumes
    run_dir.change_record(lambda previous: {
            **previous,  # keep what others recorded (the job id and profile, the sweep point, rerun_of)
            "entry": run_id,
            **_init_final_record(cfg),
            "status": "prepared",
            "bundle": {
                "name": cfg.name,
                "version": cfg.meta.get("version"),
                "dir": str(cfg.code_dir.resolve()) if cfg.code_dir else None,
                "logging_file": str(cfg.logging_file.resolve()) if cfg.logging_file else None,
                "config_files": [str(p.resolve()) for p in cfg.config_files],
                "meta_file": str(cfg.meta_file.resolve()) if cfg.meta_file else None,
                "manifest": manifest_record(cfg.bundle_dir),
            },
            "command": command_line(argv),
            "env": {
                "HPCR": {k: v for k, v in sorted(os.environ.items()) if k.startswith("HPCR")},
                "refs": [{"id": u.id_path, "variable": u.variable, "value": u.value} for u in cfg.env_uses],
            },
            "trusted": cfg.trusted,
            "safe": cfg.safe,
            **({"container": cfg.container} if cfg.container else {}),
            "attempts": previous.get("attempts", 0),
            "created": previous.get("created", now_iso()),
            **({"deterministic": determinism} if determinism else {}),
    })

    if cfg.safe and not inside_sandbox():  # outside: the mark its sandbox binds read-only (records/safe_mark.py)

        write_mark(run_dir.path, cfg.sandbox_writable)
    return run_dir, expanded


def wants_determinism(config: Any) -> bool:
    """Return True when a config asks for deterministic kernels (an id ``deterministic`` that is true, at any depth)."""
    if isinstance(config, dict):
        return any((k == "deterministic" and v is True) or wants_determinism(v) for k, v in config.items())
    if isinstance(config, list):
        return any(wants_determinism(v) for v in config)
    return False


def _deterministic_env(expanded: dict) -> dict[str, Any] | None:
    """Set CUBLAS_WORKSPACE_CONFIG for a deterministic run (unless set) and say so; return run.yaml's record."""
    if not wants_determinism(expanded):
        return None
    from hpc_runner.engine.seeding import CUBLAS_VARIABLE, apply_cublas_workspace  # deferred: imports torch

    line = apply_cublas_workspace(True)
    if line:
        print(f"hpc-runner: {line}", flush=True)
    return {CUBLAS_VARIABLE: os.environ.get(CUBLAS_VARIABLE), "note": line}


def _init_final_record(cfg: BundleConfig) -> dict[str, str]:
    """``init_id``/``final_id`` for run.yaml when they are not MONAI's defaults (jobs and resumes run the same ids)."""
    out = {}
    if cfg.init_id != INIT_ID:
        out["init_id"] = cfg.init_id
    if cfg.final_id != FINAL_ID:
        out["final_id"] = cfg.final_id
    return out


def _moved_copy_of(existing: Path, recorded_text: str, config_text: str) -> bool:
    """Whether ``existing`` config.yaml (``recorded_text``) is ``config_text`` but for ``output_dir``: the run
    dir was moved."""
    recorded = parse_yaml_record(recorded_text, existing, "run config") or {}
    now = parse_yaml_record(config_text, existing, "run config") or {}
    if not isinstance(recorded, dict) or not isinstance(now, dict):
        return False
    recorded[OUTPUT_DIR_ID] = now.get(OUTPUT_DIR_ID)
    return recorded == now


def _seed_before_build(config: dict) -> None:
    """Seed before any object is built, so weights are initialised the same way each time."""
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        from hpc_runner.engine.seeding import seed_everything  # deferred: imports torch

        seed_everything(seed, bool(config.get("deterministic", False)))


def execute_run(cfg: BundleConfig, run_dir: RunDir, expanded: dict, entry: str | None) -> RunOutcome:
    """Run initialize, the entry and (always) finalize inside ``run_dir``; record how it ended."""
    run_id = entry or RUN_ID
    rank, world = launched_world()
    try:
        _check_devices(cfg, run_dir, rank)  # then every rank votes: one that refused stops all of them now
        expanded, data = _run_data(run_dir, expanded, rank)  # --stage: the node-local copy, via an id override
        try:
            with in_use(list(data.overrides.values())):  # the node's cleaning leaves the copies this run reads
                if rank != 0:
                    return _execute_worker(cfg, run_dir, expanded, run_id)
                # started by prepare_run, or here (a caller that prepared the run itself); not when the bundle makes
                # its own
                started_group = init_distributed(bundle_config=expanded) or owns_process_group()
                try:
                    return _execute_main(cfg, run_dir, expanded, run_id)
                finally:
                    if started_group:
                        shutdown_distributed()
        finally:
            _end_run_data(run_dir, data)
    finally:
        if world > 1:
            settle_distributed_threads()


def _run_data(run_dir: RunDir, expanded: dict, rank: int) -> tuple[dict, RunData]:
    """Stage the run's data on this node when HPCR_STAGE asks (data/staging.py); return the config that reads the
    copy and where the data is read from. Rank 0 records that in run.yaml ``data:``; each node's first task adds
    what it read from shared storage to data_io.json. A stage folder that is a link, or a source that changed
    during the copy, is bad input: run.yaml says so, exit 2, and nothing half-copied is read."""
    try:
        data = prepare_run_data(expanded, settings_from_env(), warn=lambda line: print(line, file=sys.stderr))
    except UserError as exc:
        if rank == 0 and run_dir.file("run.yaml").exists():
            run_dir.update_record(status="failed", ended=now_iso(), error=failure_record(exc, None))
        raise
    if local_rank() == 0:
        record_io(run_dir.path, data, attempt=restart_count())
    if rank == 0:
        run_dir.update_record(data=data.record())
    settings = settings_from_env()
    reads.configure(reads.policy_for_run(settings, data.root, data.overrides.values()))  # bound and count loads
    return staged_config(expanded, data), data


def _end_run_data(run_dir: RunDir, data: RunData) -> None:
    """When the run ends: add its measured loads to data_io.json; with ``clean: end``, remove the copies it read
    (a run on its own; a sweep's last task on the node does that for its points: staging.sweep_hold)."""
    loads = reads.snapshot()
    reads.configure(None)
    try:
        record_loads(run_dir.path, data, loads, attempt=restart_count())
    except (OSError, UserError) as exc:  # a record that cannot be written must not turn a finished run into a failure
        print(f"hpc-runner: could not add the measured loads to data_io.json: {exc}", file=sys.stderr)
    for name in clean_after_run(data):
        print(f"hpc-runner: removed the staged copy {name} (stage clean: end)", file=sys.stderr)


def _check_devices(cfg: BundleConfig, run_dir: RunDir, rank: int) -> None:
    """Refuse a run that cannot use its GPUs: given some but sees none, or a torch without kernels for them.

    Then every rank of a group votes (:func:`~hpc_runner.engine.distributed.start_together`): a refusal here,
    or rank 0's in :func:`prepare_run`, stops every rank at once with exit code 2, not after the backend's
    timeout. Rank 0 records the refusal (its own or another rank's) in run.yaml (``status: failed``,
    ``user_error``) before it is raised.
    """
    try:
        try:
            check_assigned_gpus()
            check_cuda_arch()
        except Exception as exc:
            start_together(exc)
            raise
        start_together()
    except UserError as exc:
        if rank == 0 and run_dir.file("run.yaml").exists():
            run_dir.update_record(status="failed", ended=now_iso(), error=failure_record(exc, None, cfg))
        raise


def _run_ids(cfg: BundleConfig, expanded: dict, run_id: str) -> None:
    silence_monai_code_warning()  # said once where the run was submitted (or started), not in every task
    apply_logging_file(cfg.logging_file)  # inside the log tee, so a handler on stdout also reaches log.txt
    with bundle_on_sys_path(cfg.code_dir):
        parser = build_parser(cfg, expanded)

        patch_monai_workflow(parser)  # --tracking on an ignite bundle: MONAI's MLFlowHandler, into our run
        _seed_before_build(expanded)
        parser.parse(reset=True)
        settle_after_imports()  # torch and MONAI are imported, nothing built yet: the loop's collections skip them
        try:
            run_expr(parser, cfg.init_id)  # MONAI's --init_id / --final_id (default initialize / finalize)
            run_expr(parser, run_id)
        finally:
            run_expr(parser, cfg.final_id)


def _execute_worker(cfg: BundleConfig, run_dir: RunDir, expanded: dict, run_id: str) -> RunOutcome:
    """Ranks other than 0 run the same ids but write no record (rank 0 owns the run dir)."""
    use_cpu_budget()  # before torch does parallel work: this rank's threads and variables
    started_group = init_distributed(bundle_config=expanded) or owns_process_group()
    try:
        _run_ids(cfg, expanded, run_id)
        return RunOutcome(run_dir.path, "completed")
    except Exception as exc:
        if (stop := _preemption_in(exc)) is not None:
            return RunOutcome(run_dir.path, "preempted", stop)
        if (pruned := _pruning_in(exc)) is not None:
            return RunOutcome(run_dir.path, "pruned", pruned)
        traceback.print_exception(exc)
        return RunOutcome(run_dir.path, "failed", exc, failing_id(exc))
    finally:
        if started_group:
            shutdown_distributed()


def _execute_main(cfg: BundleConfig, run_dir: RunDir, expanded: dict, run_id: str) -> RunOutcome:
    rec = run_dir.record()
    ranks = rank_records()  # where every rank of a multi-process run is: node, host, address, device
    run_dir.update_record(
        **({"ranks": ranks} if ranks else {}),
        cpus=use_cpu_budget(),  # before torch does parallel work: threads, OMP/MKL variables, data workers
        status="running",
        started=now_iso(),
        ended=None,
        error=None,
        attempts=int(rec.get("attempts", 0)) + 1,
        host=environment.host_info(),
        scheduler=job_record(),  # scheduler/job_env.py: its name, the job's ids, restarts, nodes, variables
        versions=environment.package_versions(),
        git=environment.git_state(cfg.bundle_dir or (cfg.config_files[0].parent if cfg.config_files else None)),
    )
    outcome = RunOutcome(run_dir.path, "completed")
    with tee_to_log(run_dir.file(LOG_FILE)) as logger:
        logger.info("run %s of %s in %s", run_id, cfg.name, run_dir.path)
        # one line: what each dataset caches and where, plus warnings about orders that waste the cache

        log_cache_summary(cfg, expanded, logger)

        tracked = start_tracking(cfg, run_dir.path)  # None unless --tracking; never waits for the server
        try:
            _run_ids(cfg, expanded, run_id)
        except KeyboardInterrupt as exc:
            outcome = RunOutcome(run_dir.path, "interrupted", exc)
        except Exception as exc:
            if (stop := _preemption_in(exc)) is not None:
                outcome = RunOutcome(run_dir.path, "preempted", stop)
                logger.warning("preempted (%s); checkpoint %s", stop.reason, stop.checkpoint)
            elif (pruned := _pruning_in(exc)) is not None:  # not a failure: no error.txt
                outcome = RunOutcome(run_dir.path, "pruned", pruned)
                logger.info("%s", pruned)
            else:
                outcome = RunOutcome(run_dir.path, "failed", exc, failing_id(exc))
                text = "".join(traceback.format_exception(exc))
                _record_quietly(lambda: write_text_atomic(run_dir.file(ERROR_FILE), text))
                logger.error("failed%s: %s", f" at id '{outcome.failing_id}'" if outcome.failing_id else "", exc)
        if outcome.error is not None:
            # while the bundle's frames still hold its files: once dropped, a file in a reference cycle
            # may be collected raw-file-first before exit and its buffered bytes lost (quick_exit.py)

            flush_open_files()
        finish_tracking(tracked, outcome.status)  # artefacts, status; at most a bounded wait for the server
    fields: dict[str, Any] = {"status": outcome.status, "ended": now_iso()}
    if outcome.status == "preempted":
        fields["checkpoint"] = outcome.error.checkpoint  # type: ignore[union-attr]
    elif outcome.status == "pruned":
        p = outcome.error
        fields["pruned"] = {"epoch": p.epoch + 1, "metric": p.metric_name, "value": p.value}  # type: ignore[union-attr]
    elif outcome.error is not None:
        fields["error"] = failure_record(outcome.error, outcome.failing_id, cfg)
    if outcome.status == "failed":  # the failure may be the filesystem's own (full, read-only): still report it
        _record_quietly(lambda: run_dir.update_record(**fields))
    else:
        run_dir.update_record(**fields)
    return outcome


def _record_quietly(write: Any) -> None:
    """Write a failed run's record; a filesystem that refuses it must not hide the failure being recorded."""
    try:
        write()
    except OSError as exc:
        print(f"hpc-runner: could not record the failure in the run dir ({exc.strerror or exc})", file=sys.stderr)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from, outermost first (MONAI wraps what ``$`` raises)."""
    out: list[BaseException] = []
    while exc is not None and len(out) < 20 and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _library_dirs() -> tuple[str, ...]:
    import sysconfig

    paths = sysconfig.get_paths()
    return tuple(
        {os.path.realpath(paths[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    )


def error_location(exc: BaseException) -> str | None:
    """Return "file:line" of the innermost frame of the root cause outside the standard library and
    site-packages (the bundle's or hpc-runner's own code), else of the innermost frame."""
    libs = _library_dirs()
    for e in reversed(_chain(exc)):  # the root cause first: its frames are where it really happened
        frames = traceback.extract_tb(e.__traceback__)
        if not frames:
            continue
        for f in reversed(frames):
            name = f.filename
            if name.startswith("<") or "site-packages" in name or "dist-packages" in name:
                continue
            if os.path.realpath(name).startswith(libs):
                continue
            return f"{name}:{f.lineno}"
        return f"{frames[-1].filename}:{frames[-1].lineno}"
    return None


def failure_record(exc: BaseException, failing: str | None, cfg: BundleConfig | None = None) -> dict[str, Any]:
    """Return run.yaml's ``error``: type and message (of the root cause too), the config id, where it happened.

    ``user_error`` marks a hpc-runner UserError anywhere in the chain (a bad config or a missing
    input: ``status`` calls that BAD_INPUT); ``config_file`` is where the failing id (or the
    UserError) was set, when that is known.
    """
    chain = _chain(exc)
    root = chain[-1]
    user = next((e for e in chain if isinstance(e, UserError)), None)
    config_file = None
    if user is not None and user.where:
        config_file = user.where
    elif failing and cfg is not None:
        config_file = cfg.locate(failing)
    record: dict[str, Any] = {"type": type(exc).__name__, "message": _first_line(exc), "id": failing}
    if root is not exc:
        record["root_type"] = f"{type(root).__module__}.{type(root).__qualname__}".removeprefix("builtins.")
        record["root_message"] = _first_line(root)[:500]
    record["where"] = error_location(exc)
    if config_file:
        record["config_file"] = config_file
    if user is not None:
        record["user_error"] = True
    return record


def run_bundle(
    cfg: BundleConfig,
    entry: str | None = None,
    output_dir: str | Path | None = None,
    argv: Sequence[str] | None = None,
) -> RunOutcome:
    """Prepare a run dir for ``cfg`` and run ``entry`` in it (the Python API behind ``hpc-runner run``)."""
    run_dir, expanded = prepare_run(cfg, entry, output_dir, argv)
    return execute_run(cfg, run_dir, expanded, entry)


def bad_input_in(outcome: RunOutcome) -> Any:
    """Return the UserError a failed run failed on before it trained anything (bad input), else None."""
    import errno

    if outcome.status != "failed" or outcome.error is None or any((outcome.run_dir / CHECKPOINT_DIR).glob("*")):
        return None
    chain = _chain(outcome.error)
    user = next((e for e in chain if isinstance(e, UserError)), None)
    if user is not None:
        return user
    refused = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)  # the filesystem, not the run, said no
    full = next((e for e in chain if isinstance(e, OSError) and e.errno in refused), None)
    if full is not None:
        if full.errno == errno.EROFS and inside_sandbox():  # run --safe: only the folders the user named are writable
            return UserError(f"the run's filesystem refused a write ({full.strerror}): inside --safe's sandbox only "
                             "the run dir, --cache_dir and the --writable folders may be written",
                             where=full.filename or str(outcome.run_dir),
                             expected="--writable DIR for a folder the run must write (a dataset it generates), "
                             "or data made before the run")
        return UserError(f"the run's filesystem refused a write ({full.strerror})",
                         where=full.filename or str(outcome.run_dir),
                         expected="--output_dir (and the data folders) on a filesystem with free space that this "
                         "user may write")
    return None


def describe_failure(outcome: RunOutcome) -> str:
    """Return the one-paragraph message for a failed run, with the cause chain and where the log is."""
    exc = outcome.error
    chain = []
    while exc is not None and len(chain) < 4:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        chain.append(f"{type(exc).__name__}: {text[:300].rstrip('.')}" if text else type(exc).__name__)
        exc = exc.__cause__ or exc.__context__
    where = f" while resolving id '{outcome.failing_id}'" if outcome.failing_id else ""
    return (
        f"run failed{where}: {' <- '.join(chain)}. The traceback is in {outcome.run_dir / ERROR_FILE}; "
        f"checkpoints already written in {outcome.run_dir} are kept."
    )


def run_recorded(run_dir: str | Path, entry: str | None = None, argv: Sequence[str] | None = None) -> RunOutcome:
    """Run (or continue) the run recorded in ``run_dir`` with its own config.yaml; used by jobs and --resume.

    SIGUSR2/SIGTERM are turned into a checkpoint-and-stop for the duration.
    """
    cfg, record = load_recorded_config(run_dir)
    # the job imports the bundle's scripts/ now, not when it was submitted: check the files (and
    # --safe, if the run was submitted with it) again
    check_recorded_bundle(cfg, record)
    entry = entry or record.get("entry")
    rd, expanded = prepare_run(cfg, entry, run_dir, argv)
    restore = install_stop_handlers()
    try:
        return execute_run(cfg, rd, expanded, entry)
    finally:
        restore()
