"""SLURM's compressed host lists (``gpu[01-03,07],cpu5``) expanded to host names, stdlib only.

``scontrol show hostnames LIST`` is SLURM's own expansion and is used when it answers; the pure-Python
expansion below gives the same names (tests compare the two) for nodes where scontrol is missing. It is
lazy and bounded: the first host costs one name, a whole list at most ``MAX_HOSTS`` names.
"""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess
from collections.abc import Iterator

from hpc_runner.errors import ClusterError
from hpc_runner.records.command_output import CommandOutput, run_command
from hpc_runner.records.numbers import outside_int

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def _split_top_level(text: str) -> list[str]:
    """Split at the commas that are not inside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("']' without '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError("'[' without ']'")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


MAX_HOSTS = 65536  # a list naming more is refused, not expanded (no job spans so many nodes)


def _ranges(spec: str) -> list[tuple[int, int, int]]:
    """``01-03,07`` -> ``[(1, 3, 2), (7, 7, 2)]``: (first, last, width), checked but not expanded."""
    out: list[tuple[int, int, int]] = []
    for item in spec.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        first, last = outside_int(lo), outside_int(hi) if sep else outside_int(lo)
        if first is None or last is None or lo != lo.strip() or hi != hi.strip():
            raise ValueError(f"'[{spec}]' is not a list of numbers and ranges")
        if last < first:
            raise ValueError(f"the range {item} runs backwards")
        out.append((first, last, len(lo)))  # as scontrol: n[001-3] -> n001..n003, n[1-010] -> n1..n10
    return out


def _values(ranges: list[tuple[int, int, int]]) -> Iterator[str]:
    """The numbers of checked ranges, zero-padded to the width of each lower bound, one at a time."""
    for first, last, width in ranges:
        for n in range(first, last + 1):
            yield str(n).zfill(width)


def _parse_name(name: str) -> tuple[list[str], list[list[tuple[int, int, int]]]]:
    """One host expression (``rack[1-2]-n[01-02]``) as its texts and its checked bracket groups."""
    pieces = _BRACKET.split(name)  # text, range, text, range, ..., text
    if "[" in "".join(pieces[0::2]) or "]" in "".join(pieces[0::2]):
        raise ValueError(f"unbalanced brackets in {name!r}")
    return pieces[0::2], [_ranges(r) for r in pieces[1::2]]


def _names(texts: list[str], groups: list[list[tuple[int, int, int]]]) -> Iterator[str]:
    """The product of the bracket groups, in order, lazily (the first name costs one value of each group)."""
    if not groups:
        yield texts[0]
        return
    for value in _values(groups[0]):
        for rest in _names(texts[1:], groups[1:]):
            yield texts[0] + value + rest


def _parse(text: str) -> list[tuple[list[str], list[list[tuple[int, int, int]]]]]:
    return [_parse_name(part) for part in _split_top_level(text.strip())]


def _size(groups: list[list[tuple[int, int, int]]]) -> int:
    return math.prod(sum(last - first + 1 for first, last, _ in g) for g in groups)


def iter_hostlist(text: str) -> Iterator[str]:
    """Yield the host names of a SLURM host list in order, one at a time; the whole list is checked first.

    Raise ValueError on a list that is not SLURM's syntax (unbalanced brackets, a range that is not numeric).
    """
    parsed = _parse(text)  # a garbled list fails before the first name, wherever the fault is
    return (host for texts, groups in parsed for host in _names(texts, groups))


def hostlist_size(text: str) -> int:
    """Return how many hosts a SLURM host list names, without expanding it (ValueError as iter_hostlist)."""
    return sum(_size(groups) for _, groups in _parse(text))


def expand_hostlist(text: str, limit: int = MAX_HOSTS) -> list[str]:
    """Return the host names of a SLURM host list in order (``gpu[01-02],cpu5`` -> gpu01, gpu02, cpu5).

    Raise ValueError on a list that is not SLURM's syntax (unbalanced brackets, a range that is not numeric)
    or that names more than ``limit`` hosts.
    """
    if (count := hostlist_size(text)) > limit:
        raise ValueError(f"it names {count} hosts, more than {limit}")
    return list(iter_hostlist(text))


def _scontrol_show(what: str, name: str, timeout: float) -> CommandOutput | None:
    """Run ``scontrol show WHAT NAME``; None where scontrol is missing or does not answer in time."""
    exe = shutil.which("scontrol")
    if exe is None:
        return None
    try:
        return run_command([exe, "show", what, name], timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def scontrol_hostnames(text: str, timeout: float = 10.0) -> list[str] | None:
    """Return ``scontrol show hostnames TEXT`` (SLURM's own expansion), or None where scontrol cannot answer."""
    res = _scontrol_show("hostnames", text, timeout)
    hosts = res.stdout.split() if res is not None else []
    return hosts if res is not None and res.returncode == 0 and hosts else None


def node_address(host: str, timeout: float = 10.0) -> str | None:
    """Return the NodeAddr SLURM knows for ``host`` (``scontrol show node``), or None where it cannot say."""
    res = _scontrol_show("node", host, timeout)
    if res is None:
        return None
    for token in res.stdout.split():
        if token.startswith("NodeAddr="):
            return token.split("=", 1)[1] or None
    return None


def first_host(nodelist: str, variable: str = "SLURM_JOB_NODELIST", use_scontrol: bool = True) -> str:
    """Return the first host of a SLURM node list (``gpu[03-05,9],cpu1`` -> ``gpu03``), where rank 0 runs.

    ``scontrol show hostnames`` when it answers, else the pure-Python expansion; ``variable`` names
    where the list came from in the error for a list that is not SLURM's syntax.
    """
    hosts = scontrol_hostnames(nodelist) if use_scontrol else None
    if hosts is None:
        try:
            hosts = list(itertools.islice(iter_hostlist(nodelist), 1))
        except ValueError as exc:
            raise ClusterError(
                f"{variable}={nodelist!r} is not a SLURM host list: {exc}",
                expected="a list such as gpu[01-03,07],cpu5 (SLURM sets it; set MASTER_ADDR to bypass it)",
            ) from None
    if not hosts:
        raise ClusterError(f"{variable}={nodelist!r} names no host", expected="the job's node list, set by SLURM")
    return hosts[0]
