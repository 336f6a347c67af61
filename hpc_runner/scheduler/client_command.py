"""One call of a scheduler's client command (``qsub``, ``bjobs``, ``qdel``...), in our words: an argv list (no
shell), run by records.command_output.run_command (bounded, decoded with bad bytes replaced, a timeout), and its
standard output returned for the backend's answers.py to parse.

A command that cannot be run at all, or that fails and prints nothing on its standard output, is a ClusterError
with its own words; one that fails yet prints (``qstat`` of an id it no longer knows, beside the others) is
answered, so that its parser reads what it did say.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import run_command

TIMEOUT_S = 60


def client_answer(argv: Sequence[str], client: str, *, stdin: str | None = None, timeout: float = TIMEOUT_S) -> str:
    """Return what ``argv`` printed on its standard output; ``client`` says what must be installed for it
    (``a PBS client``), for the error when it cannot be run."""
    what = argv[0]
    try:
        out = run_command(list(argv), timeout=timeout, input=stdin)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ClusterError(f"{what} could not be run ({str(exc)[:200]})",
                           expected=f"{what} on PATH ({client})") from None
    if out.returncode != 0 and not out.stdout.strip():
        raise ClusterError(f"{what} failed (exit {out.returncode}): {out.stderr.strip()[:300]}")
    return out.stdout
