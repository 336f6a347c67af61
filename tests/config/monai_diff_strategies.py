"""Hypothesis strategies for the differential test of our MONAI config rules (issue 48).

A generated *case* is a bundle as `hpc-runner run` (and `python -m monai.bundle run`) takes it: several config
files merged in order (``+key`` merges, ``a::b``/``a#b`` keys set nested ids), an optional ``metadata.json``, a
macro file (``other.json``) for ``%other.json::id`` macros, an optional ``--args_file`` and command-line
overrides ``--a::b VALUE`` / ``--a#b VALUE``. Its values are nested dicts and lists of plain values, ``@id``
references (absolute and relative, both separators), ``%`` macros (to an id, to another file), ``$`` expressions
that refer to ids, and ``_target_`` components naming real MONAI/torch objects, modules, plain attributes and
names that do not exist.

Keys and ids are drawn from a small alphabet so that references, macros and overrides often hit an existing id
(and sometimes do not: both outcomes are compared).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml
from hypothesis import strategies as st

from hpc_runner.config.ids import iter_ids, normalize_id
from hpc_runner.config.values import format_value, parse_value

KEYS = ["a", "b", "c", "net", "lr"]
INDICES = ["0", "1"]
SEPS = ["::", "#"]
MACRO_FILE = "other.json"

# `_target_`s: bare MONAI component names, dotted MONAI/torch classes and functions, modules (not a class or
# function), plain attributes, and names that resolve to nothing
TARGETS = [
    "UNet", "Compose", "LoadImaged", "DiceLoss", "ScaleIntensityd", "NoSuchComponent", "Unetx",
    "monai.networks.nets.UNet", "monai.transforms.Compose", "monai.losses.DiceLoss",
    "monai.networks.nets.NoSuchNet", "monai.transforms", "monai.utils.set_determinism",
    "torch.optim.Adam", "torch.nn.Identity", "torch.nn.functional.relu", "torch.nn", "torch.nn.Nope", "os.path.nope",
    "nosuchpackage.Thing", "collections.OrderedDict", "os.path.join", "os.path", "json.dumps", "math.pi",
    "dict", "len", "print",
]

# plain strings, some with the characters the rules treat specially (`#`, `@`, `%`, `::`) where they do not
# start a reference, macro or expression
PLAIN_STRINGS = ["x", "hello world", "a#b", "user@host", "50 %", "::", "hello #1", "@@", "cpu", "", "a::b"]


def _id(keys: list[str], seps: list[str]) -> str:
    out = keys[0]
    for sep, key in zip(seps, keys[1:], strict=False):
        out += sep + key
    return out


@st.composite
def id_paths(draw: st.DrawFn, *, min_keys: int = 1, max_keys: int = 3) -> str:
    """An id path such as ``a``, ``net::0``, ``a#b::c`` (either separator between keys)."""
    n = draw(st.integers(min_keys, max_keys))
    keys = [draw(st.sampled_from(KEYS))] + [draw(st.sampled_from(KEYS + INDICES)) for _ in range(n - 1)]
    seps = [draw(st.sampled_from(SEPS)) for _ in range(n - 1)]
    return _id(keys, seps)


@st.composite
def ref_ids(draw: st.DrawFn) -> str:
    """What follows ``@``/``%``: an absolute id, or a relative one (``::x`` sibling, ``::::x`` uncle, ``#x``)."""
    if draw(st.integers(0, 3)) == 0:
        levels = draw(st.integers(1, 3))
        sep = draw(st.sampled_from(SEPS))
        return sep * levels + draw(SHORT_IDS)
    if draw(st.integers(0, 12)) == 0:
        return draw(st.sampled_from(["_meta_::name", "_meta_#version"]))
    return draw(ID_PATHS)


REF_IDS = ref_ids()
ID_PATHS = id_paths()
SHORT_IDS = id_paths(max_keys=2)
NESTED_IDS = id_paths(min_keys=2, max_keys=3)


def _ref(draw: st.DrawFn) -> str:
    return "@" + draw(REF_IDS)


EXPRESSIONS = [
    "${0} + 1",
    "$len({0})",
    "$[{0}, {1}]",
    "$str({0}) + '@'",  # a bare `@` (no id after it) in an expression
    "$'{{}}'.format({0}) if {1} else None",
    "$dict(x={0})",
    "$1 + 2",
    "$'a#b'",
]


@st.composite
def expressions(draw: st.DrawFn) -> str:
    """A ``$`` expression that refers to ids (``$@a + 1``, ``$len(@net::0)``)."""
    template = draw(st.sampled_from(EXPRESSIONS))
    return template.format(_ref(draw), _ref(draw))


@st.composite
def macros(draw: st.DrawFn) -> str:
    """``%id``, ``%::sibling``, ``%other.json::id``, ``%other.json#id`` or the whole ``%other.json``."""
    kind = draw(st.integers(0, 4))
    if kind <= 1:
        return "%" + draw(REF_IDS)
    if kind == 4:
        return "%" + MACRO_FILE
    return "%" + MACRO_FILE + draw(st.sampled_from(SEPS)) + draw(SHORT_IDS)


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.integers(-3, 64),
        st.sampled_from([0.5, 1e-3, -2.25]),
        st.booleans(),
        st.none(),
        st.sampled_from(PLAIN_STRINGS),
    )


def leaves() -> st.SearchStrategy[Any]:
    return st.one_of(
        scalars(),
        st.builds(lambda r: "@" + r, REF_IDS),
        st.builds(lambda r: "@" + r, REF_IDS),
        MACROS,
        EXPRESSIONS_ST,
    )


def _dict_key() -> st.SearchStrategy[str]:
    # mostly the common alphabet; rarely a key holding a separator (MONAI's ids join keys as text)
    return st.one_of(st.sampled_from(KEYS), st.sampled_from(KEYS), st.sampled_from(["x::y", "p#q", "0"]))


def _component(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict]:
    return st.builds(
        lambda target, args: {"_target_": target, **args},
        st.one_of(st.sampled_from(TARGETS), st.builds(lambda r: "@" + r, REF_IDS)),
        st.dictionaries(st.sampled_from(KEYS), children, max_size=2),
    )


def values(max_leaves: int = 8) -> st.SearchStrategy[Any]:
    """Nested dicts, lists and components over :func:`leaves`."""
    return st.recursive(
        leaves(),
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.dictionaries(_dict_key(), children, max_size=3),
            _component(children),
        ),
        max_leaves=max_leaves,
    )


def _top_key(first: bool) -> st.SearchStrategy[str]:
    """A top-level key of a config file; after the first file also ``+key`` (merge) and ``a::b`` (nested id)."""
    if first:
        return st.sampled_from(KEYS)
    # a nested id fails to merge when its parent is missing: drawn one time in eight
    return st.integers(0, 7).flatmap(
        lambda n: NESTED_IDS if n == 0 else st.builds(lambda k: "+" + k, st.sampled_from(KEYS)) if n <= 2
        else st.sampled_from(KEYS)
    )


SCALARS = scalars()
MACROS = macros()
EXPRESSIONS_ST = expressions()
VALUES = values()
SMALL_VALUES = values(max_leaves=4)
FIRST_FILES = st.dictionaries(_top_key(True), VALUES, min_size=1, max_size=4)
LATER_FILES = st.dictionaries(_top_key(False), VALUES, min_size=1, max_size=4)


@dataclass
class Case:
    """One generated bundle: files (name -> content) in merge order, metadata, macro file, overrides."""

    files: list[tuple[str, dict]]
    meta: dict | None
    macro_file: Any
    args_file: tuple[str, dict] | None
    cli: list[tuple[str, Any]] = field(default_factory=list)  # (id as typed, value)

    def cli_tokens(self) -> list[str]:
        """The override tokens as typed on `hpc-runner run`: ``--a::b VALUE`` or ``--a#b=VALUE``."""
        tokens: list[str] = []
        for i, (key, value) in enumerate(self.cli):
            text = format_value(value)
            tokens += [f"--{key}={text}"] if i % 2 else [f"--{key}", text]
        return tokens

    def write(self, folder: Any) -> tuple[list[str], str | None]:
        """Write the files into ``folder``; return the config file paths and the args file path."""
        paths = []
        for name, content in self.files:
            paths.append(str(folder / name))
            (folder / name).write_text(_dump(name, content))
        if self.meta is not None:
            (folder / "metadata.json").write_text(json.dumps(self.meta))
        (folder / MACRO_FILE).write_text(json.dumps(self.macro_file))
        args = None
        if self.args_file is not None:
            name, content = self.args_file
            args = str(folder / name)
            (folder / name).write_text(_dump(name, content))
        return paths, args


def _dump(name: str, content: Any) -> str:
    if name.endswith(".json"):
        return json.dumps(content, indent=1)
    return yaml.safe_dump(content, sort_keys=False)


def _cli_value_ok(value: Any) -> bool:
    """A value both ways of typing a command line read the same way (ours YAML 1.2, MONAI's fire Python)."""
    if value is None:  # MONAI's update_kwargs drops a None override (`--x None` does nothing): ours sets null
        return False
    try:
        return parse_value(format_value(value)) == value
    except Exception:
        return False


@st.composite
def _override_value(draw: st.DrawFn, existing: dict[str, Any], key: str) -> Any:
    """A value for an override: for an existing id mostly one of the same kind (our type check refuses a
    list for a number, MONAI takes anything: that difference is deliberate and not what this test probes)."""
    old = existing.get(normalize_id(key))
    pick = draw(st.integers(0, 9))
    if pick == 0:
        return _ref(draw)
    if pick == 1:
        return draw(EXPRESSIONS_ST)
    if pick == 2:
        return draw(MACROS)
    if isinstance(old, bool):
        return draw(st.booleans())
    if isinstance(old, int | float):
        return draw(st.one_of(st.integers(-3, 64), st.sampled_from([0.5, 1e-3])))
    if isinstance(old, dict):
        return draw(st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=2))
    if isinstance(old, list):
        return draw(st.lists(SCALARS, max_size=2))
    return draw(SMALL_VALUES)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A bundle of 1-3 config files, metadata, a macro file, an args file and command-line overrides."""
    n_files = draw(st.integers(1, 3))
    files: list[tuple[str, dict]] = []
    for i in range(n_files):
        content = draw(FIRST_FILES if i == 0 else LATER_FILES)
        suffix = draw(st.sampled_from([".json", ".yaml"]))
        files.append((f"c{i}{suffix}", content))
    meta = draw(st.one_of(st.none(), st.just({"name": "tiny", "version": "0.1.0"})))
    if draw(st.integers(0, 9)) == 0:  # a config file that sets _meta_ itself
        files[0][1]["_meta_"] = {"name": "from-config"}
    macro_file = draw(st.dictionaries(st.sampled_from(KEYS), SMALL_VALUES, min_size=1, max_size=3))

    # overrides name existing ids (of the files' plain merge) most of the time, else any id
    merged: dict = {}
    for _, content in files:
        for k, v in content.items():
            if "::" not in k and "#" not in k and not k.startswith("+"):
                merged[k] = v
    existing = dict(iter_ids(merged))
    known = sorted(existing)

    def override_key() -> str:
        if known and draw(st.integers(0, 2)):
            key = draw(st.sampled_from(known))
            return key.replace("::", "#") if draw(st.booleans()) else key
        return draw(ID_PATHS)

    args_file = None
    if draw(st.booleans()):
        pairs = {}
        for _ in range(draw(st.integers(1, 3))):
            key = override_key()
            pairs[key] = draw(_override_value(existing, key))
        args_file = ("args" + draw(st.sampled_from([".json", ".yaml"])), pairs)
    cli: list[tuple[str, Any]] = []
    args_keys = sorted(args_file[1]) if args_file else []
    for _ in range(draw(st.integers(0, 3))):
        # a key the args file has too one time in three: MONAI merges the two (update_kwargs)
        key = draw(st.sampled_from(args_keys)) if args_keys and not draw(st.integers(0, 2)) else override_key()
        if any(k == key for k, _ in cli):  # fire keeps one value per option
            continue
        value = draw(_override_value(existing, key))
        if _cli_value_ok(value):
            cli.append((key, value))
    return Case(files, meta, macro_file, args_file, cli)
