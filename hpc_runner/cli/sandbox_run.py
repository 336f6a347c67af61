"""`run --safe` outside the sandbox: decide what the run needs, start it again inside bwrap, wait, relay.

This side loads nothing of the bundle's code and imports no torch: it finds the run dir (making it, so it
can be bound), lists the folders the run may write and read, and starts ``python -m hpc_runner run ...
--safe`` under bwrap (engine/sandbox.py). Everything else (the allow-list, pre-flight, the run) happens
inside. The exit code is the run's; a run dir this side made and the run left empty is removed again.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from hpc_runner.cli.common import cli_values, named_writable
from hpc_runner.errors import UserError
from hpc_runner.records.safe_mark import SAFE_MARK, read_mark, write_mark


def run_in_sandbox(args: argparse.Namespace) -> int:
    """Run ``args`` (a parsed `run --safe`) inside the sandbox; return its exit code (2 if none can be made)."""
    from hpc_runner.engine.distributed import launched_world
    from hpc_runner.engine.sandbox import (
        FRESH_ENV,
        Needs,
        bwrap_argv,
        find_bwrap,
        gpu_devices,
        hidden_folders,
        run_sandboxed,
        sandbox_env,
    )

    bwrap = find_bwrap()
    if launched_world()[1] > 1:
        raise UserError("--safe runs the bundle in a sandbox without network, and this is one process of a "
                        "distributed run, whose ranks talk over the network; nothing was run",
                        expected="--safe in a single-process run, or a distributed run without --safe")
    argv = list(getattr(args, "_argv", None) or sys.argv[1:])
    if args.resume:
        from hpc_runner.config.overrides import parse_cli_overrides
        from hpc_runner.config.recorded import load_recorded_config

        run_dir = os.path.abspath(args.resume)  # bad input (not a run dir) is refused here, before any sandbox
        cfg = load_recorded_config(args.resume, parse_cli_overrides(args.override_tokens))[0]
        extra = list(cfg.sandbox_writable)  # what its mark let it write when it started
    else:
        extra = []
        cfg = _load_without_allow_list(args)
        output_dir = args.output_dir
        if output_dir is None:
            from hpc_runner.records.rundir import default_run_dir

            output_dir = str(default_run_dir(cfg.name))
            argv += ["--output_dir", os.path.abspath(output_dir)]
        from hpc_runner.records.rundir import check_folder_path

        check_folder_path(output_dir)
        run_dir = os.path.abspath(output_dir)
    writable = list(dict.fromkeys([run_dir, *named_writable(args), *extra]))
    made = [path for folder in writable for path in _make_folders(folder)]
    had_mark = read_mark(run_dir) is not None
    mark = str(write_mark(run_dir, writable[1:]))  # outside, before it starts: bound read-only inside
    environ = dict(os.environ)
    user_config = _user_config(environ)
    home = environ.get("HOME") or str(Path.home())
    needs = Needs(
        run_dir=run_dir, cwd=os.getcwd(), home=home, writable=tuple(writable),
        readable=tuple(named_readable(args, cfg, user_config)),
        hidden=tuple(h for h in hidden_folders(environ) if os.path.isdir(h)),
        protected=(mark,),
        devices=tuple(gpu_devices()),
        env={**sandbox_env(environ, home=home, user_config=user_config),
             **({FRESH_ENV: "1"} if made and run_dir in made else {})},
    )
    command = [sys.executable, "-m", "hpc_runner", *argv]
    sandboxed = bwrap_argv(bwrap, needs, command)
    if getattr(args, "debug", False):
        import shlex

        print(f"hpc-runner: sandbox: {shlex.join(sandboxed)}", file=sys.stderr, flush=True)
    try:
        rc = run_sandboxed(sandboxed)
        if rc == 2 and not had_mark and os.path.exists(mark):  # refused on bad input: the run dir as it was
            os.remove(mark)
        if rc == 3 and not args.no_requeue:  # stopped and checkpointed inside, where SLURM cannot be reached
            _requeue(run_dir)
        return rc
    finally:
        if run_dir in made and os.listdir(run_dir) == [SAFE_MARK]:  # nothing ran: the mark goes with the folder
            os.remove(mark)
        for path in reversed(made):  # only the folders this side made, and only when the run left them empty
            try:
                os.rmdir(path)
            except OSError:
                continue


def _requeue(run_dir: str) -> None:
    """Ask SLURM to requeue this job (the run inside checkpointed and stopped); say what happened."""
    from hpc_runner.scheduler.job_env import own_job_id, requeue_job

    if not own_job_id():
        return
    job = requeue_job()
    then = (f"requeued SLURM job {job}; it continues from the checkpoint" if job else
            f"SLURM is ending job {own_job_id()} (cancelled or not requeueable); continue with: "
            f"hpc-runner run --resume {run_dir}")
    print(f"hpc-runner: {then}", file=sys.stderr, flush=True)


def _load_without_allow_list(args: argparse.Namespace) -> Any:
    """Load the config as the run will (bad input is refused here, at once), without the allow-list's imports."""
    from hpc_runner.cli.common import load_config_from_args

    plain = argparse.Namespace(**vars(args))
    plain.safe, plain.writable = False, None  # (--writable is this side's to bind)
    return load_config_from_args(plain)


def named_readable(args: argparse.Namespace, cfg: Any, user_config: str | None) -> list[str]:
    """What the run reads that a tmpfs may hide: Python and its packages, the bundle, the current folder,
    the files named on the command line (and the existing paths among the override values)."""
    import hpc_runner
    from hpc_runner.engine.sandbox import python_paths

    paths = [*python_paths(), os.path.dirname(os.path.dirname(os.path.abspath(hpc_runner.__file__))), os.getcwd()]
    if cfg is not None and getattr(cfg, "bundle_dir", None):
        paths.append(str(cfg.bundle_dir))
    for name in ("meta_file", "args_file", "logging_file", "tracking"):
        value = getattr(args, name, None)
        if isinstance(value, str):
            paths.append(value)
    for value in getattr(args, "config_file", None) or []:
        paths += [p.strip(" '\"[]") for p in str(value).split(",")]
    paths += [v for _, v in cli_values(args) if isinstance(v, str) and v.startswith(("/", ".", "~"))]
    if user_config:
        paths.append(user_config)
    return [os.path.abspath(os.path.expanduser(p)) for p in paths if p and os.path.exists(os.path.expanduser(p))]


def _user_config(environ: dict[str, str]) -> str | None:
    """hpc-runner's own config file (its safe_targets are needed inside), when there is one."""
    from hpc_runner.registry.user_config import user_config_path

    path = user_config_path(environ)
    return str(path.resolve()) if path.is_file() else None


def _make_folders(folder: str) -> list[str]:
    """Make ``folder`` and its missing parents; return the ones made, outermost first."""
    missing = []
    path = Path(folder)
    while not path.exists() and path != path.parent:
        missing.append(str(path))
        path = path.parent
    os.makedirs(folder, exist_ok=True)
    return list(reversed(missing))
