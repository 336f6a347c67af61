"""The ``#BSUB`` job script, written from checked values and read back before it is returned.

bsub reads the ``#BSUB`` lines at the top of a script given on its standard input (``bsub < job.sh``) as option
words. Every value that reaches one is checked for its field first (settings.py, and here the job name, the log
folder, the array, the dependencies). A word that needs no quoting is written as it is (``shlex.quote`` leaves it
alone); one that holds ``[ ] ( ) %`` (an array, a resource string, ``done(ID)``) is written in double quotes, as
IBM's documentation writes them, after a check that it holds nothing special inside double quotes (no ``" $ `
\\ !``). The script is written and proven by scheduler/batch_script.py (its ``#BSUB`` lines must hold exactly the
options intended and its last line exactly the command's words).

Choices, each as IBM Spectrum LSF 10.1's bsub documentation writes it:

- an array of N tasks is ``-J "name[1-N]"`` (LSF's indices start at 1; our task is the index - 1), at most K at
  once ``-J "name[1-N]%K"``;
- dependencies: ``-w "done(ID) && done(ID2)"`` (an array's id stands for all its elements);
- logs: ``-o <folder>/%J_%I.out`` and ``-e <folder>/%J_%I.err`` (%J the job id, %I the index, 0 outside arrays);
- ``-Q "99"``: a job that exits with 99 is requeued (job-level REQUEUE_EXIT_VALUES), the job side's way back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from hpc_runner.errors import ClusterError
from hpc_runner.scheduler import batch_script
from hpc_runner.scheduler.batch_script import Dialect, count_in_range
from hpc_runner.scheduler.lsf.answers import FIRST_INDEX
from hpc_runner.scheduler.lsf.settings import LsfSettings, lsf_memory, lsf_run_limit

DIRECTIVE = "#BSUB"
MAX_ARRAY = 1 << 20
_JOB_NAME = re.compile(r"[A-Za-z0-9_.-]{1,200}")  # an array's name: a-z A-Z 0-9 . - _ (IBM, "Job arrays")
_PATH = re.compile(r"/[A-Za-z0-9_.+,=@:/ -]{0,4000}")  # no % (bsub replaces %J, %I), no quotes
_NATIVE = re.compile(r"[0-9]{1,18}(\[[0-9]{1,9}\])?")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")  # what shlex.quote leaves unquoted
_IN_DOUBLE_QUOTES = re.compile(r"[A-Za-z0-9_@%+=:,./ \[\]()&|<>~-]+")  # nothing special inside "..."


def safe_job_name(text: str) -> str:
    """Return ``text`` as an LSF job (array) name: ``[A-Za-z0-9_.-]``, at most 200."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(text))[:200] or "hpcr"


def directive_word(word: str) -> str:
    """Return ``word`` as it is when it needs no quoting, else in double quotes (IBM's form); ClusterError when
    it holds a character that is special inside double quotes."""
    if _PLAIN.fullmatch(word):
        return word
    if _IN_DOUBLE_QUOTES.fullmatch(word):
        return f'"{word}"'
    raise ClusterError(f"#BSUB value {word[:60]!r} holds characters bsub would read specially",
                       expected="letters, digits and _ . - [ ] ( ) % : = , / and spaces")


LSF = Dialect(DIRECTIVE, directive_word)


def check_folder(path: Path | str, what: str) -> str:
    """Return an absolute folder's text; ClusterError when a #BSUB line or a cd could not take it (no ``%``: bsub
    replaces ``%J`` and ``%I``; no quotes)."""
    return batch_script.absolute_folder(path, what, _PATH, LSF, "letters, digits, spaces and _ . + , = @ : / -")


def intended_options(settings: LsfSettings, *, job_name: str, log_folder: Path | str, array_size: int | None = None,
                     max_running: int | None = None, after_ok: Sequence[str] = (), hold: bool = False
                     ) -> list[list[str]]:
    """Return the ``#BSUB`` lines' words, in order (one list per line), from checked values."""
    if not _JOB_NAME.fullmatch(job_name):
        raise ClusterError(f"job name {job_name[:60]!r} is not one bsub takes", expected="safe_job_name's form")
    logs = check_folder(log_folder, "the log folder")
    name = job_name
    if array_size is not None:
        count_in_range(array_size, "the array's size", MAX_ARRAY)
        name = f"{job_name}[{FIRST_INDEX}-{array_size - 1 + FIRST_INDEX}]"
        if max_running is not None:
            name += "%" + str(count_in_range(max_running, "the array's tasks at once", MAX_ARRAY))
    lines = [["-J", name]]
    if settings.queue:
        lines.append(["-q", settings.queue])
    if settings.project:
        lines.append(["-P", settings.project])
    lines.append(["-n", str(settings.slots)])
    if settings.one_host:
        lines.append(["-R", "span[hosts=1]"])
    if settings.mem_bytes is not None:
        lines += [["-R", f"rusage[mem={lsf_memory(settings.mem_bytes)}]"], ["-M", lsf_memory(settings.mem_bytes)]]
    if settings.run_limit_s is not None:
        lines.append(["-W", lsf_run_limit(settings.run_limit_s)])
    if settings.gpus:
        lines.append(["-gpu", f"num={settings.gpus}"])
    if settings.requeue_exit is not None:
        lines.append(["-Q", str(settings.requeue_exit)])
    if after_ok:
        for job in after_ok:
            if not _NATIVE.fullmatch(str(job)):
                raise ClusterError(f"dependency {str(job)[:60]!r} is not an LSF job id",
                                   expected="ids as bsub printed them: 1234 (or 1234[2] for one element)")
        lines.append(["-w", " && ".join(f"done({job})" for job in after_ok)])
    if hold:
        lines.append(["-H"])
    lines += [["-o", f"{logs}/%J_%I.out"], ["-e", f"{logs}/%J_%I.err"]]
    return lines


def job_script(settings: LsfSettings, *, job_name: str, log_folder: Path | str, command: Sequence[str],
               workdir: Path | str | None = None, array_size: int | None = None, max_running: int | None = None,
               after_ok: Sequence[str] = (), hold: bool = False, setup: Sequence[str] = ()) -> str:
    """Return the job script for ``command`` (an argv list), for ``bsub < script``: the ``#BSUB`` lines, the
    profile's ``setup`` lines, a ``cd`` to ``workdir`` and ``exec`` of the command; proven before it is returned
    (scheduler/batch_script.py)."""
    options = intended_options(settings, job_name=job_name, log_folder=log_folder, array_size=array_size,
                               max_running=max_running, after_ok=after_ok, hold=hold)
    folder = None if workdir is None else check_folder(workdir, "the working directory")
    return batch_script.job_script(LSF, options, command, setup=setup, workdir=folder,
                                   array_size=array_size)
