"""A job's wait on other jobs, in neutral words: what callers above the scheduler ask a job to wait for.

The text is the scheduler's (SLURM's ``--dependency``, which the in-memory cluster reads too); an
array's id stands for every task of it.
"""

from __future__ import annotations

from collections.abc import Iterable

AFTER_ANY = "afterany"  # the kind of wait that ends however the jobs end
AFTER_OK = "afterok"  # the kind of wait met only when every job completed successfully


def after_any(job_ids: Iterable[str]) -> str:
    """Return the wait for every one of ``job_ids`` to end, however it ends (each id once, in order)."""
    return f"{AFTER_ANY}:" + ":".join(dict.fromkeys(job_ids))


def after_ok(job_ids: Iterable[str]) -> str:
    """Return the wait for every one of ``job_ids`` to complete successfully (each id once, in order)."""
    return f"{AFTER_OK}:" + ":".join(dict.fromkeys(job_ids))


def after(kind: str, job_ids: Iterable[str]) -> str:
    """Return the wait of ``kind`` (``AFTER_ANY`` or ``AFTER_OK``) for every one of ``job_ids``."""
    return {AFTER_ANY: after_any, AFTER_OK: after_ok}[kind](job_ids)
