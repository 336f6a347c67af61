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

import hpc_runner
from hpc_runner.cli.common import cli_values, load_config_from_args, named_readable_grants, named_writable
from hpc_runner.cli.inner_run import inner_run, make_folders, remove_made, requeue_after_stop
from hpc_runner.engine.distributed import launched_world
from hpc_runner.engine.sandbox import (
    FRESH_ENV,
    Needs,
    bwrap_argv,
    checked_grant,
    find_bwrap,
    gpu_devices,
    hidden_folders,
    python_paths,
    refuse_hidden,
    run_sandboxed,
    sandbox_env,
)
from hpc_runner.errors import UserError
from hpc_runner.records.safe_mark import SAFE_MARK, read_mark, write_mark
from hpc_runner.registry.user_config import user_config_path


def run_in_sandbox(args: argparse.Namespace) -> int:
    """Run ``args`` (a parsed `run --safe`) inside the sandbox; return its exit code (2 if none can be made)."""
    bwrap = find_bwrap()
    if launched_world()[1] > 1:
        raise UserError("--safe runs the bundle in a sandbox without network, and this is one process of a "
                        "distributed run, whose ranks talk over the network; nothing was run",
                        expected="--safe in a single-process run, or a distributed run without --safe")
    granted = named_writable(args)  # from this command line only (a mark in a run dir grants nothing)
    readable_grants = named_readable_grants(args)
    run = inner_run(args, _load_without_allow_list)
    argv, run_dir, cfg = run.argv, run.run_dir, run.cfg
    checked_grant(run_dir, "--resume" if run.resumed else "--output_dir")
    writable = list(dict.fromkeys([run_dir, *granted]))
    made = [path for folder in writable for path in make_folders(folder)]
    had_mark = read_mark(run_dir) is not None
    mark = str(write_mark(run_dir, writable[1:]))  # outside, before it starts: bound read-only inside
    environ = dict(os.environ)
    user_config = _user_config(environ)
    home = environ.get("HOME") or str(Path.home())
    needs = Needs(
        run_dir=run_dir, cwd=os.getcwd(), home=home, writable=tuple(writable),
        readable=tuple([*named_readable(args, cfg, user_config), *readable_grants]),
        hidden=tuple(h for h in hidden_folders(environ) if os.path.isdir(h)),
        protected=(mark,),
        devices=tuple(gpu_devices()),
        env={**sandbox_env(environ, home=home, user_config=user_config),
             **({FRESH_ENV: "1"} if made and run_dir in made else {})},
    )
    command = [sys.executable, "-m", "hpc_runner", *argv]
    sandboxed = bwrap_argv(bwrap, needs, command)
    try:  # a path the bundle names that the sandbox hides and nothing granted: said now, not as a missing file
        refuse_hidden(cfg.config if cfg is not None else {}, needs, "the config")
    except UserError:
        if not had_mark:
            os.remove(mark)
        remove_made(made)
        raise
    if getattr(args, "debug", False):
        import shlex

        print(f"hpc-runner: sandbox: {shlex.join(sandboxed)}", file=sys.stderr, flush=True)
    try:
        rc = run_sandboxed(sandboxed)
        if rc == 2 and not had_mark and os.path.exists(mark):  # refused on bad input: the run dir as it was
            os.remove(mark)
        if rc == 3 and not args.no_requeue:  # stopped and checkpointed inside, where SLURM cannot be reached
            rc = requeue_after_stop(run_dir) or rc  # an exit status that requeues (Grid Engine: 99)
        return rc
    finally:
        if run_dir in made and os.listdir(run_dir) == [SAFE_MARK]:  # nothing ran: the mark goes with the folder
            os.remove(mark)
        remove_made(made)


def _load_without_allow_list(args: argparse.Namespace) -> Any:
    """Load the config as the run will (bad input is refused here, at once), without the allow-list's imports."""
    plain = argparse.Namespace(**vars(args))
    plain.safe, plain.writable, plain.readable = False, None, None  # (--writable/--readable: this side's to bind)
    return load_config_from_args(plain)


def named_readable(args: argparse.Namespace, cfg: Any, user_config: str | None) -> list[str]:
    """What the run reads that a tmpfs may hide: Python and its packages, the bundle, the current folder,
    the files named on the command line (and the existing paths among the override values)."""
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
    path = user_config_path(environ)
    return str(path.resolve()) if path.is_file() else None


def cache_in_sandbox(args: argparse.Namespace) -> int:
    """Run ``args`` (a parsed `cache --safe`) inside the sandbox: the bundle's initialize and transforms run there,
    writing only the --cache_dir and --writable folders it names; exit 2 without bwrap (no weaker mode)."""
    bwrap = find_bwrap()  # before anything else: no sandbox, no bundle code
    writable = named_writable(args)
    if not writable:
        raise UserError("cache --safe writes the cache inside the sandbox, which may write only the folders the "
                        "command line names, and none is named; nothing was run",
                        expected="--cache_dir DIR (or --writable DIR holding the bundle's cache_dir)")
    readable_grants = named_readable_grants(args)
    cfg = _load_without_allow_list(args)
    made = [path for folder in writable for path in make_folders(folder)]
    environ = dict(os.environ)
    user_config = _user_config(environ)
    home = environ.get("HOME") or str(Path.home())
    needs = Needs(
        run_dir=writable[0], cwd=os.getcwd(), home=home, writable=tuple(writable),
        readable=tuple([*named_readable(args, cfg, user_config), *readable_grants]),
        hidden=tuple(h for h in hidden_folders(environ) if os.path.isdir(h)),
        devices=tuple(gpu_devices()),
        env=sandbox_env(environ, home=home, user_config=user_config),
    )
    try:
        refuse_hidden(cfg.config, needs, "the config")
        argv = list(getattr(args, "_argv", None) or sys.argv[1:])
        return run_sandboxed(bwrap_argv(bwrap, needs, [sys.executable, "-m", "hpc_runner", *argv]))
    finally:
        remove_made(made)
