"""Where this process runs: inside the `--safe` sandbox or a container image, and the test-only switch of the
allow-list (honoured only inside the sandbox).

Inside the sandbox is never a variable the caller can set: ``HPCR_SANDBOXED=1`` in a caller's environment is
ignored unless this process really is in the PID namespace bwrap made (its PID 1 is ``bwrap``, which no
process on the host is) and the folder bwrap makes at :data:`INSIDE_FILE` on the sandbox's private ``/run``
tmpfs is there. A container's mark only chooses where the scheduler is asked; it
grants nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

INSIDE_ENV = "HPCR_SANDBOXED"  # set by the parent on the run it starts inside the sandbox (not enough alone)
INSIDE_FILE = "/run/hpc-runner-sandbox"  # a folder bwrap makes (--dir) on the sandbox's private /run tmpfs
# Test-only: "off" skips the allow-list inside the sandbox, so tests show that the sandbox alone holds.
# Honoured only where INSIDE_ENV is set; never documented as a user setting.
STATIC_SWITCH = "HPCR_TEST_SAFE_STATIC"
INSIDE_CONTAINER_ENV = "HPCR_CONTAINED"  # set on the run hpc-runner starts inside a container image


def inside_sandbox(environ: Mapping[str, str] | None = None, proc: str = "/proc") -> bool:
    """Return whether this process is the run its parent started inside the sandbox: the variable, and what the
    caller cannot forge from outside (PID 1 of this PID namespace is bwrap, and the folder bwrap made on its
    private /run is there)."""
    if (os.environ if environ is None else environ).get(INSIDE_ENV) != "1":
        return False
    return _pid1_is_bwrap(proc) and os.path.isdir(INSIDE_FILE) and not os.path.islink(INSIDE_FILE)


def _pid1_is_bwrap(proc: str) -> bool:
    """Whether PID 1 of this process's PID namespace is bwrap (on the host it is init)."""
    try:
        fd = os.open(os.path.join(proc, "1", "comm"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.read(fd, 64).decode("utf-8", "replace").strip() == "bwrap"
    finally:
        os.close(fd)


def static_check_skipped(environ: Mapping[str, str] | None = None) -> bool:
    """Test-only: whether the allow-list is switched off (only inside the sandbox, never outside it)."""
    environ = os.environ if environ is None else environ
    return inside_sandbox(environ) and environ.get(STATIC_SWITCH) == "off"


def inside_container(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether this process is the run hpc-runner started inside a container image."""
    return (os.environ if environ is None else environ).get(INSIDE_CONTAINER_ENV) == "1"


def scheduler_outside(environ: Mapping[str, str] | None = None) -> bool:
    """Return whether the scheduler is asked from outside this process (sandbox: no network; image: no SLURM)."""
    return inside_sandbox(environ) or inside_container(environ)
