"""Read a run record's ``status`` and job id from its lines, without building the whole YAML document.

``status`` and ``collect`` of a 10,000-point sweep read every point's run.yaml for these two fields; the
safe loader took ~1.3 s of the ~3 s. The lines are read only when the text is plainly what
``records/rundir.dump_yaml`` writes, in a grammar small enough to show that the safe loader reads the same:

- every line at column 0 is ``key: value`` or ``key:`` (a plain ASCII key, each key once): no comment, document
  marker, directive, complex key, sequence or flow collection that spans lines; every other line is indented;
- a top-level value that could go on past its line in a way that is not indented (a quoted scalar that does not
  close on its line, a flow collection other than ``[]``/``{}``) or that points elsewhere (anchor, alias, tag)
  declines;
- ``status`` and ``job: id`` are plain ASCII words that YAML's own resolver (the safe loader's) reads as text
  (``id`` also as a whole number written as its digits), or quoted words without escapes, alone on their line
  and not continued on the next (a more indented line after them declines);
- ``job``'s block is indented by two spaces, its keys plain, ``id`` once, and no merge key (``<<``);
- no character YAML reads otherwise than ``str.splitlines`` (``\\r``, NEL, U+2028/9) or refuses (other controls, BOM).

Anything else returns None and the caller parses the record whole, so a hand-edited record is read as before.
The fast path never looks at text it skips (the inside of indented values): a document that the loader refuses
there is read here, as it would be by a reader that stops after the fields it needs.
"""

from __future__ import annotations

import re

from yaml import ScalarNode
from yaml.resolver import Resolver

_TOP_KEY = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*):(?: (.*))?")  # fullmatch: no "$" (it takes a trailing newline)
_CHILD = re.compile(r"  ([A-Za-z_][A-Za-z0-9_-]*):(?: (.*))?")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
_QUOTED = re.compile(r"'([A-Za-z0-9_.-]*)'|\"([A-Za-z0-9_.-]*)\"")
_DIGITS = re.compile(r"[1-9][0-9]*|0")
_SINGLE = re.compile(r"'(?:[^']|'')*'")
_DOUBLE = re.compile(r'"(?:[^"\\]|\\.)*"')
_BLOCK = re.compile(r"[|>](?:[1-9][+-]?|[+-][1-9]?)?")
# what YAML reads as a line break or refuses, where str.splitlines differs or the loader raises
_ODD = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x84\x86-\x9f\u2028\u2029\ufeff\ufffe\uffff\x85]")
_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_NULL = "tag:yaml.org,2002:null"
_RESOLVER = Resolver()

_UNSURE = object()


def _scalar(text: str | None, *, number: bool = False) -> object:
    """The string a plain or quoted word means; None for an empty or null value; _UNSURE for anything else.

    A plain word is what the safe loader's resolver reads as text; with ``number``, a whole number written as its
    digits too (as its digits: a job id the loader gives as an int)."""
    if text is None or text == "":
        return None
    m = _QUOTED.fullmatch(text)
    if m:
        return m.group(1) if m.group(1) is not None else m.group(2)
    if not _PLAIN_WORD.fullmatch(text):
        return _UNSURE
    tag = _RESOLVER.resolve(ScalarNode, text, (True, False))
    if tag == _STR:
        return text
    if tag == _NULL:
        return None
    if number and tag == _INT and _DIGITS.fullmatch(text):
        return text
    return _UNSURE


def _value_stays_on_its_line(value: str | None) -> bool:
    """Whether a top-level value other than status/job is plainly one line's: no anchor, alias or tag, a quoted
    scalar closed on the line, no flow collection but an empty one."""
    if value is None or value == "":
        return True
    first = value[0]
    if first in "&*!%@`":
        return False
    if first == "'":
        return _SINGLE.fullmatch(value) is not None
    if first == '"':
        return _DOUBLE.fullmatch(value) is not None
    if first in "[{":
        return value in ("[]", "{}")
    if first in "|>":  # a block scalar: its lines are indented; a comment or anything else after it declines
        return _BLOCK.fullmatch(value) is not None
    if first in "-?:":  # plain only when a non-space follows: else a sequence, a complex key, an empty key
        return value[1:2] not in ("", " ") and ": " not in value and not value.endswith(":")
    if first in ",]}#":
        return False
    return ": " not in value and not value.endswith(":")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def run_head(text: str) -> tuple[str | None, str | None] | None:
    """Return ``(status, job id)`` of run.yaml text as hpc-runner writes it (each None when absent), or None
    when the text is not plainly that and must be parsed whole."""
    if _ODD.search(text) or "\r" in text:
        return None
    lines = text.split("\n")
    seen: set[str] = set()
    status: object = None
    job_id: object = None
    in_job = False
    job_keys: set[str] = set()
    watch = -1  # the indent of the line just read whose value must not go on (status, job id); -1: none
    for line in lines:
        if not line.strip(" "):
            continue
        indent = _indent(line)
        if watch >= 0:
            if indent > watch:
                return None  # the value of status or id goes on over more lines
            watch = -1
        if indent:
            if not seen:
                return None  # the document does not start with a key at column 0
            if in_job:
                if indent == 1:
                    return None
                if indent == 2:
                    m = _CHILD.fullmatch(line)
                    if m is None or m.group(1) in job_keys:
                        return None  # a list, a merge key, a complex key, a key twice: parse it whole
                    job_keys.add(m.group(1))
                    if m.group(1) == "id":
                        job_id = _scalar(m.group(2), number=True)
                        watch = 2
            continue
        m = _TOP_KEY.fullmatch(line)
        if m is None or m.group(1) in seen:
            return None  # a comment, a document marker, a flow or complex key, a key written twice
        key, value = m.group(1), m.group(2)
        seen.add(key)
        in_job = False
        if key == "status":
            status = _scalar(value)
            watch = 0
        elif key == "job":
            if value not in (None, ""):
                return None  # ``job: {...}``, an alias, a tag: not what dump_yaml writes
            in_job = True
        elif not _value_stays_on_its_line(value):
            return None
    if status is _UNSURE or job_id is _UNSURE:
        return None
    return status, job_id  # type: ignore[return-value]
