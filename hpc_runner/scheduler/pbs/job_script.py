"""The ``#PBS`` job script, written from checked values and read back before it is returned.

qsub(1B) reads the ``#PBS`` lines at the top of the script as option words. Every value that reaches one is
checked for its field first (settings.py, and here the job name, the log folder, the array, the dependencies),
each ``#PBS`` word is written bare (``directive_word``: a checked value holds only letters, digits and
``_ @ % + = : , . / [ ] -``, so the line is what Altair's docs show, ``1234[]`` included); the script is
written and proven by scheduler/batch_script.py (its ``#PBS`` lines must hold exactly the options intended and
its last line exactly the command's words).

Choices, each as Altair's PBS Professional Reference Guide writes it:

- an array of N tasks is ``-J 0-(N-1)`` (task numbers start at 0, as SLURM's do here); PBS refuses an array of
  one subjob, so one task is a plain job (its task is 0);
- at most K tasks at once: ``-W max_run_subjobs=K`` (the job attribute of PBS Pro 2020.1 / OpenPBS 20 and later;
  an older server refuses it at qsub, loudly). The ``-J 0-9%K`` suffix is not used: sites report it refused;
- dependencies: ``-W depend=afterok:ID[:ID...]`` with the ids as qsub printed them (``1234[].server`` for an
  array, which stands for all its subjobs);
- logs: ``-o`` and ``-e`` name the log folder (a folder: PBS writes ``<name>.o<seq>[.<index>]`` inside);
- ``-r y`` (rerunnable) unless the profile says otherwise: ``qrerun`` and a node failure's requeue need it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler import batch_script
from hpc_runner.scheduler.batch_script import Dialect, count_in_range
from hpc_runner.scheduler.pbs.answers import PBS_JOB_ID
from hpc_runner.scheduler.pbs.settings import PbsSettings, pbs_size, pbs_walltime

DIRECTIVE = "#PBS"
MAX_ARRAY = 1 << 20
_JOB_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]{0,229}")  # qsub -N: starts with a letter
# a folder PBS can take as -o/-e: [host:]path, so no ':' (it would name a host); no spaces or quotes either
_PATH = re.compile(r"/[A-Za-z0-9_.+,=@/-]{0,4000}")


def safe_job_name(text: str) -> str:
    """Return ``text`` as a name qsub takes: ``[A-Za-z0-9_.+-]``, starting with a letter, at most 230."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", str(text))[:229]
    return name if name[:1].isascii() and name[:1].isalpha() else f"j{name}"[:230]


_BARE = re.compile(r"[A-Za-z0-9_@%+=:,./\[\]-]+")


def directive_word(word: str) -> str:
    """Return a ``#PBS`` word as it is; ClusterError for one that would need quoting (no checked value does)."""
    if not _BARE.fullmatch(word):
        raise ClusterError(f"#PBS value {word[:60]!r} holds characters qsub would read specially",
                           expected="letters, digits and _ @ % + = : , . / [ ] -")
    return word


PBS = Dialect(DIRECTIVE, directive_word)


def check_folder(path: Path | str, what: str) -> str:
    """Return an absolute folder's text; ClusterError when PBS could not take it as a path (``[host:]path``, so no
    ``:``, and no spaces or quotes either)."""
    return batch_script.absolute_folder(path, what, _PATH, PBS, "letters, digits and _ . + , = @ / -")


def intended_options(settings: PbsSettings, *, job_name: str, log_folder: Path | str, array_size: int | None = None,
                     max_running: int | None = None, after_ok: Sequence[str] = (), hold: bool = False
                     ) -> list[list[str]]:
    """Return the ``#PBS`` lines' words, in order (one list per line), from checked values."""
    if not _JOB_NAME.fullmatch(job_name):
        raise ClusterError(f"job name {job_name[:60]!r} is not one qsub takes", expected="safe_job_name's form")
    logs = check_folder(log_folder, "the log folder") + "/"
    chunk = f"select={settings.select}:ncpus={settings.ncpus}"
    if settings.ngpus:
        chunk += f":ngpus={settings.ngpus}"
    if settings.mem_bytes is not None:
        chunk += f":mem={pbs_size(settings.mem_bytes)}"
    lines = [["-N", job_name]]
    if settings.queue:
        lines.append(["-q", settings.queue])
    if settings.account:
        lines.append(["-A", settings.account])
    if settings.project:
        lines.append(["-P", settings.project])
    lines.append(["-l", chunk])
    if settings.walltime_s is not None:
        lines.append(["-l", f"walltime={pbs_walltime(settings.walltime_s)}"])
    if settings.place:
        lines.append(["-l", f"place={settings.place}"])
    lines.append(["-r", "y" if settings.rerunnable else "n"])
    if array_size is not None and count_in_range(array_size, "the array's size", MAX_ARRAY) > 1:
        lines.append(["-J", f"0-{array_size - 1}"])
        if max_running is not None:
            count_in_range(max_running, "the array's tasks at once", MAX_ARRAY)
            lines.append(["-W", f"max_run_subjobs={max_running}"])
    if after_ok:
        for job in after_ok:
            if not PBS_JOB_ID.fullmatch(str(job)):
                raise ClusterError(f"dependency {str(job)[:60]!r} is not a PBS job id",
                                   expected="ids as qsub printed them: 1234.server or 1234[].server")
        lines.append(["-W", "depend=afterok:" + ":".join(after_ok)])
    if hold:
        lines.append(["-h"])
    lines += [["-o", logs], ["-e", logs]]
    return lines


def job_script(settings: PbsSettings, *, job_name: str, log_folder: Path | str, command: Sequence[str],
               workdir: Path | str | None = None, array_size: int | None = None, max_running: int | None = None,
               after_ok: Sequence[str] = (), hold: bool = False, setup: Sequence[str] = ()) -> str:
    """Return the job script for ``command`` (an argv list): the ``#PBS`` lines, the profile's ``setup`` lines,
    a ``cd`` to ``workdir`` (PBS starts a job in ``$HOME``) and ``exec`` of the command; proven before it is
    returned (scheduler/batch_script.py)."""
    options = intended_options(settings, job_name=job_name, log_folder=log_folder, array_size=array_size,
                               max_running=max_running, after_ok=after_ok, hold=hold)
    folder = None if workdir is None else check_folder(workdir, "the working directory")
    return batch_script.job_script(PBS, options, command, setup=setup, workdir=folder,
                                   array_size=array_size)
