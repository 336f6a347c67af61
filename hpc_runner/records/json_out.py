"""JSON that hpc-runner writes (``--json`` documents, records): one serializer, always valid JSON.

``json.dumps`` writes ``NaN``, ``Infinity`` and ``-Infinity`` for non-finite floats by default, which no
strict JSON reader (``jq``, JavaScript's ``JSON.parse``, Go) accepts. Here a non-finite float becomes
``null`` (a loss that diverged is "no number", not a crash of ``status --json``) and the text is then
written with ``allow_nan=False``, so nothing non-finite can slip through a path this walk does not know.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from collections.abc import Iterator
from typing import Any


def finite_json(value: Any) -> Any:
    """Return ``value`` with every non-finite float (in dicts, lists and tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value



def json_copy(value: Any) -> Any:
    """Return a copy of our own ``value`` as JSON gives it back (lists for tuples, text keys); a scalar as it is."""
    return json.loads(json.dumps(value)) if isinstance(value, dict | list) else value

def dumps_json(value: Any, **options: Any) -> str:
    """Return ``value`` as strict JSON text (non-finite floats as null); ``options`` as for ``json.dumps``
    (``indent``, ``sort_keys``, ``default``...), but ``allow_nan`` is always False."""
    options.pop("allow_nan", None)
    default = options.get("default")
    if default is not None:  # what ``default`` makes of an unknown object may hold non-finite floats too
        options["default"] = lambda obj: finite_json(default(obj))
    return json.dumps(finite_json(value), allow_nan=False, **options)


def print_json(value: Any, **options: Any) -> None:
    """Print ``value`` as one strict JSON document on stdout: what every ``--json`` prints."""
    print(dumps_json(value, **options), flush=True)


@contextlib.contextmanager
def prose_to_stderr(active: bool = True) -> Iterator[None]:
    """While ``active`` (a command's ``--json``), send what is printed to stdout to stderr instead: Python's
    ``print`` and, where stdout is a file descriptor, the output of child processes too; so that stdout holds
    only the JSON document printed after."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = None
    try:
        out_fd, err_fd = sys.stdout.fileno(), sys.stderr.fileno()
        sys.stderr.flush()
        saved = os.dup(out_fd)
        os.dup2(err_fd, out_fd)
    except (AttributeError, OSError, ValueError):  # a stdout that is no descriptor (pytest's capsys, a StringIO)
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, out_fd)
            os.close(saved)
