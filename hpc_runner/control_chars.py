"""Control characters: what ends or splits a line for bash, sbatch or a terminal, in text we did not write."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and Unicode's line and paragraph separators
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def find_control_character(text: str) -> tuple[int, str] | None:
    """Return the position and the first control character in ``text``, or None."""
    m = CONTROL.search(text)
    return (m.start(), m.group()) if m else None
