"""The ``#$`` job script, written from checked values and read back before it is returned.

qsub reads every line of a script that starts with ``#$`` as option words. Every value that reaches one is checked
for its field first (settings.py for the profile's; here the job name, the folders, the array, the dependencies),
each word is written as it is (``directive_word``: a checked word is one ``shlex.quote`` leaves alone, so the line
is what Grid Engine's docs show, and a word that would need quoting is refused: qsub's own parser quotes
differently), and the script is written and proven by scheduler/batch_script.py (its ``#$`` lines must hold
exactly the options intended and its last line exactly the command's words).

Choices, each as qsub(1) of Grid Engine 8.1.9 writes it:

- ``-S /bin/bash``: the queue's ``shell_start_mode`` (``posix_compliant`` by default) ignores the ``#!`` line;
- an array of N tasks is ``-t 1-N`` (Grid Engine numbers tasks from 1; our task is ``SGE_TASK_ID - 1``), at most
  K at once ``-tc K``; one task is a plain job (``SGE_TASK_ID`` is then ``undefined``);
- the logs go into the log folder under Grid Engine's own names, ``<name>.o<job>[.<task>]`` and ``.e``;
- ``-V``: the job sees the submitting shell's variables (the virtual environment, ``HPCR_*``), as SLURM's
  ``--export=ALL``; ``-r y`` (rerunnable: exit 99 runs it again) and ``-notify`` (SIGUSR1/SIGUSR2 before a
  suspend or a kill, the queue's ``notify`` seconds ahead) unless the profile says no;
- dependencies: ``-hold_jid 12,13`` (a whole array's id holds until every task ended, whatever its exit);
- requests: ``-pe PE SLOTS`` for more than one slot, ``-l h_rt=...,h_vmem=...``, ``-q``, ``-P``, then the
  profile's ``options``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler import batch_script
from hpc_runner.scheduler.batch_script import Dialect, count_in_range
from hpc_runner.scheduler.gridengine.settings import GridEngineSettings

DIRECTIVE = "#$"
SHELL = "/bin/bash"
_PATH = re.compile(r"/[A-Za-z0-9_.+=:,/@%-]{0,4095}")
_JOB_ID = re.compile(r"[0-9]{1,18}")
MAX_ARRAY = 10_000_000


def safe_job_name(name: str) -> str:
    """Return ``name`` with what Grid Engine refuses in a job name (space, ``/ : @ \\ * ?``, controls) replaced by
    ``-``, at most 64 characters, starting with a letter (a name of digits would read as a job id in -hold_jid)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.+-]", "-", str(name))[:64] or "hpcr"
    return cleaned if cleaned[0].isalpha() else f"j{cleaned}"[:64]


def directive_word(word: str) -> str:
    """Return a ``#$`` word as it is; ClusterError for one that would need quoting (no checked value does)."""
    if shlex.quote(word) != word:
        raise ClusterError(f"the #$ word {word[:80]!r} would need quoting", expected="values checked for their field")
    return word


GRID_ENGINE = Dialect(DIRECTIVE, directive_word)


def _path(value: str, what: str) -> str:
    if not isinstance(value, str) or not _PATH.fullmatch(value) or "/../" in f"{value}/":
        raise ClusterError(f"{what} {str(value)[:80]!r} cannot be written in a #$ line", expected=(
            "an absolute path of letters, digits and _ . + = : , / @ % - (no spaces, quotes or $)"))
    return value


def directives(settings: GridEngineSettings, *, job_name: str, log_folder: str, workdir: str | None = None,
               array_size: int | None = None, max_running: int | None = None,
               hold_jids: Sequence[str] = (), hold: bool = False) -> list[list[str]]:
    """Return the option words of each ``#$`` line, every value checked."""
    lines = [["-S", SHELL], ["-N", safe_job_name(job_name)], ["-o", _path(log_folder, "the log folder")],
             ["-e", _path(log_folder, "the log folder")]]
    lines.append(["-wd", _path(workdir, "the working folder")] if workdir else ["-cwd"])
    lines.append(["-V"])
    if settings.rerunnable:
        lines.append(["-r", "y"])
    if settings.notify:
        lines.append(["-notify"])
    if array_size is not None and count_in_range(array_size, "the array's size", MAX_ARRAY) > 1:
        lines.append(["-t", f"1-{array_size}"])
        if max_running:
            lines.append(["-tc", str(count_in_range(max_running, "the array's tasks at once", MAX_ARRAY))])
    if hold_jids:
        bad = [j for j in hold_jids if not isinstance(j, str) or not _JOB_ID.fullmatch(j)]
        if bad:
            raise ClusterError(f"-hold_jid {str(bad[0])[:40]!r} is not a Grid Engine job id",
                               expected="the ids qsub gave (1234; an array's id holds for all its tasks)")
        lines.append(["-hold_jid", ",".join(dict.fromkeys(hold_jids))])
    if hold:
        lines.append(["-h"])
    if settings.queue:
        lines.append(["-q", settings.queue])
    if settings.slots > 1:
        lines.append(["-pe", settings.pe, str(settings.slots)])
    resources = [f"{k}={v}" for k, v in (("h_rt", settings.h_rt), ("h_vmem", settings.h_vmem)) if v]
    if resources:
        lines.append(["-l", ",".join(resources)])
    if settings.project:
        lines.append(["-P", settings.project])
    if settings.options:
        lines.append(list(settings.options))
    return lines


def job_script(settings: GridEngineSettings, *, job_name: str, log_folder: str, command: Sequence[str],
               workdir: str | None = None, array_size: int | None = None, max_running: int | None = None,
               hold_jids: Sequence[str] = (), hold: bool = False, setup: Sequence[str] = (),
               describe: str | None = None) -> str:
    """Return the job script: ``#$`` lines, the profile's ``setup`` lines (its own shell code, e.g.
    ``module load``), then ``exec`` of ``command`` (each word quoted); ``-wd`` (or ``-cwd``) is the working folder.
    ``describe``: a comment line saying what runs. Proven before it is returned (scheduler/batch_script.py)."""
    options = directives(settings, job_name=job_name, log_folder=log_folder, workdir=workdir,
                         array_size=array_size, max_running=max_running, hold_jids=hold_jids, hold=hold)
    return batch_script.job_script(GRID_ENGINE, options, command, setup=setup, describe=describe,
                                   array_size=array_size)


def log_paths(log_folder: str, job_name: str, job_id: str, ge_task: int | None) -> tuple[str, str]:
    """Where Grid Engine writes the job's (task's) stdout and stderr: ``<folder>/<name>.o<job>[.<task>]``."""
    name = safe_job_name(job_name)
    suffix = f"{job_id}.{ge_task}" if ge_task is not None else job_id
    folder = PurePosixPath(log_folder)
    return str(folder / f"{name}.o{suffix}"), str(folder / f"{name}.e{suffix}")
