"""What a run record needs to know about where it ran: host, package versions, git (the scheduler's job:
scheduler/job_env.py ``job_record``)."""

from __future__ import annotations

import getpass
import os
import platform
import socket
import subprocess
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from hpc_runner import __version__
from hpc_runner.errors import UserError
from hpc_runner.records.command_output import run_command

DISTRIBUTION = "hpc-bundle-runner"  # hpc-runner's distribution name (PyPI's "hpc-runner" is another project)
RECORDED_PACKAGES = ("torch", "monai", "numpy", "hpc-runner", "pytorch-ignite", "submitit", "nibabel")

ON, OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
SWITCH = ON + OFF
# the HPCR_* settings that take one of a fixed set of values (unset or empty: the default), and those values;
# each is read where it is used (its owner), and every command checks them all before it starts
# (cli/__init__.py): a misspelt value (HPCR_LOCK=flock) is refused, naming the setting, never ignored
FIXED_SETTINGS: dict[str, tuple[str, ...]] = {
    "HPCR_LOCK": ("posix", "lease"),  # records/file_lock.py
    "HPCR_TENSORBOARD": SWITCH,  # tracking/tensorboard.py
    "HPCR_TRANSFORM_TIMING": SWITCH,  # data/transform_timing.py
    "HPCR_FAKE_GPUS": SWITCH,  # engine/assigned_gpus.py
    "HPCR_GPU_TRANSFORMS": SWITCH,  # engine/trainer_args.py (`hpc-runner run --gpu_transforms`)
}


def setting(name: str, environ: Mapping[str, str] | None = None) -> str:
    """Return a fixed-set ``HPCR_*`` setting, lower-cased ("" when unset or empty); UserError naming it and the
    values it takes when it holds another value."""
    environ = os.environ if environ is None else environ
    value = environ.get(name, "").strip().lower()
    accepted = FIXED_SETTINGS[name]
    if value and value not in accepted:
        raise UserError(f"{name}={environ.get(name, '')[:80]!r} in the environment is not a value it takes",
                        expected=f"{name} unset, or one of: {', '.join(accepted)}")
    return value


def switch(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """Return an on/off ``HPCR_*`` setting (``default`` when unset); UserError for a value that is neither."""
    value = setting(name, environ)
    return default if not value else value in ON


def check_settings(environ: Mapping[str, str] | None = None) -> None:
    """UserError for the first fixed-set ``HPCR_*`` setting that holds a value it does not take."""
    for name in FIXED_SETTINGS:
        setting(name, environ)


def package_versions() -> dict[str, str]:
    """Return the versions of Python and the packages that decide a run's numbers (no imports)."""
    versions = {"python": platform.python_version()}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = metadata.version(DISTRIBUTION if name == "hpc-runner" else name)
        except metadata.PackageNotFoundError:
            continue
    # run from a checkout that was never installed (PYTHONPATH, a .pth): no metadata, the package says it
    versions.setdefault("hpc-runner", __version__)
    return versions


def host_info() -> dict[str, object]:
    """Return hostname, user, pid and platform."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {"hostname": socket.gethostname(), "user": user, "pid": os.getpid(), "platform": platform.platform()}


def git_state(path: Path | None) -> dict[str, object] | None:
    """Return commit and dirty flags of the git repo holding ``path``, or None outside a repo."""
    if path is None:
        return None
    path = Path(path).resolve()

    def git(*args: str) -> str | None:
        try:
            out = run_command(["git", "-C", str(path), *args], timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    root = git("rev-parse", "--show-toplevel")
    if not root:
        return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    bundle_status = git("status", "--porcelain", "--", ".")
    return {
        "root": root,
        "commit": commit,
        "dirty": bool(status),
        "bundle_dirty": bool(bundle_status),
    }

