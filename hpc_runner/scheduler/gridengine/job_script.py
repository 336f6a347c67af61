"""The ``#$`` job script, written from checked values and read back before it is returned.

qsub reads the ``#$`` lines at the top of a script as option words. Every value that reaches one is checked for
its field first (settings.py for the profile's; here the job name, the folders, the array, the dependencies), each
word is written through ``shlex.quote`` (a checked word needs no quoting, so the line is what Grid Engine's docs
show), the shell lines' words too, and the script is parsed back (``prove_script``): its ``#$`` block must hold
exactly the options intended and its last line exactly the command's words. Nothing else can be in it.

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

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.gridengine.settings import GridEngineSettings

DIRECTIVE = "#$ "
SHELL = "/bin/bash"
_PATH = re.compile(r"/[A-Za-z0-9_.+=:,/@%-]{0,4095}")
_JOB_ID = re.compile(r"[0-9]{1,18}")
MAX_ARRAY = 10_000_000


def safe_job_name(name: str) -> str:
    """Return ``name`` with what Grid Engine refuses in a job name (space, ``/ : @ \\ * ?``, controls) replaced by
    ``-``, at most 64 characters, starting with a letter (a name of digits would read as a job id in -hold_jid)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.+-]", "-", str(name))[:64] or "hpcr"
    return cleaned if cleaned[0].isalpha() else f"j{cleaned}"[:64]


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
    if array_size is not None and array_size > 1:
        if not isinstance(array_size, int) or array_size > MAX_ARRAY:
            raise ClusterError(f"an array of {array_size} tasks is more than {MAX_ARRAY}")
        lines.append(["-t", f"1-{array_size}"])
        if max_running:
            if not isinstance(max_running, int) or max_running < 1:
                raise ClusterError(f"at most {max_running!r} tasks at once is not a number of tasks")
            lines.append(["-tc", str(max_running)])
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
    ``module load``; checked for control characters), then ``exec`` of ``command`` (each word quoted).
    ``describe``: a comment line saying what runs. Proven by ``prove_script`` before it is returned."""
    options = directives(settings, job_name=job_name, log_folder=log_folder, workdir=workdir,
                         array_size=array_size, max_running=max_running, hold_jids=hold_jids, hold=hold)
    for line in [*setup, *(command or ["?"]), describe or ""]:
        found = find_control_character(str(line))
        if found is not None:
            raise ClusterError(f"a line of the job script holds the control character {found[1]!r}",
                               expected="setup lines, a command and a description without control characters")
    if not command:
        raise ClusterError("the job runs no command")
    lines = ["#!/bin/bash"]
    if describe:  # the first comment says what runs (qsub reads the #$ lines past a comment)
        lines.append(f"# {' '.join(describe.split())}")
    lines += [DIRECTIVE + " ".join(shlex.quote(w) for w in words) for words in options]
    lines.extend(setup)
    lines.append("exec " + shlex.join(command))
    text = "\n".join(lines) + "\n"
    prove_script(text, options, command)
    return text


def prove_script(text: str, options: list[list[str]], command: Sequence[str]) -> None:
    """ClusterError unless ``text``'s ``#$`` lines hold exactly ``options`` and its last line runs exactly
    ``command``."""
    read: list[list[str]] = []
    body = text.splitlines()[1:]
    if body and body[0].startswith("# "):  # the description
        body = body[1:]
    for line in body:
        if not line.startswith("#$"):
            break
        read.append(shlex.split(line[2:]))
    last = text.rstrip("\n").splitlines()[-1]
    if read != options or shlex.split(last) != ["exec", *command]:
        raise ClusterError("the job script does not say what was meant (a value changed its options)",
                           expected="values checked for their field")
    for words in read:  # a #$ word that needed quoting would reach qsub's own parser, which quotes differently
        if any(shlex.quote(w) != w for w in words):
            raise ClusterError(f"the #$ line {' '.join(words)[:80]!r} holds a word that needs quoting")


def log_paths(log_folder: str, job_name: str, job_id: str, ge_task: int | None) -> tuple[str, str]:
    """Where Grid Engine writes the job's (task's) stdout and stderr: ``<folder>/<name>.o<job>[.<task>]``."""
    name = safe_job_name(job_name)
    suffix = f"{job_id}.{ge_task}" if ge_task is not None else job_id
    folder = PurePosixPath(log_folder)
    return str(folder / f"{name}.o{suffix}"), str(folder / f"{name}.e{suffix}")
