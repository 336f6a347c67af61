"""`--container IMAGE`: the options, the checks before anything runs or is queued, and `run` started inside the image.

``run --container`` loads the config here (nothing of it runs, torch is not imported), makes the run dir, checks
the image (it starts, and torch, MONAI and hpc-runner import in it: engine/container.py ``check_image``) and the
binds (every path of the config is under one), records the image in run.yaml, then runs ``python -m hpc_runner
run ...`` inside it and waits; a stop signal is passed on, and a SLURM requeue is asked from here, on the host.
``submit``/``sweep --container`` make the same checks, then record the image so each job runs inside it
(engine/sandbox_job.py ``run_recorded_in_container``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import hpc_runner
from hpc_runner.cli.common import load_config_from_args
from hpc_runner.cli.inner_run import inner_run, make_folders, remove_made, requeue_after_stop
from hpc_runner.cli.sandbox_run import named_readable
from hpc_runner.engine.container import (
    RUNTIMES,
    ContainerSpec,
    Mounts,
    check_image,
    check_mount_points,
    config_binds,
    container_argv,
    container_env,
    container_spec,
    image_cache_dir,
    spec_from_record,
    starter_env,
)
from hpc_runner.engine.sandbox import FRESH_ENV, python_paths, run_sandboxed
from hpc_runner.errors import UserError
from hpc_runner.records.rundir import RunDir


def add_container_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--container IMAGE`` and ``--container-runtime``."""
    g = parser.add_argument_group("container (docs/containers.md)")
    g.add_argument("--container", metavar="IMAGE",
                   help="run the bundle inside this image (a SIF file, a Charliecloud folder or SquashFS file, or "
                   "docker://NAME:TAG); the scheduler stays outside. Default: the profile's container: block")
    g.add_argument("--container-runtime", "--container_runtime", dest="container_runtime", choices=RUNTIMES,
                   help="the runtime that starts IMAGE (default: from the image: a folder is Charliecloud's, a .sif "
                   "Apptainer's or Singularity's)")


def container_for(args: argparse.Namespace, profile: Any = None) -> ContainerSpec | None:
    """Return the container the command's runs go in (options over the profile's block), or None."""
    block = profile.get("container") if profile is not None else None
    where = profile.where if profile is not None else "--container"
    spec = container_spec(getattr(args, "container", None), getattr(args, "container_runtime", None), block, where)
    if spec is not None and getattr(args, "safe", False):
        raise UserError("--safe and a container together are not supported yet: --safe runs the bundle in a "
                        "bubblewrap sandbox on the host's Python, a container in the image's; nothing was run or "
                        "queued",
                        expected="--safe without --container (and no container: block in the profile), or --container "
                        "on a bundle you trust")
    return spec


def runtime_line(record: dict[str, Any] | None) -> str | None:
    """The line a dry run shows for a job in a container: the runtime command each job starts (its binds of the
    run dir and data are added in the job), and where the image is checked; None without a container."""
    if not record:
        return None
    import shlex

    spec = spec_from_record({"container": record}, "the container")
    argv = container_argv(spec, Mounts(paths=(), cwd=os.getcwd()), [spec.python, "-m", "hpc_runner", "..."])
    where = (" (on the compute node: container.on is compute; the image is checked there)" if spec.on == "compute"
             else "")
    return f"# container: each job starts {shlex.join(argv)}{where}"


def refuse_container(profile: Any, what: str) -> None:
    """Bad input when a command that does not run in a container yet gets a profile with a ``container:`` block
    (its jobs would run on the host, where the image's software may not be)."""
    block = profile.get("container") if profile is not None else None
    if isinstance(block, dict) and block.get("image"):
        raise UserError(f"{what} does not run in a container yet, and profile {profile.name} has a container: block "
                        f"({block.get('image')}); nothing was run or queued", where=profile.where,
                        expected=f"a profile without container: for {what} (--scheduler-option container=null), or "
                        "submit/sweep, which run in the image")


def checked_record(spec: ContainerSpec, cfg: Any, always: list[str]) -> dict[str, Any]:
    """Check the image and the config's binds (bad input before anything is queued); return run.yaml's record."""
    binds = config_binds(cfg.config, always, where=str(cfg.config_files[0]) if cfg.config_files else "the config")
    container_argv(spec, Mounts(paths=tuple(binds), cwd=os.getcwd()), ["true"])  # every bind sayable, before a byte
    check_mount_points(spec, binds)
    info = check_image(spec, image_cache_dir(os.environ), os.environ, os.getcwd())
    return {**info, **spec.to_record()}


def run_in_container(args: argparse.Namespace, spec: ContainerSpec) -> int:
    """Run ``args`` (a parsed `run --container`) inside the image; return its exit code."""
    run = inner_run(args, _load_outside_the_image)
    argv, run_dir, cfg = run.argv, run.run_dir, run.cfg
    # the run dir, the working folder, the bundle and the files named on the command line (not this Python's own)
    always = [run_dir, *(p for p in named_readable(args, cfg, None) if not _python_path(p))]
    record = checked_record(spec, cfg, always)  # before the run dir is made: a bad image leaves nothing
    made = make_folders(run_dir)
    binds = config_binds(cfg.config, always)
    try:
        RunDir(run_dir).update_record(container=record)  # prepare_run inside keeps it
        env = {**container_env(os.environ), **({FRESH_ENV: "1"} if made else {})}
        command = container_argv(spec, Mounts(paths=tuple(binds), cwd=os.getcwd(), env=env),
                                 [spec.python, "-m", "hpc_runner", *argv])
        if getattr(args, "debug", False):
            import shlex

            print(f"hpc-runner: container: {shlex.join(command)}", file=sys.stderr, flush=True)
        rc = run_sandboxed(command, env=starter_env(os.environ), target=lambda pid: pid)
        if rc == 3 and not args.no_requeue:  # stopped and checkpointed inside, where no SLURM command is
            rc = requeue_after_stop(run_dir) or rc  # an exit status that requeues (Grid Engine: 99)
        return rc
    finally:
        if made and sorted(os.listdir(run_dir)) in ([], ["run.yaml"], [".run.lock", "run.yaml"]):  # nothing ran
            for name in os.listdir(run_dir):
                os.remove(os.path.join(run_dir, name))
            remove_made(made)


def _load_outside_the_image(args: argparse.Namespace) -> Any:
    """Load the config as the run inside will (bad input is refused here), without the container options."""
    plain = argparse.Namespace(**vars(args))
    plain.container = None
    return load_config_from_args(plain)


def _python_path(path: str) -> bool:
    """Whether ``path`` is this Python's or hpc-runner's own (the image has its own: not bound)."""
    return path in python_paths() or path == os.path.dirname(os.path.dirname(os.path.abspath(hpc_runner.__file__)))
