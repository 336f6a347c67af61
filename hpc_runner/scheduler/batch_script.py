"""A job script whose options are directive lines (``#PBS``, ``#BSUB``, ``#$``), written from checked words and
read back before it is returned: the part every such backend shares, in our words.

Each backend knows which options its job asks for (one list of words per directive line) and how its scheduler
reads a word on such a line (its ``Dialect``); this module writes the script the same way for all of them::

    #!/bin/bash
    # <describe>              optional: what runs
    # by hand: hpc-runner job RUN_DIR [--task 0]
                              when the command is hpc-runner's job runner (``by_hand_line``)
    <directive> <words>       one line per option, each word written by the dialect
                              (a blank line)
    # setup                   the profile's own shell lines, when it has some, then a blank line
    <setup lines>
    cd <workdir>              optional (a scheduler that takes the working folder as an option needs none)
    exec <command words>      each word shlex.quote-d

and proves it (``prove_script``): every line that begins with the directive, wherever it stands (Grid Engine
reads them anywhere in the script, a POSIX qsub up to the first command), read back with shlex, is exactly the
options intended, and the last line runs exactly the command's words. A command word, a setup line or the
description with a control character, and a setup line a scheduler would read as a directive, are refused
before anything is written. Nothing else can be in the script.

``by_hand_line`` is the header's second comment for every backend (SLURM's script too,
scheduler/slurm/job_script.py): the command a user copies to run the job by hand, ``hpc-runner job RUN_DIR``
(cli/job.py runs the newest arguments file in the run dir or its job folder), the run dir one shell word.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import ClusterError
from hpc_runner.scheduler.job_arguments import JOB_COMMAND

BY_HAND = "# by hand: "  # what starts the header's comment that says how to run the job by hand


@dataclass(frozen=True)
class Dialect:
    """How one scheduler reads a job script's directive lines."""

    directive: str  # what starts a directive line: "#PBS", "#BSUB", "#$"
    word: Callable[[str], str]  # a checked option word as written on a line; ClusterError for one it would misread


def count_in_range(value: int, what: str, high: int, low: int = 1) -> int:
    """Return ``value`` (an array's size, how many of its tasks at once); ClusterError naming ``what`` when it is
    no whole number from ``low`` to ``high``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ClusterError(f"{what} ({value!r}) is out of range", expected=f"a whole number from {low} to {high}")
    return value


def absolute_folder(path: Path | str, what: str, allowed: re.Pattern[str], dialect: Dialect, characters: str) -> str:
    """Return ``path`` made absolute, as text; ClusterError when it holds a control character or a character
    outside ``allowed`` (``characters`` says which are allowed), which a directive line could not take."""
    text = str(Path(path).expanduser().absolute())
    if find_control_character(text) or not allowed.fullmatch(text):
        raise ClusterError(f"{what} {text[:80]!r} cannot be written in a {dialect.directive} line",
                           expected=f"{what} of {characters}")
    return text


def command_words(command: Sequence[str]) -> list[str]:
    """Return the words the job runs; ClusterError for none, or for a word with a control character."""
    words = [str(w) for w in command]
    if not words:
        raise ClusterError("the job's command has no words", expected="a program and its arguments")
    for word in words:
        if find_control_character(word):
            raise ClusterError(f"the job's command word {word[:60]!r} holds a control character",
                               expected="command words on one line")
    return words


def shell_lines(setup: Sequence[str], dialect: Dialect) -> list[str]:
    """Return the profile's setup lines; ClusterError for one with a control character or one the scheduler would
    read as a directive."""
    lines = [str(line) for line in setup]
    for line in lines:
        if find_control_character(line):
            raise ClusterError(f"setup line {line[:60]!r} holds a control character", expected="one line each")
        if line.lstrip().startswith(dialect.directive):
            raise ClusterError(f"setup line {line[:60]!r} would be read as a {dialect.directive} option",
                               expected="shell lines (the scheduler's options belong in the profile's settings)")
    return lines


def by_hand_line(args_file: Path | str, array_size: int | None = None) -> str:
    """Return the script's comment that says how to run its job by hand: ``# by hand: hpc-runner job FILE``,
    with ``--task 0`` for an array of ``array_size`` tasks (``# tasks 0-N`` after it: 0-based, as ``hpc-runner
    job --help`` says). FILE is this job's own arguments file, not its run dir: a sweep's job folder holds one
    file per array (top-ups, retries, resume), and ``hpc-runner job RUN_DIR`` runs the newest. Written as one
    shell word (``shlex.quote``), so the text after ``# by hand: `` runs as it reads. ClusterError for a path
    with a control character (a newline would end the comment); read back with shlex before it is returned."""
    path = str(args_file)
    if find_control_character(path):
        raise ClusterError(f"the job's arguments file {path[:80]!r} holds a control character; nothing was "
                           "submitted", expected="a run dir whose path is one line")
    words = ["hpc-runner", "job", path]
    text = shlex.join(words)
    if array_size is not None and array_size > 1:
        words += ["--task", "0"]
        text += f" --task 0  # tasks 0-{array_size - 1}"
    if shlex.split(text, comments=True) != words:
        raise ClusterError("the job script's by-hand command is not the one intended; nothing was submitted")
    return BY_HAND + text


def runs_arguments_file(words: Sequence[str]) -> bool:
    """Whether ``words`` (a job's command) run hpc-runner's job runner on an arguments file (``python -u -m
    hpc_runner job FILE``, scheduler/job_arguments.py ``JOB_COMMAND``): a job a user can run by hand."""
    return len(words) > len(JOB_COMMAND) + 1 and tuple(words[-len(JOB_COMMAND) - 1:-1]) == JOB_COMMAND


def job_script(dialect: Dialect, options: list[list[str]], command: Sequence[str], *, setup: Sequence[str] = (),
               workdir: str | None = None, describe: str | None = None, array_size: int | None = None) -> str:
    """Return the job script (the module's text) for ``options`` (checked words, one list per directive line) and
    ``command`` (an argv list); ``workdir``: a checked absolute folder to ``cd`` into; ``array_size``: the job's
    tasks, for the by-hand comment (``by_hand_line``, when ``command`` runs an arguments file). Proven before it
    is returned."""
    words = command_words(command)
    setup_lines = shell_lines(setup, dialect)
    lines = ["#!/bin/bash"]
    if describe:
        if find_control_character(describe):
            raise ClusterError("the job's description holds a control character", expected="one line of text")
        lines.append(f"# {' '.join(describe.split())}")
    if runs_arguments_file(words):
        lines.append(by_hand_line(words[-1], array_size))
    lines += [" ".join([dialect.directive, *map(dialect.word, option)]) for option in options]
    lines.append("")
    if setup_lines:
        lines += ["# setup", *setup_lines, ""]
    if workdir is not None:
        lines.append("cd " + shlex.quote(workdir))
    lines.append("exec " + shlex.join(words))
    script = "\n".join(lines) + "\n"
    prove_script(script, dialect, options, words)
    return script


def directive_options(script: str, dialect: Dialect) -> list[list[str]]:
    """Return the option words of every directive line of ``script``, as the scheduler would read them."""
    prefix = dialect.directive
    return [shlex.split(line[len(prefix):]) for line in script.splitlines() if line.startswith(prefix)]


def prove_script(script: str, dialect: Dialect, options: list[list[str]], words: list[str]) -> None:
    """ClusterError unless ``script``'s directive lines hold exactly ``options`` and its last line runs exactly
    ``words``; nothing was submitted then."""
    if directive_options(script, dialect) != options:
        raise ClusterError(f"the generated {dialect.directive} lines are not the ones intended; nothing was submitted",
                           expected="values without shell syntax in the job's fields")
    if shlex.split(script.rstrip("\n").rsplit("\n", 1)[-1]) != ["exec", *words]:
        raise ClusterError("the generated job script's command is not the one intended; nothing was submitted")
