"""A job of a run submitted with ``--safe`` runs its bundle inside the same sandbox as ``run --safe``.

``submit --safe`` and ``sweep --safe`` jobs (and a tune's trials) run ``run_recorded`` on a prepared
run dir. The job's own process (outside) reads the record, plans the sandbox and starts
``python -m hpc_runner.engine.sandbox_job RUN_DIR ENTRY`` under bwrap; the run inside writes how it ended
to ``OUTCOME_FILE`` in its run dir, which the outside reads back into a :class:`RunOutcome`, so the job's
requeue, retry and result logic (which needs the scheduler, hence the network) stays outside.

Whether the job runs in the sandbox, and what it may write and read there, comes from its own submission (the
job call's arguments: ``job_record["sandbox"]``, the :class:`~hpc_runner.engine.sandbox.Grants` of the
``--writable``, ``--readable`` and ``--cache_dir`` given on the submitting command line), never from a file of the
run dir: a mark or a record found there grants nothing (a run dir marked ``--safe`` whose job was submitted
without grants is refused, never run outside). What the run inside may write: its run dir and the granted
folders. What it may read besides the minimal root (engine/sandbox.py): Python, hpc-runner, the bundle, the
job's working folder, hpc-runner's config file and the granted folders; a config naming a path it would not show
is refused at submission (``refuse_hidden_at_submission``) and before the sandbox starts, naming the id and the
``--readable`` to add.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hpc_runner
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.engine.container import (
    Mounts,
    bind_list,
    config_binds,
    container_argv,
    container_env,
    image_fingerprint,
    spec_from_record,
    starter_env,
)
from hpc_runner.engine.runner import RunOutcome, describe_failure, run_recorded
from hpc_runner.engine.sandbox import (
    Grants,
    Needs,
    bwrap_argv,
    checked_grant,
    find_bwrap,
    gpu_devices,
    hidden_folders,
    python_paths,
    refuse_hidden,
    refuse_ungranted,
    run_sandboxed,
    sandbox_env,
    visible_paths,
)
from hpc_runner.engine.stop import stop_requested
from hpc_runner.errors import UserError
from hpc_runner.process_start import start_process
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_json_record
from hpc_runner.records.rundir import RunDir
from hpc_runner.records.safe_mark import mark_path, read_mark, write_mark
from hpc_runner.registry.user_config import user_config_path
from hpc_runner.resources.threads import use_cpu_budget

OUTCOME_FILE = ".sandbox-outcome.json"  # written inside, read and removed outside


class InsideOutcome(Exception):
    """How the run inside the sandbox ended, as the outside reads it back (the fields ``finish_job`` uses)."""

    def __init__(self, described: str, reason: str = "", checkpoint: str | None = None, epoch: int = 0) -> None:
        super().__init__(described)
        self.described = described
        self.reason = reason
        self.checkpoint = checkpoint
        self.epoch = epoch


@dataclass(frozen=True)
class JobPlan:
    """What one sandboxed job needs: the folders it writes, the paths it reads and its bundle."""

    writable: tuple[str, ...]
    readable: tuple[str, ...]


def recorded_safe(run_dir: str | os.PathLike) -> bool:
    """Return whether the run in ``run_dir`` says it was made with ``--safe`` (its mark or its record). This only
    ever restricts: such a run is not run outside; it grants nothing (the grants are the job's arguments)."""
    return read_mark(run_dir) is not None or bool(RunDir(run_dir).record().get("safe", False))


def job_grants(job_record: Mapping[str, Any] | None, run_dir: str | os.PathLike) -> Grants | None:
    """Return the sandbox a job was submitted with (its arguments' ``sandbox``), None for a job submitted without
    --safe; refuse (exit 2) a run dir that says --safe when the job's submission did not (never run it outside)."""
    found = (job_record or {}).get("sandbox")
    if found is not None:
        return Grants.from_record(found)
    if recorded_safe(run_dir):
        raise UserError(f"the run dir {run_dir} says it was made with --safe, and this job was not submitted with "
                        "--safe (a job submitted by an older hpc-runner, or a run dir that was changed); it was not "
                        "run outside the sandbox", where=str(run_dir),
                        expected="the run submitted again with --safe (hpc-runner resume, or submit --safe)")
    return None


def job_plan(run_dir: str, grants: Grants, bundle_dir: str | None) -> JobPlan:
    """Decide what the job's run may write and read (a plain function: the job's grants in, paths out).

    Writable: the run dir and the granted folders. Readable: the bundle and the granted folders. Nothing of the
    config's values (the bundle's author does not decide what is visible) nor of the run dir's files.
    """
    run_dir = checked_grant(os.path.abspath(run_dir), "the run dir")
    writable = list(dict.fromkeys([run_dir, *grants.writable]))
    readable = list(dict.fromkeys([*([bundle_dir] if bundle_dir else []), *grants.readable]))
    return JobPlan(writable=tuple(writable), readable=tuple(readable))


def job_needs(run_dir: str, environ: Mapping[str, str], plan: JobPlan, cwd: str,
              protected: Sequence[str] = ()) -> Needs:
    """The sandbox of one job: ``plan``'s folders, Python and hpc-runner, the working folder, the user config."""
    user = user_config_path(environ)
    user_config = str(user.resolve()) if user.is_file() else None
    home = environ.get("HOME") or str(Path.home())
    root = os.path.dirname(os.path.dirname(os.path.abspath(hpc_runner.__file__)))
    readable = [*python_paths(), root, cwd, *plan.readable, *([user_config] if user_config else [])]
    return Needs(
        run_dir=os.path.abspath(run_dir), cwd=cwd, home=home, writable=plan.writable,
        readable=tuple(p for p in readable if os.path.exists(p)),
        hidden=tuple(h for h in hidden_folders(environ) if os.path.isdir(h)),
        protected=(str(mark_path(run_dir)), *protected),
        devices=tuple(gpu_devices()),
        env=sandbox_env(environ, home=home, user_config=user_config),
    )


def refuse_hidden_at_submission(cfg: Any, config: object = None, where: str = "the config") -> None:
    """Before a --safe submission queues anything (``submit``, ``sweep``, each sweep point): bad input (exit 2)
    naming the first config id whose existing absolute path the job's sandbox would not show, and the
    ``--readable`` to add, the check each job makes again when it starts (``run_recorded_in_sandbox``). The job's
    sandbox is planned from this command line: its grants, the bundle, this working folder (the job's), Python
    and hpc-runner. A path a ``$`` expression or a ``@`` reference builds at run time cannot be known here."""
    bundle = (str(cfg.bundle_dir),) if cfg.bundle_dir else ()
    shown = _submission_shown(tuple(cfg.sandbox_writable), (*bundle, *cfg.sandbox_readable), os.getcwd(),
                              os.environ.get("HOME") or "")
    refuse_ungranted(cfg.config if config is None else config, shown, ["/"], where)


@functools.lru_cache(maxsize=8)  # once for a sweep's thousands of points
def _submission_shown(writable: tuple[str, ...], readable: tuple[str, ...], cwd: str, _home: str) -> tuple[str, ...]:
    return tuple(visible_paths(job_needs(cwd, os.environ, JobPlan(writable=writable, readable=readable), cwd)))


def run_recorded_in_sandbox(run_dir: str | os.PathLike, entry: str | None, grants: Grants,
                            protect: Sequence[str] = ()) -> RunOutcome:
    """Run the recorded run in ``run_dir`` inside the sandbox; return how it ended (read back from inside).

    ``grants``: what the job's submission (or the command's own line) lets it write and read besides its run dir.
    ``protect``: names inside the run dir that the job's outside trusts later (the scheduler's job folder, whose
    pickles a requeue loads): bound read-only inside."""
    bwrap = find_bwrap()  # no sandbox: refused, as `run --safe` is (a UserError, the job fails saying why)
    cfg, _ = load_recorded_config(run_dir)  # reads config.yaml and run.yaml; runs nothing of the bundle
    rd = RunDir(run_dir)
    write_mark(rd.path, grants.writable)  # outside, before it starts: it stays safe (it grants nothing later)
    plan = job_plan(str(rd.path), grants, str(cfg.bundle_dir) if cfg.bundle_dir else None)
    for folder in plan.writable[1:]:  # folders the user named with --writable: made, as `run --safe` makes them
        os.makedirs(folder, exist_ok=True)
    needs = job_needs(str(rd.path), os.environ, plan, os.getcwd(),
                      tuple(str(rd.path / name) for name in protect if os.path.lexists(rd.path / name)))
    refuse_hidden(cfg.config, needs, str(rd.path / "config.yaml"))
    outcome_file = rd.path / OUTCOME_FILE
    outcome_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", "hpc_runner.engine.sandbox_job", str(rd.path.resolve()), entry or ""]
    print(f"hpc-runner: the run goes inside the --safe sandbox (writable: {', '.join(plan.writable)})", flush=True)
    rc = run_sandboxed(bwrap_argv(bwrap, needs, command), stop=stop_requested)
    return read_outcome(rd.path, rc)


def run_recorded_in_container(run_dir: str | os.PathLike, entry: str | None, record: Mapping[str, Any]) -> RunOutcome:
    """Run the recorded run in ``run_dir`` inside its container image (run.yaml's ``container:``); the scheduler
    (signals, requeue) stays with this process, on the host. Return how the run ended (read back from inside)."""
    spec = spec_from_record(record, str(Path(run_dir) / "run.yaml"))
    recorded = (record.get("container") or {}).get("fingerprint")
    now = image_fingerprint(spec.image)
    if recorded and recorded != now:  # a job cannot ask; it says so, once, in its log
        print(f"hpc-runner: warning: the container image {spec.image} changed since this run was made "
              f"({recorded} then, {now} now)", flush=True)
    cfg, _ = load_recorded_config(run_dir)
    rd = RunDir(run_dir)
    plan = job_plan(str(rd.path), Grants(), str(cfg.bundle_dir) if cfg.bundle_dir else None)
    binds = config_binds(cfg.config, [*plan.writable, *plan.readable, os.getcwd()], str(rd.path / "config.yaml"))
    mounts = Mounts(paths=tuple(bind_list(binds)), cwd=os.getcwd(),
                    env=container_env(os.environ))
    (rd.path / OUTCOME_FILE).unlink(missing_ok=True)
    command = [spec.python, "-m", "hpc_runner.engine.sandbox_job", str(rd.path.resolve()), entry or ""]
    print(f"hpc-runner: the run goes inside the container image {spec.image} ({spec.runtime})", flush=True)
    rc = run_sandboxed(container_argv(spec, mounts, command), stop=stop_requested,
                       env=starter_env(os.environ),
                       target=lambda pid: pid)  # the runtimes exec the command or relay signals to it themselves
    return read_outcome(rd.path, rc)


def read_outcome(run_dir: Path, rc: int) -> RunOutcome:
    """Turn the file the run inside wrote (and its exit code) into a RunOutcome; no file is a failure."""
    path = run_dir / OUTCOME_FILE
    try:
        found = read_json_record(path, "the sandboxed run's outcome") if path.is_file() else None
    except Exception as exc:  # damaged by the bundle's code: its run failed, whatever it says
        found = {"status": "failed", "described": f"the sandboxed run's outcome is unreadable ({exc})"}
    finally:
        path.unlink(missing_ok=True)
    if not found:
        return RunOutcome(Path(run_dir), "failed", InsideOutcome(
            f"run failed: the run inside the sandbox or image ended with exit code {rc} and said nothing (killed, out "
            f"of memory, or it did not start: see the job's error log); its log is in {run_dir}"))
    status = found.get("status")
    if status not in ("completed", "failed", "preempted", "pruned", "interrupted"):
        status = "failed"
    epoch = found.get("epoch")
    error = InsideOutcome(str(found.get("described") or f"run {status}")[:2000], str(found.get("reason") or ""),
                          found.get("checkpoint") if isinstance(found.get("checkpoint"), str) else None,
                          epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 0)
    return RunOutcome(Path(run_dir), status, None if status == "completed" else error)


def write_outcome(outcome: RunOutcome) -> None:
    """Inside: write how the run ended for the outside to read."""
    import json

    exc = outcome.error
    found: dict[str, Any] = {"status": outcome.status}
    if outcome.status == "failed":
        found["described"] = describe_failure(outcome)
    elif exc is not None:
        found.update(described=str(exc), reason=getattr(exc, "reason", ""),
                     checkpoint=getattr(exc, "checkpoint", None), epoch=getattr(exc, "epoch", 0))
    write_text_atomic(Path(outcome.run_dir) / OUTCOME_FILE, json.dumps(found))


def main(argv: list[str] | None = None) -> int:
    """Inside the sandbox: run the recorded run (the allow-list is checked again first), write its outcome."""
    run_dir, entry = (argv if argv is not None else sys.argv[1:])[:2]
    use_cpu_budget()
    try:
        outcome = run_recorded(run_dir, entry or None)
    except UserError as exc:  # refused before it ran (the allow-list, a changed bundle): the job says why
        outcome = RunOutcome(Path(run_dir), "failed", exc)
    write_outcome(outcome)
    return 0


if __name__ == "__main__":
    start_process()  # hpc_runner/process_start.py, as the hpc-runner entry point does
    sys.exit(main())
