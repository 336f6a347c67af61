"""Limits on a YAML or JSON file's shape (configs and records), checked before anything is built.

A JSON or YAML file nested 50,000 levels deep crashes ``json.loads`` (RecursionError) and libyaml's
composer (a C stack overflow), and a few lines of YAML anchors and aliases (``&a [*a, *a, ...]``)
describe billions of nodes once anything walks them as a tree (deepcopy, MONAI's resolver, our id
walks). Both are refused here: the JSON check counts brackets outside strings, the YAML check reads
the parser's event stream (a loop, no recursion) and stops at the first event over a limit, so it
costs microseconds for a bad file and one extra parse for a good one.

A ``$`` expression (or a shape pattern of metadata) is Python text: ``parse_expression`` bounds its
length before parsing and its depth after (a 200 KB ``---...1`` overflows the parser, a 400 KB
``1+1+...`` the AST's construction), so whoever reads one gets a ConfigError, never a RecursionError.
"""

from __future__ import annotations

import ast
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
# The nodes a config file may hold as written (configs, metadata, macros' files, args files; records are not
# bounded so). Real configs hold a few thousand; a 4 MiB file of `[0,0,...]` (2 million nodes) takes 28 s
# and 850 MB to load, 200,000 nodes ~3 s.
MAX_CONFIG_NODES = 200_000
# The characters of scalars YAML aliases may add once expanded: 2,000 aliases of a 1 MB string are 2,000 nodes
# and 2 GB to print or copy (the size a config file itself may have)
MAX_ALIAS_CHARS = 16 << 20
# The digits of a number (an int or a float). Python refuses to read an int of over 4,300 digits (a ValueError
# from the parser), and one written in hex (YAML's `0xfff...`) reads but cannot be printed past ~3,570 digits;
# real configs and records hold numbers of under 30.
MAX_NUMBER_DIGITS = 1_000

# `$` expressions of real bundles are under 500 characters and nest under 20 levels; at 4,000 characters
# Python's parser (stack of 6,000) cannot overflow, and its RecursionError at ~1,000 levels is caught.
MAX_EXPRESSION_CHARS = 4_000
MAX_EXPRESSION_DEPTH = 100

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_JSON_BRACKET = re.compile(r"[\[\]{}]")
_JSON_LONG_NUMBER = re.compile(rf"(?<![0-9])[0-9]{{{MAX_NUMBER_DIGITS + 1},}}")  # from a run's start: linear
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _too_deep(where: str, how: str = "") -> ConfigError:
    return ConfigError(
        f"the file nests lists and mappings more than {MAX_DEPTH} levels deep{how}",
        where=where,
        expected=f"at most {MAX_DEPTH} levels of nesting (real configs use fewer than 30)",
    )


def _too_long(where: str, chars: int) -> ConfigError:
    return ConfigError(f"a number of {chars:,} characters is too long to read", where=where,
                       expected=f"numbers of at most {MAX_NUMBER_DIGITS:,} digits")


def check_json_depth(text: str, path: str | Path) -> None:
    """Raise ConfigError naming the line where JSON ``text`` nests deeper than MAX_DEPTH, or where it writes a
    number of more than MAX_NUMBER_DIGITS digits (``json.loads`` raises a ValueError for a long int)."""
    # JSON strings cannot hold a raw newline, so blanking them keeps every line number
    blanked = _JSON_STRING.sub('""', text)
    if len(blanked) > MAX_NUMBER_DIGITS and (long := _JSON_LONG_NUMBER.search(blanked)):
        raise _too_long(f"{path}:{blanked.count(chr(10), 0, long.start()) + 1}", len(long.group()))
    depth = 0
    for match in _JSON_BRACKET.finditer(blanked):
        if match.group() in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _too_deep(f"{path}:{blanked.count(chr(10), 0, match.start()) + 1}")
        else:
            depth -= 1


def plainly_shallow(text: str) -> bool:
    """True when YAML ``text`` can neither expand nor nest past MAX_DEPTH, seen without parsing it: no anchor or
    alias character at all, and a bound on its nesting within MAX_DEPTH: every bracket open at once, plus, for
    the deepest line, twice its indent (a block sequence may sit at its key's indent, once per indent) and its
    dashes, colons and question marks (compact nesting on one line). Nor can it hold a number over
    MAX_NUMBER_DIGITS: no line is that long. False says only: check the events."""
    if "&" in text or "*" in text:
        return False
    brackets = text.count("[") + text.count("{")  # every one open at once, at worst
    deepest = 0
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        deepest = max(deepest, 2 * (len(line) - len(stripped)) + 1 + stripped.count("-") + stripped.count(":")
                      + stripped.count("?"))
        if brackets + deepest > MAX_DEPTH or len(stripped) > MAX_NUMBER_DIGITS:
            return False
    return True


def check_yaml_shape(loader: Any, path: str | Path, max_nodes: int | None = None) -> None:
    """Read ``loader``'s events; raise ConfigError for nesting over MAX_DEPTH, aliases adding over
    MAX_ALIAS_NODES nodes, an alias inside its own anchor (a cycle), a number (as ``loader`` resolves its
    scalars) of more than MAX_NUMBER_DIGITS characters, or (``max_nodes``) more nodes as written than that.
    Disposes of ``loader``.

    ``loader`` is a fresh PyYAML loader instance (C or Python); YAML syntax errors propagate as
    ``yaml.YAMLError`` for the caller to report as it does for the composer's.
    """
    # per open collection: [anchor, total when it started, line, height, text when it started]; height 1 = no
    # nested collection
    stack: list[list[Any]] = []
    size: dict[str, int] = {}  # anchor -> nodes it stands for, expanded
    height: dict[str, int] = {}  # anchor -> collection levels it adds where an alias repeats it
    line: dict[str, int] = {}  # anchor -> line it is defined on
    total = 0  # nodes of the document so far, every alias expanded
    added = 0  # of which aliases stand for
    chars: dict[str, int] = {}  # anchor -> characters of the scalars it stands for, expanded
    text = added_text = 0  # characters of scalars so far, every alias expanded; of which aliases add
    try:
        while loader.check_event():
            event = loader.get_event()
            if max_nodes is not None and total - added > max_nodes:
                raise ConfigError(f"the file holds more than {max_nodes:,} values", where=str(path),
                                  expected=f"a config of at most {max_nodes:,} values (real ones hold a few thousand)")
            if isinstance(event, _OPEN):
                total += 1
                stack.append([event.anchor, total, event.start_mark.line + 1, 1, text])
                if len(stack) > MAX_DEPTH:
                    raise _too_deep(f"{path}:{event.start_mark.line + 1}")
            elif isinstance(event, _CLOSE):
                anchor, start, at, levels, text_start = stack.pop()
                if stack:
                    stack[-1][3] = max(stack[-1][3], levels + 1)
                if anchor is not None:
                    size[anchor], height[anchor], line[anchor] = total - start + 1, levels, at
                    chars[anchor] = text - text_start
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                text += len(event.value)
                if len(event.value) > MAX_NUMBER_DIGITS and _is_number(loader, event):
                    raise _too_long(f"{path}:{event.start_mark.line + 1}", len(event.value))
                if event.anchor is not None:
                    size[event.anchor], height[event.anchor], chars[event.anchor] = 1, 0, len(event.value)
                    line[event.anchor] = event.start_mark.line + 1
            elif isinstance(event, yaml.AliasEvent):
                _check_alias(event, stack, size, height, line, added, path)
                if event.anchor in size:  # an undefined alias is the composer's error to report
                    total += size[event.anchor]
                    added += size[event.anchor]
                    text += chars[event.anchor]
                    added_text += chars[event.anchor]
                    if added_text > MAX_ALIAS_CHARS:
                        raise ConfigError(
                            f"alias *{event.anchor} (anchor &{event.anchor} at line {line[event.anchor]}) brings the "
                            f"text that YAML aliases add to more than {MAX_ALIAS_CHARS >> 20} MiB",
                            where=f"{path}:{event.start_mark.line + 1}",
                            expected=f"aliases that add at most {MAX_ALIAS_CHARS >> 20} MiB of text in all once "
                            "expanded")
                    if stack:
                        stack[-1][3] = max(stack[-1][3], height[event.anchor] + 1)
            elif isinstance(event, yaml.DocumentStartEvent):
                stack, size, height, line, total, added = [], {}, {}, {}, 0, 0
                chars, text, added_text = {}, 0, 0
    except yaml.MarkedYAMLError as error:
        # libyaml 0.2.6+ (PyYAML 6.0.3+ wheels) stops at 1,000 flow levels in its scanner, which reads
        # ahead of the events for possible keys, so a deep flow collection ends here, not at level 101
        if "maximum nesting depth" not in str(error.problem) or error.problem_mark is None:
            raise
        raise _too_deep(f"{path}:{error.problem_mark.line + 1}") from None
    finally:
        loader.dispose()


def _is_number(loader: Any, event: yaml.ScalarEvent) -> bool:
    """Whether ``loader`` builds an int or a float of the scalar: its tag, or the one it resolves, as its
    composer does (a quoted scalar resolves to a string)."""
    tag = event.tag
    if tag is None or tag == "!":
        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
    return tag in _NUMBER_TAGS


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
    for open_anchor, _, at, *_ in stack:
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


def first_non_string_key(data: Any) -> str | None:
    """Return the first key of a mapping in ``data`` (at any level) that is not a string, shown with the id of
    the mapping that holds it (``a::b: key 1.5``); None when every key is a string. A loop, not recursion: the
    data may be any parsed file (its depth is bounded when parsed, its width is not)."""
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        where, node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    return f"{where + ': ' if where else ''}key {key!r} ({type(key).__name__})"
                stack.append((f"{where}::{key}" if where else key, value))
        elif isinstance(node, list):
            stack.extend((f"{where}::{i}" if where else str(i), v) for i, v in enumerate(node))
    return None


def yaml_syntax_error(exc: yaml.YAMLError, text: str, path: str | Path, what: str = "file",
                      error: type[ConfigError] | type = ConfigError) -> Exception:
    """Return ``error`` (a UserError) naming ``path`` and the line for any YAML error: a syntax error (with its
    marks), a character YAML does not allow (ReaderError: a control character, at a position), or any other."""
    where = str(path)
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc).splitlines()[0]
    elif isinstance(exc, yaml.reader.ReaderError):
        if isinstance(exc.position, int) and 0 <= exc.position <= len(text):
            where = f"{path}:{text.count(chr(10), 0, exc.position) + 1}"
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        problem = f"character {char}: {exc.reason}"
    else:
        problem = (str(exc).splitlines() or [type(exc).__name__])[0]
    return error(f"YAML syntax error: the {what} is not valid YAML ({problem})", where=where,
                 expected="valid YAML (no control characters outside quoted escapes)")


def compose_checked(loader_class: type, text: str, path: str | Path, max_nodes: int | None = None,
                    what: str = "file", error: type[ConfigError] | type = ConfigError) -> tuple[Any, Any]:
    """Return (node, data) of the single YAML document in ``text``, its shape checked before it is built.

    Every YAML error (a syntax error from the check or the composer, a character YAML does not allow, a second
    document) is ``error`` naming ``path`` and the line (``yaml_syntax_error``): no caller sees a yaml.YAMLError.
    """
    try:
        check_yaml_shape(loader_class(text), path, max_nodes)  # before the composer, which recurses
        loader = loader_class(text)
        try:
            node = loader.get_single_node()
            return node, (loader.construct_document(node) if node is not None else None)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise yaml_syntax_error(exc, text, path, what, error) from None


def parse_expression(text: str, mode: str = "eval", where: str | None = None) -> ast.AST:
    """Return the AST of Python ``text``, bounded: ConfigError when it is longer than MAX_EXPRESSION_CHARS,
    nests deeper than MAX_EXPRESSION_DEPTH, or is not Python (the message says which)."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ConfigError(f"the expression is {len(text):,} characters long, too long to read", where=where,
                          expected=f"an expression of at most {MAX_EXPRESSION_CHARS:,} characters")
    try:
        tree = ast.parse(text.strip(), mode=mode)
    except SyntaxError as exc:
        raise ConfigError(f"not a Python expression ({exc.msg})", where=where) from None
    except (RecursionError, MemoryError, ValueError) as exc:  # nesting the parser refuses; a NUL character
        problem = "nested too deeply" if not isinstance(exc, ValueError) else str(exc)
        raise ConfigError(f"not a Python expression ({problem})", where=where) from None
    stack = [(tree, 1)]
    while stack:  # a loop: the tree may be deeper than the interpreter's recursion limit
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise ConfigError(f"the expression nests more than {MAX_EXPRESSION_DEPTH} levels deep", where=where,
                              expected=f"at most {MAX_EXPRESSION_DEPTH} levels of nesting")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree
