"""Numbers from outside (a scheduler's answer, an environment variable, a kept cache, a file name): one parser.

``str.isdigit()`` is true of '²', '١' and '𝟗' as well as of '9', and ``int()`` then raises (``int('²')``)
or reads an Arabic-Indic '١' as 1; ``re``'s ``\\d`` matches every Unicode digit too; ``$`` in a pattern
matches before a final newline. Text from outside becomes a number here only: ASCII digits ``0-9`` (a
pattern anchored with ``\\A...\\Z``), at most ``MAX_DIGITS`` of them, within ``[low, high]``; anything else
is None (``outside_int``) or a UserError naming where it came from (``require_int``).
"""

from __future__ import annotations

import re

from hpc_runner.errors import UserError

MAX_DIGITS = 18  # below 2**63: every count, size, id and limit a scheduler or a kernel prints
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1  # the whole numbers torch, numpy and the schedulers take
_ASCII_WHITESPACE = " \t\r\n"
_INT = re.compile(rf"\A[0-9]{{1,{MAX_DIGITS}}}\Z")
DIGITS = frozenset("0123456789")


def is_ascii_digits(text: object) -> bool:
    """True when ``text`` is a non-empty string of ASCII digits only (what ``str.isdigit`` is not)."""
    return isinstance(text, str) and bool(text) and len(text) <= 4 * MAX_DIGITS and all(c in DIGITS for c in text)


def starts_with_digit(text: object) -> bool:
    """True when ``text`` is a string whose first character is an ASCII digit (a scheduler's job id)."""
    return isinstance(text, str) and text[:1] in DIGITS


def outside_int(text: object, low: int = 0, high: int = (1 << 63) - 1) -> int | None:
    """Return the whole number ``text`` writes (ASCII digits, surrounding ASCII spaces allowed) when it lies in
    ``[low, high]``; None for anything else: not a string, empty, a sign, Unicode digits, too long, out of range."""
    if not isinstance(text, str) or len(text) > 4 * MAX_DIGITS:
        return None
    stripped = text.strip(_ASCII_WHITESPACE)
    if not _INT.match(stripped):
        return None
    value = int(stripped)
    return value if low <= value <= high else None


def require_int(text: object, where: str, what: str = "number", low: int = 0, high: int = (1 << 63) - 1) -> int:
    """Return ``outside_int(text, low, high)``; a UserError naming ``where`` when it is None."""
    value = outside_int(text, low, high)
    if value is None:
        shown = repr(text)[:60]
        raise UserError(f"the {what} {shown} is not a whole number from {low} to {high} in ASCII digits",
                        where=where, expected=f"a {what} written with the digits 0-9")
    return value


def leading_int(text: object, default: int = 0) -> int:
    """Return the ASCII digits ``text`` starts with as a number (``'23081+'`` -> 23081; none: ``default``)."""
    if not isinstance(text, str):
        return default
    stripped = text.strip(_ASCII_WHITESPACE)
    n = 0
    while n < len(stripped) and n < MAX_DIGITS and stripped[n] in DIGITS:
        n += 1
    return int(stripped[:n]) if n else default


_DECIMAL = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?\Z")


def require_decimal(text: object, where: str, what: str = "number", low: float = 0.0,
                    high: float = 1e12) -> float:
    """Return ``text`` (ASCII digits with at most one ``.``, or a plain int/float) as a float within [low, high];
    a UserError naming ``where`` otherwise (``nan``, ``1e9``, ``١٢`` and ``-1`` are refused)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        value = None
    elif isinstance(text, str):
        stripped = text.strip(_ASCII_WHITESPACE)
        value = float(stripped) if _DECIMAL.match(stripped) else None
    else:
        value = float(text) if text == text and abs(text) < 1e15 else None
    if value is None or not low <= value <= high:
        raise UserError(f"the {what} {repr(text)[:60]} is not a number from {low:g} to {high:g} in ASCII digits",
                        where=where, expected=f"a {what} such as 2 or 0.5")
    return value
