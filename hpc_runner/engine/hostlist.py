"""SLURM's compressed host lists (``gpu[01-03,07],cpu5``) expanded to host names, stdlib only.

``scontrol show hostnames LIST`` is SLURM's own expansion and is used when it answers; the pure-Python
expansion below gives the same names (tests compare the two) for nodes where scontrol is missing.
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess

from hpc_runner.errors import ClusterError

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


def _range_values(spec: str) -> list[str]:
    """``01-03,07`` -> ``["01", "02", "03", "07"]``: a range is zero-padded to the width of its lower bound."""
    values: list[str] = []
    for item in spec.split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"'[{spec}]' is not a list of numbers and ranges")
        if not sep:
            values.append(lo)
            continue
        first, last = int(lo), int(hi)
        if last < first:
            raise ValueError(f"the range {item} runs backwards")
        width = len(lo)  # as scontrol: n[001-3] -> n001..n003, n[1-010] -> n1..n10
        values.extend(str(n).zfill(width) for n in range(first, last + 1))
    return values


def _expand_name(name: str) -> list[str]:
    """One host expression, possibly with several bracket groups (``rack[1-2]-n[01-02]``), as a product."""
    pieces = _BRACKET.split(name)  # text, range, text, range, ..., text
    if "[" in "".join(pieces[0::2]) or "]" in "".join(pieces[0::2]):
        raise ValueError(f"unbalanced brackets in {name!r}")
    texts, ranges = pieces[0::2], [_range_values(r) for r in pieces[1::2]]
    out = []
    for combo in itertools.product(*ranges):
        out.append("".join(t + v for t, v in itertools.zip_longest(texts, combo, fillvalue="")))
    return out


def expand_hostlist(text: str) -> list[str]:
    """Return the host names of a SLURM host list in order (``gpu[01-02],cpu5`` -> gpu01, gpu02, cpu5).

    Raise ValueError on a list that is not SLURM's syntax (unbalanced brackets, a range that is not numeric).
    """
    hosts: list[str] = []
    for part in _split_top_level(text.strip()):
        hosts.extend(_expand_name(part))
    return hosts


def scontrol_hostnames(text: str, timeout: float = 10.0) -> list[str] | None:
    """Return ``scontrol show hostnames TEXT`` (SLURM's own expansion), or None where scontrol cannot answer."""
    exe = shutil.which("scontrol")
    if exe is None:
        return None
    try:
        res = subprocess.run([exe, "show", "hostnames", text], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    hosts = res.stdout.split()
    return hosts if res.returncode == 0 and hosts else None


def first_host(nodelist: str, variable: str = "SLURM_JOB_NODELIST", use_scontrol: bool = True) -> str:
    """Return the first host of a SLURM node list (``gpu[03-05,9],cpu1`` -> ``gpu03``), where rank 0 runs.

    ``scontrol show hostnames`` when it answers, else the pure-Python expansion; ``variable`` names
    where the list came from in the error for a list that is not SLURM's syntax.
    """
    hosts = scontrol_hostnames(nodelist) if use_scontrol else None
    if hosts is None:
        try:
            hosts = expand_hostlist(nodelist)
        except ValueError as exc:
            raise ClusterError(
                f"{variable}={nodelist!r} is not a SLURM host list: {exc}",
                expected="a list such as gpu[01-03,07],cpu5 (SLURM sets it; set MASTER_ADDR to bypass it)",
            ) from None
    if not hosts:
        raise ClusterError(f"{variable}={nodelist!r} names no host", expected="the job's node list, set by SLURM")
    return hosts[0]
