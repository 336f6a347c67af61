"""The user's association and QOS limits as sacctmgr gave them, kept a few minutes between commands.

sacctmgr asks slurmdbd, the cluster's one accounting daemon: ~0.2-0.3 s a call here, often more on a busy
cluster, and every `sweep`, `status` of a sweep with waiting points and every array task that tops one up
asked it twice. The limits are the cluster's policy and change when an admin changes them, so their answers
are kept ``HPCR_LIMITS_CACHE_S`` seconds (default 300; 0 asks every time) in
``$XDG_CACHE_HOME/hpc-runner/slurm-limits/``, one file per cluster, user and command. What changes all the
time, the user's queued jobs, is always asked (squeue). A stale picture costs nothing lasting: a limit
lowered since is refused by sbatch, which drops the kept answers (``forget``) before the governor reads the
limits again; a limit raised since gives fewer tasks now, and the top-ups send the rest.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_json_cache
from hpc_runner.records.user_cache import user_cache_dir

DEFAULT_KEEP_S = 300.0
KEEP_ENV = "HPCR_LIMITS_CACHE_S"
MAX_BYTES = 1 << 20  # sacctmgr's answers for one user: a few lines each


def keep_seconds() -> float:
    """How long kept answers are used (``HPCR_LIMITS_CACHE_S``; 0 or a bad value below zero: not kept)."""
    try:
        value = float(os.environ.get(KEEP_ENV, DEFAULT_KEEP_S))
    except ValueError:
        return DEFAULT_KEEP_S
    return value if value == value and value > 0 else 0.0  # NaN, 0 and below: ask every time


def folder() -> Path:
    """Return where the kept answers live (``$XDG_CACHE_HOME/hpc-runner/slurm-limits``)."""
    return user_cache_dir() / "slurm-limits"


def _file(cluster: str, user: str) -> Path:
    conf = os.environ.get("SLURM_CONF", "")  # two clusters of one name, seen through two configs
    key = hashlib.sha256(f"{cluster}\0{conf}\0{user}".encode()).hexdigest()[:24]
    return folder() / f"{key}.json"


def kept(cluster: str, user: str, commands: Sequence[Sequence[str]]) -> tuple[list[str], float] | None:
    """Return the kept stdout of each of ``commands`` and their age in seconds, or None when there are none
    young enough (or the file is damaged, written in the future, or for other commands)."""
    keep_s = keep_seconds()
    if not keep_s:
        return None
    data = read_json_cache(_file(cluster, user), "kept scheduler limits", MAX_BYTES)
    answers = data.get("answers")
    at = data.get("at")
    if not isinstance(answers, dict) or not isinstance(at, int | float) or isinstance(at, bool):
        return None
    age = time.time() - at
    if not 0 <= age <= keep_s:
        return None
    out = [answers.get(" ".join(cmd)) for cmd in commands]
    if not all(isinstance(text, str) for text in out):
        return None
    return [str(text) for text in out], age


def keep(cluster: str, user: str, commands: Sequence[Sequence[str]], answers: Sequence[str]) -> None:
    """Keep the stdout of ``commands`` (best effort: a cache that cannot be written is asked again next time)."""
    if not keep_seconds():
        return
    data = {"at": time.time(), "cluster": cluster, "user": user,
            "answers": {" ".join(cmd): text for cmd, text in zip(commands, answers, strict=True)}}
    try:
        folder().mkdir(parents=True, exist_ok=True, mode=0o700)
        write_text_atomic(_file(cluster, user), json.dumps(data))
    except OSError:
        pass


def forget(cluster: str, user: str) -> None:
    """Drop the kept answers (sbatch refused a job for a limit: the picture was wrong)."""
    with contextlib.suppress(OSError):
        _file(cluster, user).unlink(missing_ok=True)
