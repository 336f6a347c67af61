"""A profile's scheduler settings, read value by value in our words: the checks every backend's settings.py makes
before a value can reach a job script (one value on one line, a name of the characters its scheduler takes, a
whole number in range, a size, true or false, no misspelled key).

Each function returns the value as the backend keeps it, or raises a ClusterError naming the key (and the
profile, ``where``) and what was expected; the backend says which keys it has and which pattern its names follow.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from hpc_runner.control_chars import find_control_character
from hpc_runner.errors import ClusterError
from hpc_runner.records.numbers import outside_int
from hpc_runner.scheduler.units import parse_size_bytes

MAX_SIZE_BYTES = 1 << 60
NAME = re.compile(r"[A-Za-z0-9_.+-]{1,64}")  # a queue, an account, a project: what every scheduler here takes


def refuse_unknown(values: Mapping[str, Any], known: Collection[str], scheduler: str, where: str | None) -> None:
    """ClusterError listing the valid keys when ``values`` holds one that is not ``known`` (a misspelling)."""
    unknown = sorted(str(k)[:40] for k in values if k not in known)
    if unknown:
        raise ClusterError(f"unknown {scheduler} setting(s) {', '.join(unknown)}", where=where,
                           expected=f"one of {', '.join(sorted(known))}")


def one_line(value: Any, key: str, where: str | None) -> str:
    """Return a single value (text or a number) as text; ClusterError for a list, a mapping, a bool, or text with a
    control character."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ClusterError(f"{key}: {value!r} is not a single value", where=where, expected="text or a number")
    text = str(value)
    found = find_control_character(text)
    if found:
        raise ClusterError(f"{key} {text[:60]!r} holds a control character at position {found[0]}", where=where,
                           expected=f"{key} on one line")
    return text


def name_of(value: Any, key: str, scheduler: str, where: str | None, pattern: re.Pattern[str] = NAME,
            characters: str = "letters, digits and _ . + - (at most 64)") -> str:
    """Return a name (a queue, a project) that ``pattern`` takes (by default ``NAME``); ClusterError saying which
    ``characters`` it may hold."""
    text = one_line(value, key, where)
    if not pattern.fullmatch(text):
        raise ClusterError(f"{key} {text[:60]!r} is not a name {scheduler} takes", where=where, expected=characters)
    return text


def whole_number(value: Any, key: str, low: int, high: int, where: str | None) -> int:
    """Return a whole number from ``low`` to ``high`` (an int, or ASCII digits); ClusterError for anything else."""
    number = value if isinstance(value, int) and not isinstance(value, bool) else outside_int(one_line(value, key,
                                                                                                        where))
    if number is None or not low <= number <= high:
        raise ClusterError(f"{key} {value!r} is not a whole number from {low} to {high}", where=where,
                           expected=f"{key} written with the digits 0-9")
    return number


def size_bytes(value: Any, key: str, where: str | None) -> int:
    """Return a size (``32G``, ``32gb``, ``512M``) in bytes; ClusterError for anything else."""
    text = one_line(value, key, where).strip()
    size = parse_size_bytes(re.sub(r"(?i)(?<=[kmgtp])b\Z", "", text))  # schedulers write 32gb, profiles 32G
    if size is None or not 1 <= size <= MAX_SIZE_BYTES:
        raise ClusterError(f"{key} {text[:60]!r} is not a size", where=where, expected="a size such as 32G or 32gb")
    return int(size)


def true_or_false(value: Any, key: str, where: str | None) -> bool:
    """Return a flag; ClusterError for anything but true or false."""
    if not isinstance(value, bool):
        raise ClusterError(f"{key} must be true or false", where=where, expected="true or false")
    return value
