"""Control characters: what ends or splits a line for bash, sbatch or a terminal, in text we did not write."""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and Unicode's line and paragraph separators
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def find_control_character(text: str) -> tuple[int, str] | None:
    """Return the position and the first control character in ``text``, or None."""
    m = CONTROL.search(text)
    return (m.start(), m.group()) if m else None


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# what a terminal may see of text we did not write: a newline and a tab; every other control (an escape sequence
# that sets the title, moves the cursor or writes the clipboard; a carriage return that hides a line) shown as \xNN
_NOT_SHOWN = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NOT_SHOWN_BUT_CR = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def printable(text: str, *, keep_cr: bool = False) -> str:
    """Return ``text`` with each control character but newline and tab written as a visible escape (``\\x1b``);
    bidirectional overrides too (they reorder what a terminal shows). ``keep_cr``: a carriage return stays (a
    progress bar's redraw on stderr)."""
    pattern = _NOT_SHOWN_BUT_CR if keep_cr else _NOT_SHOWN
    return pattern.sub(_shown, text) if pattern.search(text) else text


class PrintableStream:
    """A text stream that writes everything through ``printable``: the CLI's stdout and stderr while a command
    runs, so no text read from a record, a log, a bundle or a scheduler reaches the terminal with its control
    characters, whichever ``print`` it takes. What hpc-runner itself means as a control (``report --watch``
    clearing the screen, its progress bar) is written to ``unfiltered``. stderr keeps carriage returns
    (``keep_cr``): tqdm's bars, MONAI's among them, redraw with them on a terminal; an error paragraph is made
    ``printable`` whole before it is written."""

    def __init__(self, inner, *, keep_cr: bool = False) -> None:
        self.unfiltered = inner
        self.keep_cr = keep_cr

    def write(self, text: str) -> int:
        self.unfiltered.write(printable(text, keep_cr=self.keep_cr))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):  # flush, fileno, isatty, encoding, buffer, reconfigure ...
        return getattr(self.unfiltered, name)
