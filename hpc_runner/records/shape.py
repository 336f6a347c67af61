"""Limits on a YAML or JSON file's shape (configs and records), checked before anything is built.

A JSON or YAML file nested 50,000 levels deep crashes ``json.loads`` (RecursionError) and libyaml's
composer (a C stack overflow), and a few lines of YAML anchors and aliases (``&a [*a, *a, ...]``)
describe billions of nodes once anything walks them as a tree (deepcopy, MONAI's resolver, our id
walks). Both are refused here: the JSON check counts brackets outside strings, the YAML check reads
the parser's event stream (a loop, no recursion) and stops at the first event over a limit, so it
costs microseconds for a bad file and one extra parse for a good one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from hpc_runner.errors import ConfigError

# Real configs nest fewer than 30 levels. 100 also keeps every recursive walk (copy.deepcopy takes
# ~3 Python frames a level, MONAI's resolver more) far from Python's default recursion limit of 1,000.
MAX_DEPTH = 100
# The nodes YAML aliases may add to a document once expanded, as a deepcopy or a walk sees them.
# `hpc-runner config` on 850,000 such nodes takes 7 s and 420 MB, on 80,000 0.7 s and 56 MB; real configs
# hold a few thousand nodes in all, and the classic alias bomb expands to ~390 million.
MAX_ALIAS_NODES = 100_000

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(r"[\[\]{}]")
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _too_deep(where: str, how: str = "") -> ConfigError:
    return ConfigError(
        f"the file nests lists and mappings more than {MAX_DEPTH} levels deep{how}",
        where=where,
        expected=f"at most {MAX_DEPTH} levels of nesting (real configs use fewer than 30)",
    )


def check_json_depth(text: str, path: str | Path) -> None:
    """Raise ConfigError naming the line where JSON ``text`` nests deeper than MAX_DEPTH."""
    # JSON strings cannot hold a raw newline, so blanking them keeps every line number
    blanked = _JSON_STRING.sub('""', text)
    depth = 0
    for match in _JSON_BRACKET.finditer(blanked):
        if match.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(f"{path}:{blanked.count(chr(10), 0, match.start()) + 1}")
        else:
            depth -= 1


def check_yaml_shape(loader: Any, path: str | Path) -> None:
    """Read ``loader``'s events; raise ConfigError for nesting over MAX_DEPTH, aliases adding over
    MAX_ALIAS_NODES nodes, or an alias inside its own anchor (a cycle). Disposes of ``loader``.

    ``loader`` is a fresh PyYAML loader instance (C or Python); YAML syntax errors propagate as
    ``yaml.YAMLError`` for the caller to report as it does for the composer's.
    """
    # per open collection: [anchor, total when it started, line, height]; height 1 = no nested collection
    stack: list[list[Any]] = []
    size: dict[str, int] = {}  # anchor -> nodes it stands for, expanded
    height: dict[str, int] = {}  # anchor -> collection levels it adds where an alias repeats it
    line: dict[str, int] = {}  # anchor -> line it is defined on
    total = 0  # nodes of the document so far, every alias expanded
    added = 0  # of which aliases stand for
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, _OPEN):
                total += 1
                stack.append([event.anchor, total, event.start_mark.line + 1, 1])
                if len(stack) > MAX_DEPTH:
                    raise _too_deep(f"{path}:{event.start_mark.line + 1}")
            elif isinstance(event, _CLOSE):
                anchor, start, at, levels = stack.pop()
                if stack:
                    stack[-1][3] = max(stack[-1][3], levels + 1)
                if anchor is not None:
                    size[anchor], height[anchor], line[anchor] = total - start + 1, levels, at
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                if event.anchor is not None:
                    size[event.anchor], height[event.anchor] = 1, 0
                    line[event.anchor] = event.start_mark.line + 1
            elif isinstance(event, yaml.AliasEvent):
                _check_alias(event, stack, size, height, line, added, path)
                if event.anchor in size:  # an undefined alias is the composer's error to report
                    total += size[event.anchor]
                    added += size[event.anchor]
                    if stack:
                        stack[-1][3] = max(stack[-1][3], height[event.anchor] + 1)
            elif isinstance(event, yaml.DocumentStartEvent):
                stack, size, height, line, total, added = [], {}, {}, {}, 0, 0
    except yaml.MarkedYAMLError as error:
        # libyaml 0.2.6+ (PyYAML 6.0.3+ wheels) stops at 1,000 flow levels in its scanner, which reads
        # ahead of the events for possible keys, so a deep flow collection ends here, not at level 101
        if "maximum nesting depth" not in str(error.problem) or error.problem_mark is None:
            raise
        raise _too_deep(f"{path}:{error.problem_mark.line + 1}") from None
    finally:
        loader.dispose()


def _check_alias(
    event: yaml.AliasEvent,
    stack: list[list[Any]],
    size: dict[str, int],
    height: dict[str, int],
    line: dict[str, int],
    added: int,
    path: str | Path,
) -> None:
    anchor = event.anchor
    where = f"{path}:{event.start_mark.line + 1}"
    for open_anchor, _, at, _ in stack:
        if open_anchor == anchor:
            raise ConfigError(
                f"alias *{anchor} is inside the node it refers to (anchor &{anchor} at line {at}), "
                "so the config would contain itself",
                where=where,
                expected="aliases that refer to a node defined and closed before them",
            )
    if anchor not in size:
        return
    if len(stack) + height[anchor] > MAX_DEPTH:
        raise _too_deep(where, f" once alias *{anchor} (anchor &{anchor} at line {line[anchor]}) is expanded")
    if added + size[anchor] > MAX_ALIAS_NODES:
        raise ConfigError(
            f"alias *{anchor} (anchor &{anchor} at line {line[anchor]} stands for {size[anchor]:,} nodes) "
            f"brings the nodes that YAML aliases add to more than {MAX_ALIAS_NODES:,} (an alias bomb?)",
            where=where,
            expected=f"aliases that add at most {MAX_ALIAS_NODES:,} nodes in all once expanded",
        )


def compose_checked(loader_class: type, text: str, path: str | Path) -> tuple[Any, Any]:
    """Return (node, data) of the single YAML document in ``text``, its shape checked before it is built.

    YAML syntax errors propagate as ``yaml.YAMLError`` (from the check or the composer), with their marks.
    """
    check_yaml_shape(loader_class(text), path)  # before the composer, which recurses
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()
