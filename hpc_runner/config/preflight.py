"""Pre-flight: refuse a config that cannot start, before a run dir is made or anything is queued.

Three checks, none of which builds a component or runs a ``$`` expression:

Only what the run uses is checked: the ids the entry, the init and final ids refer to, directly or not
(with the entry given; without one, the usual entry names, else everything), and ``$import`` lines.

- every ``_target_`` imports and names a class or function (resolved as MONAI does, see
  ``registry/targets.py``, with the bundle root on ``sys.path`` so ``scripts.x.Y`` works). The answer is read
  from the modules' source where it can be (``config/static_targets.py``: no torch or MONAI import on the login
  node), else the target is imported. Each distinct target string is resolved once per :class:`PreflightCache`.
  Skipped: computed targets (``@x``, ``$...``)
  and components with ``_disabled_: true``.
- every ``$`` expression is valid Python once its ``@id`` references are replaced by
  ``__local_refs['id']`` (as MONAI's ``ReferenceResolver.update_refs_pattern`` rewrites it): an
  ``import``/``from ... import`` line parses, any other line compiles as an expression (MONAI
  ``eval()``s it). Nothing is evaluated; a missing module in an import line is left to
  ``hpc-runner verify`` (MONAI's ``optional_import`` fails only when the module is used).
- input paths exist: only values the run reads as paths (``config/input_paths.py`` says which: a path-named
  argument or top-level id, a ``*_dir``/``*_path``/``*_file`` handed to a reader, a file in a dataset's
  literal ``data``), only when they look like paths, only when what runs (the entry, the init and final
  ids, or what they refer to, directly or not) refers to them, and never when the init id makes them
  (refers to them, or repeats the value). ``--images DIR`` makes the default dataset unused; paths built
  by ``$`` code (globs, ``@bundle_root + '/x'``) cannot be known without running code and are not checked.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import META_KEY, USUAL_ENTRIES, BundleConfig
from hpc_runner.config.ids import get_by_id, has_id, iter_ids, join_id, normalize_id
from hpc_runner.config.input_paths import input_paths
from hpc_runner.config.monai_bridge import bundle_on_sys_path
from hpc_runner.config.monai_names import MonaiNames
from hpc_runner.config.overrides import Override
from hpc_runner.config.static_targets import static_verdict
from hpc_runner.config.target_verdicts import TargetVerdicts
from hpc_runner.config.values import format_value
from hpc_runner.errors import ClusterError, ConfigError, UserError
from hpc_runner.records.read import parse_json_text, read_record_text
from hpc_runner.registry.problems import Problem
from hpc_runner.registry.targets import TargetError, locate_target

FILE_SUFFIXES = (".json", ".yaml", ".yml", ".csv")
PRODUCER_ID = "initialize"
BUNDLE_ROOT_ID = "bundle_root"
_CODE_PREFIXES = ("$", "@", "%")
# the pattern of monai.bundle.ReferenceResolver.id_matcher
_REF = re.compile(r"@(?:\w*)(?:::\w*)*")
_MAX_SHOWN = 3


@dataclass
class PreflightCache:
    """What was already looked up: each distinct target and ``$`` line is checked once per cache."""

    targets: dict[tuple[str | None, str], str | None] = field(default_factory=dict)
    expressions: dict[str, str | None] = field(default_factory=dict)
    resolved: int = 0  # how many targets were looked up (read from source or imported; the rest were known)
    imported: int = 0  # how many of those had to be imported: their source alone could not tell
    remembered: int = 0  # how many resolved in an earlier command, from an unchanged package (not imported)
    verdicts: TargetVerdicts = field(default_factory=TargetVerdicts)
    monai_names: MonaiNames = field(default_factory=MonaiNames)


def _maybe_disabled(node: Mapping[str, Any]) -> bool:
    """True for ``_disabled_: true``, and for a computed one (``$``/``@``): it may be true when the job runs."""
    flag = node.get("_disabled_", False)
    if isinstance(flag, str):
        return flag.strip().lower() == "true" or flag.startswith(_CODE_PREFIXES)
    return bool(flag)


def _target_problem(target: str, bundle_dir: Path | None, cache: PreflightCache) -> str | None:
    key = (str(bundle_dir) if bundle_dir else None, target)
    if key in cache.targets:
        return cache.targets[key]

    problem = None
    with bundle_on_sys_path(bundle_dir):
        if cache.verdicts.known(target, bundle_dir):
            cache.remembered += 1
            cache.targets[key] = None
            return None
        cache.resolved += 1
        static = static_verdict(target, cache.monai_names)
        if static.decided:
            if static.problem is None:
                cache.verdicts.remember(target, bundle_dir, static.files)
            cache.targets[key] = static.problem
            return static.problem
        cache.imported += 1  # static.why says what the source could not tell
        try:
            obj = locate_target(target)
        except TargetError as exc:
            problem = f"_target_ '{target}' cannot be imported: {exc}"
        else:
            if not callable(obj) or type(obj).__name__ == "module":
                problem = f"_target_ '{target}' is not a class or function"
            else:
                cache.verdicts.remember(target, bundle_dir)
    cache.targets[key] = problem
    return problem


def substitute_refs(source: str) -> str:
    """Return a ``$`` expression's code with ``@id`` replaced by ``__local_refs['id']`` (as MONAI does)."""
    found = sorted({m for m in _REF.findall(source) if len(m) > 1}, key=len, reverse=True)
    for item in found:
        source = source.replace(item, f"__local_refs['{item[1:]}']")
    return source


# the longest `$` expression pre-flight parses: real ones are under 1,000 characters; MONAI would eval() longer
MAX_EXPRESSION_CHARS = 100_000


def expression_problem(value: str, cache: PreflightCache | None = None) -> str | None:
    """Return why a ``$`` expression cannot be evaluated by MONAI (it is not valid Python), else None."""
    cache = cache if cache is not None else PreflightCache()
    code = normalize_id(value)[1:]
    if code in cache.expressions:
        return cache.expressions[code]
    problem = None
    source = substitute_refs(code)  # MONAI rewrites the references before it parses the line
    if len(source) > MAX_EXPRESSION_CHARS:  # its AST alone would take gigabytes (a 10 MB list literal)
        problem = (f"'$' expression is {len(source):,} characters long; pre-flight checks at most "
                   f"{MAX_EXPRESSION_CHARS:,} ({_shown(value)})")
        cache.expressions[code] = problem
        return problem
    try:
        tree = ast.parse(source)  # first looking for an import statement, as ConfigExpression.evaluate
    except SyntaxError as exc:
        problem = f"'$' expression is not valid Python: {exc.msg} ({_shown(value)})"
    except (RecursionError, MemoryError, ValueError) as exc:  # 400 KB of 1+1+...: Python cannot parse it either
        why = "a NUL character" if isinstance(exc, ValueError) else "it nests too deeply"
        problem = f"'$' expression cannot be parsed by Python: {why} ({_shown(value)})"
    else:
        node = tree.body[0] if tree.body else None
        # an import line is fine once it parses: MONAI's optional_import fails only when the module is used
        if not isinstance(node, ast.Import | ast.ImportFrom):
            try:
                compile(source, "<$ expression>", "eval")
            except SyntaxError as exc:
                problem = f"'$' expression is not a Python expression: {exc.msg} ({_shown(value)})"
            except (RecursionError, MemoryError):
                problem = f"'$' expression cannot be compiled by Python: it nests too deeply ({_shown(value)})"
    cache.expressions[code] = problem
    return problem


def _shown(value: str) -> str:
    return value if len(value) <= 80 else value[:77] + "..."


def _refs(value: Any) -> set[str]:
    """The ids that ``@`` references anywhere in ``value`` name (``_meta_`` ones left out)."""
    found: set[str] = set()
    for _, v in [("", value), *(iter_ids(value) if isinstance(value, dict | list) else [])]:
        if isinstance(v, str) and "@" in v:
            found.update(m[1:] for m in _REF.findall(normalize_id(v)) if len(m) > 1 and not m[1:].startswith(META_KEY))
    return found


def _imports(value: Any) -> bool:
    """True when ``value`` is (or lists) a ``$import``/``$from`` line."""
    items = value if isinstance(value, list) else [value]
    return any(isinstance(v, str) and v.startswith(("$import ", "$from ")) for v in items)


class UsedIds:
    """The ids a run resolves: subtrees rooted at the entry, the init and final ids and every id they refer to.

    MONAI resolves a reference's own subtree only: ``@trainer#loss_function`` builds the loss, not the trainer
    around it (mednist_reg's `display` entry refers to it; the trainer's handlers name a target MONAI 1.6 lacks).
    """

    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def covers(self, id_path: str) -> bool:
        """True when ``id_path`` lies in (or is) one of the resolved subtrees."""
        parts = normalize_id(id_path).split("::")
        return any("::".join(parts[:n]) in self.roots for n in range(1, len(parts) + 1))


def _used_ids(body: dict, entry: str | None = None, init_id: str = PRODUCER_ID,
              final_id: str = "finalize") -> UsedIds | None:
    """The ids what runs (the entry, the init and final ids) resolves, following references; ``$import`` lines too.

    ``entry`` None: the usual entry names (run, training, inference, ...) count; None is returned when the
    config has none of them, and then every id counts as used, since what runs cannot be known.
    """
    if entry is not None:
        entries = [normalize_id(entry)] if has_id(body, entry) else []
    else:
        entries = [k for k in body if k in USUAL_ENTRIES]
        if not entries:
            return None
    roots = {*entries, *(k for k in (init_id, final_id) if k in body), *(k for k, v in body.items() if _imports(v))}
    used = UsedIds(set())
    todo = sorted(roots)
    while todo:
        root = todo.pop()
        if used.covers(root):
            continue
        used.roots.add(root)
        try:
            value = get_by_id(body, root)
        except (KeyError, IndexError, TypeError):
            continue
        todo += [r for r in _refs(value) if not used.covers(r)]
    return used


def _produced(body: dict, chain: list[str], value: str, init_id: str = PRODUCER_ID) -> bool:
    """True when the init steps refer to any id of ``chain`` or repeat the value."""
    if init_id not in body:
        return False
    names = {normalize_id(c) for c in chain}
    for _, v in [("", body[init_id]), *iter_ids(body[init_id])]:
        if not isinstance(v, str):
            continue
        if v == value:
            return True
        if any(m[1:] in names for m in _REF.findall(normalize_id(v))):
            return True
    return False


def _input_problem(kind: str, path: str, cwd: Path | None) -> str | None:
    p = Path(path).expanduser()
    if cwd is not None and not p.is_absolute():
        p = cwd / p
    if kind == "dir":
        if not p.is_dir():
            return f"the input folder '{path}' does not exist" if not p.exists() else f"'{path}' is not a folder"
        return None
    if kind == "file":  # a datalist: checked when it is a file type MONAI reads (json, yaml, csv)
        if path.lower().endswith(FILE_SUFFIXES) and not p.is_file():
            return f"the input file '{path}' does not exist"
        return None
    return None if p.exists() else f"the input '{path}' does not exist"


def path_problems(cfg: BundleConfig, expanded: dict, cwd: Path | None = None, entry: str | None = None
                  ) -> list[Problem]:
    """Return a problem for each input path the run reads that does not exist (``config/input_paths.py``)."""
    body = {k: v for k, v in expanded.items() if k != META_KEY}
    bundle_root = None
    if cfg.bundle_dir is not None and not cfg.recorded and not any(o.id == BUNDLE_ROOT_ID for o in cfg.overrides):
        bundle_root = str(cfg.bundle_dir.resolve())  # what prepare_run sets
    init_id, final_id = getattr(cfg, "init_id", PRODUCER_ID), getattr(cfg, "final_id", "finalize")
    used = _used_ids(body, entry, init_id, final_id)
    problems: list[Problem] = []
    seen: set[str] = set()
    lists_seen: set[tuple[str, str]] = set()
    for found in input_paths(expanded, bundle_root):
        if used is not None and not used.covers(found.used_by):
            continue  # nothing that runs refers to it: not an input of this run
        if _produced(body, found.chain, found.path, init_id):
            continue
        if found.path in seen:
            problems += datalist_problems(body, found.id_path, found.path, cwd, lists_seen)
            continue
        seen.add(found.path)
        why = _input_problem(found.kind, found.path, cwd)
        if why:
            origin = found.chain[-1] if len(found.chain) > 1 else None
            via = f" (the value of '{origin}')" if origin else ""
            problems.append(Problem(cfg.locate(found.chain[-1]), found.id_path, why + via))
        else:
            problems += datalist_problems(body, found.id_path, found.path, cwd, lists_seen)
    return problems


DATALIST_READERS = ("monai.data.load_decathlon_datalist", "load_decathlon_datalist",
                    "monai.data.decathlon_datalist.load_decathlon_datalist")
DATALIST_MAX_BYTES = 64 << 20
DATALIST_KEYS = ("image", "label")  # the keys MONAI's loader joins to base_dir (label: is_segmentation)


def datalist_problems(body: dict, id_path: str, path: str, cwd: Path | None,
                      seen: set[tuple[str, str]]) -> list[Problem]:
    """Return a problem for each file that a datalist read by ``load_decathlon_datalist`` names (its
    ``data_list_key`` list) and that is missing or unreadable: a volume deleted after ``init`` stops the job
    before it is queued, not 12 s into it. Only plain values are followed (a ``$`` base_dir is not)."""
    parent_id, _, key = id_path.rpartition("::")
    if key != "data_list_file_path" or not parent_id:
        return []
    node = get_by_id(body, parent_id) if has_id(body, parent_id) else None
    if not isinstance(node, dict) or node.get("_target_") not in DATALIST_READERS:
        return []
    list_key, base_dir = node.get("data_list_key", "training"), node.get("base_dir")
    if not isinstance(list_key, str) or (base_dir is not None and not isinstance(base_dir, str)):
        return []
    if isinstance(base_dir, str) and base_dir.startswith(_CODE_PREFIXES):
        return []
    if (path, list_key) in seen:
        return []
    seen.add((path, list_key))

    file = Path(path).expanduser()
    if cwd is not None and not file.is_absolute():
        file = cwd / file
    if not str(file).lower().endswith(".json"):
        return []
    try:
        data = parse_json_text(read_record_text(file, "datalist", DATALIST_MAX_BYTES) or "null", file, "datalist")
    except UserError as err:
        return [Problem(str(file), id_path, err.message)]
    items = data.get(list_key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    base = Path(base_dir).expanduser() if base_dir else file.parent
    if cwd is not None and not base.is_absolute():
        base = cwd / base
    problems: list[Problem] = []
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        for k in DATALIST_KEYS:
            values = item.get(k)
            for m, raw in enumerate(values if isinstance(values, list) else [values]):
                if not isinstance(raw, str) or not raw:
                    continue
                at = f"{list_key}[{n}].{k}" + (f"[{m}]" if isinstance(values, list) else "")
                target = Path(os.path.normpath(base / raw))
                if not target.is_file():
                    why = "does not exist" if not target.exists() else "is not a file"
                elif not os.access(target, os.R_OK):
                    why = "is not readable by this user"
                else:
                    continue
                problems.append(Problem(str(file), id_path, f"the datalist's {at} names '{raw}', which {why} "
                                        f"(looked for {target})"))
    return problems


def config_problems(cfg: BundleConfig, cache: PreflightCache | None = None, cwd: Path | None = None,
                    entry: str | None = None) -> list[Problem]:
    """Return every pre-flight problem of a config: targets, ``$`` expressions, input paths (nothing runs).

    Relative paths are taken from ``cwd`` (the folder the job runs in; default: this process's). ``entry`` is
    the id the run executes (default: the usual entry names the config has).
    """
    cache = cache if cache is not None else PreflightCache()
    try:
        expanded = cfg.expanded()
    except UserError as err:
        return [Problem(err.where, err.id_path, err.message)]
    body = {k: v for k, v in expanded.items() if k != META_KEY}
    problems: list[Problem] = []
    disabled: list[str] = []
    # MONAI builds and evaluates only what the run refers to: a broken component nothing uses is no reason to
    # refuse (mednist_reg's `display` entry runs although its `loss_metric` names a target MONAI 1.6 renamed)
    used = _used_ids(body, entry, getattr(cfg, "init_id", PRODUCER_ID), getattr(cfg, "final_id", "finalize"))
    for id_path, value in [("", body), *iter_ids(body)]:
        if any(id_path == d or id_path.startswith(d + "::") for d in disabled):
            continue  # MONAI never builds a disabled component, nor anything inside it
        if used is not None and id_path and not used.covers(id_path):
            continue
        if isinstance(value, dict) and "_target_" in value:
            if _maybe_disabled(value):
                disabled.append(id_path)
                continue
            target = value["_target_"]
            if isinstance(target, str) and target and not target.startswith(_CODE_PREFIXES):
                why = _target_problem(target, cfg.code_dir, cache)  # where the run puts scripts/ (MONAI's root)
                if why:
                    tid = join_id(id_path, "_target_") if id_path else "_target_"
                    problems.append(Problem(cfg.locate(tid), tid, why))
        elif isinstance(value, str) and value.startswith("$"):
            why = expression_problem(value, cache)
            if why:
                problems.append(Problem(cfg.locate(id_path), id_path, why))
    cache.verdicts.save()
    return problems + path_problems(cfg, expanded, cwd, entry)


def describe_problems(problems: list[Problem]) -> str:
    """Return the first problem's message, then the others briefly (one paragraph in all)."""
    first = problems[0]
    text = first.message.rstrip(".")
    same = [p.id_path or "?" for p in problems[1:] if p.message == first.message]
    others = [p for p in problems[1:] if p.message != first.message]
    if same:
        more = f" and {len(same) - _MAX_SHOWN} more" if len(same) > _MAX_SHOWN else ""
        text += f" (also at {', '.join(same[:_MAX_SHOWN])}{more})"
    if others:
        more = f" and {len(others) - _MAX_SHOWN} more" if len(others) > _MAX_SHOWN else ""
        text += f". Also: {'; '.join(p.line() for p in others[:_MAX_SHOWN])}{more}"
    return text


EXPECTED = "every _target_ importable, every '$' expression valid Python, every input path present"
HINT = "--no-preflight skips these checks"


def check_config(cfg: BundleConfig, cache: PreflightCache | None = None, cwd: Path | None = None,
                 entry: str | None = None) -> None:
    """Raise ConfigError (one paragraph: file:line, id, problem) when the config fails the pre-flight."""
    problems = config_problems(cfg, cache, cwd, entry)
    if problems:
        first = problems[0]
        raise ConfigError(
            f"pre-flight: {describe_problems(problems)}; nothing was started",
            where=first.where, id_path=first.id_path, expected=EXPECTED, hint=HINT,
        )


def _has_text(value: Any) -> bool:
    if isinstance(value, str):
        return True
    if isinstance(value, dict):
        return True
    if isinstance(value, list | tuple):
        return any(_has_text(v) for v in value)
    return False


def _matters(spelled_id: str, value: Any) -> bool:
    """True when an override can change a target, an expression or a path (numbers and bools cannot)."""
    return _has_text(value) or spelled_id.rsplit("::", 1)[-1] == "_disabled_"


def _label(overrides: Sequence[Override]) -> str:
    def cell(v: Any) -> str:
        try:
            return format_value(v)
        except TypeError:
            return repr(v)

    return " ".join(f"{o.spelling()}={cell(o.value)}" for o in overrides)


def check_points(
    cfg: BundleConfig,
    points: Sequence[Sequence[Override]],
    cache: PreflightCache | None = None,
    cwd: Path | None = None,
    entry: str | None = None,
) -> str:
    """Raise ClusterError naming the first sweep point that fails the pre-flight; return what was checked.

    The base config is checked once; a point gets its own check only for the overrides that can
    matter (text, lists/dicts holding text, ``_disabled_``), and each distinct set of those once.
    """
    cache = cache if cache is not None else PreflightCache()
    check_config(cfg, cache, cwd, entry)
    checked: set[str] = set()
    for n, overrides in enumerate(points):
        relevant = [o for o in overrides if _matters(o.id, o.value)]
        if not relevant:
            continue
        key = json.dumps([[o.spelling(), o.value] for o in relevant], sort_keys=True, default=repr)
        if key in checked:
            continue
        checked.add(key)
        variant = cfg.with_overrides(copy.deepcopy(relevant), check=False)
        problems = config_problems(variant, cache, cwd, entry)
        if problems:
            first = problems[0]
            raise ClusterError(
                f"pre-flight: sweep point {n} ({_label(overrides)}) cannot start, nothing was submitted: "
                f"{describe_problems(problems)}",
                where=first.where, id_path=first.id_path, expected=EXPECTED, hint=HINT,
            )
    known = f" ({cache.remembered} more known from earlier pre-flights)" if cache.remembered else ""
    return (f"pre-flight: base config and {len(checked)} distinct point config(s), "
            f"{cache.resolved} target(s) checked, {cache.imported} of them imported{known}")
