"""Check every config file of a bundle without running it: loads, merges, references, ``_target_`` imports.

``configs/train.*`` is the main config. Every other ``configs/*.json|yaml`` whose top level is a mapping
is a config too: it is checked on its own (``inference.json``), else merged over the main config
(``multi_gpu_train.json``, ``evaluate.json``), else over the main config and the file it extends
(``multi_gpu_evaluate.json`` over train + evaluate), or over the file its name extends
(``inference_trt.json`` over ``inference.json``), whichever works; when none does, the problems of
the most likely one are reported. Every problem is collected, none stops the others.
"""

from __future__ import annotations

import importlib.util
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import META_KEY, BundleConfig, logging_file_for
from hpc_runner.config.env import expand_env_refs, has_env_refs
from hpc_runner.config.ids import has_id, iter_ids, join_id, set_by_id
from hpc_runner.config.loader import SUFFIXES, load_file
from hpc_runner.config.merge import merge_files
from hpc_runner.config.monai_bridge import bundle_on_sys_path
from hpc_runner.config.overrides import suggest_ids
from hpc_runner.config.references import check_references, refs_in_string
from hpc_runner.errors import UserError
from hpc_runner.registry.problems import Problem
from hpc_runner.registry.targets import TargetError, import_statement_modules, locate_target

MAIN_STEMS = ("train", "inference")
ENTRY_IDS = ("run", "training")  # `run` (MONAI's default) or the legacy `training`
NON_ARG_KEYS = frozenset({"_target_", "_disabled_", "_requires_", "_desc_", "_mode_"})
_EXPR_PREFIXES = ("$", "@", "%")


def problem_from_error(err: UserError) -> Problem:
    """Turn a ConfigError/BundleError into a Problem (same file:line, id and message)."""
    message = err.message + (f" (expected {err.expected})" if err.expected else "")
    return Problem(err.where, err.id_path, message)


@dataclass
class ConfigSet:
    """Config files merged in order, as ``--config_file a,b`` would; the last one is the file checked."""

    files: list[Path]
    cfg: BundleConfig | None = None
    problems: list[Problem] = field(default_factory=list)
    load_warnings: list[warnings.WarningMessage] = field(default_factory=list)  # what loading said; shown if chosen

    def label(self, bundle_dir: Path) -> str:
        """Return e.g. ``multi_gpu_train.json over train.json``."""
        names = [_rel(f, bundle_dir) for f in self.files]
        return names[-1] if len(names) == 1 else f"{names[-1]} over {' + '.join(names[:-1])}"


def _rel(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def config_files(bundle_dir: Path, meta_path: Path | None) -> list[Path]:
    """Return the bundle's ``configs/*.json|yaml|yml`` files except the metadata, main config first."""
    folder = bundle_dir / "configs"
    files = sorted(p for p in folder.glob("*") if p.suffix.lower() in SUFFIXES and p.is_file())
    files = [p for p in files if not (meta_path and p.resolve() == meta_path.resolve()) and p.name != "metadata.json"]
    for stem in MAIN_STEMS:
        main = [p for p in files if p.stem == stem]
        if main:
            return [main[0], *[p for p in files if p != main[0]]]
    return files


def _is_mapping_file(path: Path) -> bool:
    try:
        load_file(path)
    except UserError as err:
        return "top level" not in err.message
    return True


def load_set(
    files: list[Path], bundle_dir: Path, meta: Mapping[str, Any], meta_where: Mapping[str, str],
    meta_path: Path | None, environ: Mapping[str, str],
) -> ConfigSet:
    """Load and merge ``files`` as ``load_bundle_config`` does (metadata given, not re-checked)."""
    result = ConfigSet(list(files))
    try:
        with warnings.catch_warnings(record=True) as result.load_warnings:  # a way not chosen must not warn
            warnings.simplefilter("always")
            merged, where = merge_files([load_file(f) for f in files])
    except UserError as err:
        result.problems.append(problem_from_error(err))
        return result
    merged[META_KEY] = dict(meta)
    where.update(meta_where)
    name = str(meta.get("name") or bundle_dir.name)
    cfg = BundleConfig(name, bundle_dir, list(files), meta_path, merged, where)
    cfg.logging_file = logging_file_for(None, files)  # what a run applies: logging.conf beside the first config
    for id_path, value in list(iter_ids(cfg.config)):
        if has_env_refs(value):
            try:
                expanded = expand_env_refs(value, environ, id_path=id_path, where=cfg.locate(id_path), used={})
            except UserError as err:
                result.problems.append(problem_from_error(err))
                continue
            set_by_id(cfg.config, id_path, expanded)
    result.cfg = cfg
    result.problems.extend(reference_problems(cfg))
    return result


def reference_problems(cfg: BundleConfig) -> list[Problem]:
    """Return every ``@ref`` to a missing id (all of them), or else a circular reference."""
    try:
        expanded = cfg.expanded()
    except UserError as err:
        return [problem_from_error(err)]
    problems = []
    for id_path, value in iter_ids(expanded):
        if not isinstance(value, str):
            continue
        for ref in refs_in_string(value):
            if not has_id(expanded, ref):
                close = suggest_ids(ref, expanded)
                hint = f"; did you mean {', '.join('@' + c for c in close)}?" if close else ""
                problems.append(Problem(cfg.locate(id_path), id_path,
                                        f"'@{ref}' refers to an id that is not in the config{hint}"))
    if not problems:
        try:
            check_references(expanded, cfg.where, lambda ref: suggest_ids(ref, expanded))
        except UserError as err:
            problems.append(problem_from_error(err))
    return problems


def entry_problems(cfg: BundleConfig) -> list[Problem]:
    """Return a problem when the main config has no id to run (``run`` or ``training``)."""
    if any(has_id(cfg.config, e) for e in ENTRY_IDS):
        return []
    return [Problem(str(cfg.config_files[-1]), "run", "the config has no 'run' id (what 'hpc-runner run' and "
                    "'python -m monai.bundle run' execute)")]


def _looks_like_override(path: Path) -> bool:
    try:
        data = load_file(path).data
    except UserError:
        return False
    return any(("#" in str(k) or "::" in str(k) or str(k).startswith("+")) for k in data)


def candidate_sets(path: Path, main: Path | None, others: list[Path]) -> list[list[Path]]:
    """Return the ways ``path`` may be meant to be loaded, most likely first."""
    alone = [[path]]
    # the zoo names an overlay after the file it extends: inference_trt.json over inference.json
    over: list[list[Path]] = [[other, path] for other in others
                              if other not in (path, main) and path.stem.startswith(other.stem + "_")]
    if main is not None:
        over.append([main, path])
        base_stem = path.stem.removeprefix("multi_gpu_")
        for other in others:
            if other not in (path, main) and base_stem != path.stem and other.stem == base_stem:
                over.append([main, other, path])
    return over + alone if _looks_like_override(path) else alone + over


def choose_set(candidates: list[ConfigSet]) -> ConfigSet:
    """Return the first candidate without problems, else the one with the fewest (earliest on ties)."""
    for c in candidates:
        if not c.problems:
            return c
    return min(candidates, key=lambda c: len(c.problems))


def _disabled(node: Mapping[str, Any]) -> bool:
    flag = node.get("_disabled_", False)
    return flag.strip().lower() == "true" if isinstance(flag, str) else bool(flag)


def _unknown_args(obj: Any, node: Mapping[str, Any]) -> list[str]:
    args = [str(k) for k in node if k not in NON_ARG_KEYS]
    if not args:
        return []
    try:  # wrappers (MONAI's deprecated-argument decorators) accept **kwargs: then nothing is checked
        sig = inspect.signature(obj, follow_wrapped=False)
    except (TypeError, ValueError):
        return []
    params = sig.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return []
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return [a for a in args if a not in names]


def target_problems(cfg: BundleConfig, seen: set[tuple[str | None, str]]) -> tuple[list[Problem], int]:
    """Return problems of ``_target_`` imports and arguments, ``$import`` modules; and how many targets were checked."""
    problems: list[Problem] = []
    checked = 0
    try:
        expanded = cfg.expanded()
    except UserError:
        return problems, checked  # already reported by reference_problems
    body = {k: v for k, v in expanded.items() if k != META_KEY}
    with bundle_on_sys_path(cfg.bundle_dir):
        for id_path, value in [("", body), *iter_ids(body)]:
            if isinstance(value, str) and value.startswith("$"):
                problems.extend(_import_problems(cfg, id_path, value, seen))
            if not (isinstance(value, dict) and isinstance(value.get("_target_"), str)):
                continue
            target = value["_target_"]
            tid = join_id(id_path, "_target_") if id_path else "_target_"
            key = (cfg.locate(tid), target)
            if target.startswith(_EXPR_PREFIXES) or _disabled(value) or key in seen:
                continue
            seen.add(key)
            checked += 1
            try:
                obj = locate_target(target)
            except TargetError as exc:
                problems.append(Problem(cfg.locate(tid), tid, f"_target_ '{target}' cannot be imported: {exc}"))
                continue
            if not callable(obj):
                problems.append(Problem(cfg.locate(tid), tid, f"_target_ '{target}' is not a class or function"))
                continue
            for arg in _unknown_args(obj, value):
                aid = join_id(id_path, arg) if id_path else arg
                problems.append(Problem(cfg.locate(aid), aid, f"{target} has no argument '{arg}'"))
    return problems, checked


def _import_problems(cfg: BundleConfig, id_path: str, value: str, seen: set) -> list[Problem]:
    modules = import_statement_modules(value[1:]) or []
    problems = []
    for module in modules:
        if (None, module) in seen:
            continue
        seen.add((None, module))
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            message = f"'{value}' imports '{module}', which is not installed"
            problems.append(Problem(cfg.locate(id_path), id_path, message))
    return problems


def check_configs(
    bundle_dir: Path, meta: Mapping[str, Any], meta_where: Mapping[str, str], meta_path: Path | None,
    environ: Mapping[str, str], *, imports: bool = True,
) -> tuple[list[ConfigSet], list[Problem], list[str]]:
    """Check every config file; return the chosen sets (main first), all problems, and summary notes."""
    files = config_files(bundle_dir, meta_path)
    problems: list[Problem] = []
    notes: list[str] = []
    skipped = [f for f in files if not _is_mapping_file(f)]
    files = [f for f in files if f not in skipped]
    if skipped:
        notes.append(f"not configs (top level is not a mapping): {', '.join(f.name for f in skipped)}")
    if not files:
        return [], [Problem(str(bundle_dir / "configs"), None, "no config files (configs/train.yaml or .json)")], notes
    main = files[0] if files[0].stem in MAIN_STEMS else None
    chosen: list[ConfigSet] = []
    for path in files:
        if path == main:
            sets = [load_set([path], bundle_dir, meta, meta_where, meta_path, environ)]
        else:
            sets = [load_set(c, bundle_dir, meta, meta_where, meta_path, environ)
                    for c in candidate_sets(path, main, files)]
        best = choose_set(sets)
        for said in best.load_warnings:
            warnings.warn_explicit(said.message, said.category, said.filename, said.lineno)
        chosen.append(best)
        problems.extend(best.problems)
    if main is not None and chosen[0].cfg is not None:
        problems.extend(entry_problems(chosen[0].cfg))
    if imports:
        seen: set[tuple[str | None, str]] = set()
        total = 0
        for s in chosen:
            if s.cfg is not None:
                found, checked = target_problems(s.cfg, seen)
                problems.extend(found)
                total += checked
        notes.append(f"{total} _target_ names import")
    notes.insert(0, f"{len(chosen)} config file(s): {', '.join(s.label(bundle_dir) for s in chosen)}")
    return chosen, problems, notes
