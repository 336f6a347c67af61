"""``--safe``: no code from the bundle runs on your account (see docs/security.md for the whole promise).

What is checked, everywhere in the config, ``_meta_`` included (the resolver follows ``@_meta_::x``):

- every ``$`` expression is refused (MONAI ``eval()``s it), except ``$import M`` of an allowed module;
- every ``_target_``, and every reader/writer/merger name MONAI imports, must be a literal name that
  resolves to a class or a module-level function of an allowed category (registry/safe_policy.py);
  its written path is checked before anything is imported, its real location after;
- writers inside the categories may write only to ``@output_dir`` (the run dir);
- values that make an allowed class unpickle or download (``weights_only: false``, ``pretrained: true``);
- ``_mode_: debug`` (pdb);
- the bundle's ``logging.conf``: Python's ``fileConfig`` evaluates its ``args`` lines and imports its
  ``class`` names, so only stream handlers and plain formatters pass;
- Python modules of the bundle that would shadow an installed module while the bundle is on sys.path.

``run --safe``, ``submit``/``sweep --safe``, the job's own re-check, ``--resume`` and ``verify --safe`` all
call ``bundle_problems``: they refuse exactly the same things.
"""

from __future__ import annotations

import configparser
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import get_by_id, iter_ids, join_id
from hpc_runner.config.merge import locate
from hpc_runner.errors import UserError
from hpc_runner.records.read import read_record_text
from hpc_runner.registry.problems import Problem, problems_error
from hpc_runner.registry.safe_policy import (
    DOWNLOAD_KEYS,
    FILE_NAME_ARGS,
    NAME_KEYS,
    RUN_DIR_ARGS,
    RUN_DIR_REF,
    UNSAFE_VALUES,
    UNSET_ARGS,
    WRITERS,
    allowed_names,
    allowed_prefixes,
    not_safe_reason,
    under,
)
from hpc_runner.registry.targets import TargetError, import_statement_modules, locate_target, target_path
from hpc_runner.registry.user_config import safe_targets, user_config_path

TRUSTED_PACKAGES = ("monai", "torch", "hpc_runner")  # importing their modules runs only their own code
EXPECTED = (
    "a declarative config: no '$' expressions, and _target_/reader/writer names of networks, transforms, "
    "datasets, losses, optimizers, metrics, inferers, handlers or hpc-runner's own (docs/security.md), or the "
    "'safe_targets' of your user config file"
)


class SafePolicy:
    """What ``--safe`` allows: the categories of registry/safe_policy.py plus the user's ``safe_targets``."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self.extra = tuple(extra)
        self.allowed = allowed_prefixes(self.extra)
        self.names = allowed_names()  # hpc-runner's own: exact classes and functions, never a whole module
        self.verdicts: dict[tuple[str, str], tuple[str | None, str | None]] = {}  # (what, name) -> (real, refusal)

    def may_import(self, dotted: str) -> bool:
        """Whether naming ``dotted`` may import its module: only inside packages whose code we run anyway."""
        return under(dotted, (*TRUSTED_PACKAGES, *self.extra))

    def refusal(self, real: str) -> str | None:
        """Return why the object at ``real`` (module.qualname) is refused, or None when it is allowed."""
        if under(real, self.extra):
            return None  # the user's own choice
        if real not in self.names and not under(real, self.allowed):
            return "it is not a network, transform, dataset, loss, optimizer, metric, inferer, handler or " \
                   "hpc-runner's own (the --safe allow-list)"
        return not_safe_reason(real)


def policy_for_user(environ: Mapping[str, str] | None = None) -> SafePolicy:
    """Return the policy: the categories plus the user's ``safe_targets``."""
    return SafePolicy(safe_targets(environ))


def _real_path(obj: Any) -> str | None:
    """Return ``module.qualname`` of a class or a module-level function, None for anything else."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if inspect.isclass(obj) or ((inspect.isfunction(obj) or inspect.isbuiltin(obj)) and "." not in qualname):
        return f"{module}.{qualname}"
    return None


class _Checker:
    def __init__(self, policy: SafePolicy, config: Mapping[str, Any], where: Callable[[str], str | None]) -> None:
        self.policy = policy
        self.config = config
        self.where = where
        self.problems: list[Problem] = []

    def add(self, id_path: str, message: str) -> None:
        self.problems.append(Problem(self.where(id_path), id_path, message))

    def expression(self, id_path: str, value: str) -> None:
        modules = import_statement_modules(value[1:])
        if modules is None:
            shown = value if len(value) <= 60 else value[:57] + "..."
            self.add(id_path, f"'$' expression {shown!r} is refused: MONAI runs it with Python eval()")
            return
        for module in modules:
            if not self.policy.may_import(module):  # importing monai/torch/hpc_runner runs only their own code
                self.add(id_path, f"'$import {module}' is refused: it is outside the packages --safe imports "
                         f"({', '.join((*TRUSTED_PACKAGES, *self.policy.extra))})")
                continue
            try:  # imported now, so a module of the bundle cannot shadow it later
                importlib.import_module(module)
            except Exception as exc:
                self.add(id_path, f"'$import {module}' fails: {type(exc).__name__}: {exc}")

    def dotted_name(self, id_path: str, name: str, what: str) -> str | None:
        """Check a name MONAI will import (``_target_``, reader, writer); return its real path when allowed."""
        verdicts = self.policy.verdicts  # the same name is judged once per policy (a sweep checks every point)
        if (what, name) not in verdicts:
            verdicts[(what, name)] = self._judge_name(name, what)
        real, refusal = verdicts[(what, name)]
        if refusal:
            self.add(id_path, refusal)
        return real

    def _judge_name(self, name: str, what: str) -> tuple[str | None, str | None]:
        """Return (real path, None) when ``name`` is allowed, else (None, why it is refused)."""
        path = target_path(name)
        if "." not in path:
            return None, (f"{what} '{name}' is not a MONAI component; MONAI would import it as a top-level "
                          "Python name (e.g. a builtin)")
        if not self.policy.may_import(path):
            return None, (f"{what} '{name}' is refused: it is outside the packages --safe imports "
                          f"({', '.join((*TRUSTED_PACKAGES, *self.policy.extra))})")
        try:
            obj = locate_target(name)
        except TargetError as exc:
            return None, f"{what} '{name}' cannot be imported: {exc}"
        real = _real_path(obj)  # where it really lives: attribute chains can leave the package they start in
        if real is None:
            return None, f"{what} '{name}' is not a class or a module-level function"
        why = self.policy.refusal(real)
        if why:
            shown = f"'{name}' resolves to {real}, which" if real != path else f"'{name}'"
            return None, f"{what} {shown} is refused: {why}"
        return real, None

    def component(self, id_path: str, node: dict) -> None:
        target = node["_target_"]
        tid = join_id(id_path, "_target_") if id_path else "_target_"
        real = None
        if not isinstance(target, str):
            self.add(tid, f"_target_ of type {type(target).__name__} is refused")
        elif target.startswith(("$", "@", "%")):
            self.add(tid, f"computed _target_ {target!r} is refused: only a literal class or function name is allowed")
        else:
            real = self.dotted_name(tid, target, "_target_")
        if str(node.get("_mode_", "")).lower() == "debug":
            self.add(join_id(id_path, "_mode_"), "_mode_ 'debug' (pdb) is refused")
        for key, value in node.items():
            if key in UNSAFE_VALUES:
                self.unsafe_value(join_id(id_path, key), key, value)
            elif key in DOWNLOAD_KEYS and value:
                self.add(join_id(id_path, key), f"'{key}' is refused: it downloads")
        if real in WRITERS:
            self.writer(id_path, node, real)

    def unsafe_value(self, id_path: str, key: str, value: Any) -> None:
        """Refuse a value that makes the class unpickle or download, by truthiness, through plain references."""
        bad, why = UNSAFE_VALUES[key]
        plain = self._plain(value)
        if plain is _UNKNOWN:  # a component, a list MONAI may shorten (_disabled_), a computed reference
            self.add(id_path, f"'{key}' is refused: --safe checks it only as a literal value (or a plain reference "
                     f"to one), and {why} when it is {str(bad).lower()}")
        # by truthiness, not identity: the class tests `if allow_pickle:`, so 1, "yes" or "False" unpickle too,
        # and `weights_only: 0` or '' load pickles as `false` does
        elif bool(plain) == bad:
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            self.add(id_path, f"'{key}: {shown}' is refused: {why}")

    def _plain(self, value: Any, depth: int = 0) -> Any:
        """Return the literal scalar ``value`` stands for, following plain ``@id`` references; else _UNKNOWN."""
        if depth > 20:
            return _UNKNOWN
        if isinstance(value, str) and value.startswith("@"):
            text = value.replace("#", "::")
            if any(c in text for c in " +()[]'\""):
                return _UNKNOWN
            try:
                return self._plain(get_by_id(dict(self.config), text[1:]), depth + 1)
            except (KeyError, IndexError, TypeError):
                return _UNKNOWN
        if isinstance(value, str) and value.startswith(("$", "%")):
            return _UNKNOWN
        if value is None or isinstance(value, bool | int | float | str):
            return value
        return _UNKNOWN

    def writer(self, id_path: str, node: dict, real: str) -> None:
        """Check every argument of a writer that decides where it writes (registry/safe_policy.py WRITERS)."""
        name = real.rsplit(".", 1)[-1]
        for arg in WRITERS[real]:
            aid, value = join_id(id_path, arg), node.get(arg)
            if arg in RUN_DIR_ARGS and not self._is_run_dir(value):
                shown = "not given (its default is a folder of its own)" if arg not in node else repr(value)
                self.add(aid, f"{name} writes files to {arg} {shown}: under --safe a writer may write only to "
                         f"{RUN_DIR_REF}, the run dir")
            elif arg in FILE_NAME_ARGS and arg in node and not _plain_file_name(self._plain(value)):
                self.add(aid, f"{name}'s {arg} {value!r} is refused: under --safe it must be a literal file name "
                         "(no '/', '\\' or '..'), so the files stay in the run dir")
            elif arg in UNSET_ARGS and self._plain(value) not in (None, ""):
                self.add(aid, f"{name}'s {arg} {value!r} is refused: it decides where the files go, outside what "
                         f"--safe checks; leave it unset so the writer writes under {RUN_DIR_REF}")

    def _is_run_dir(self, value: Any, depth: int = 0) -> bool:
        """True when ``value`` is ``@output_dir``, directly or through a chain of plain references."""
        if not isinstance(value, str) or depth > 20:
            return False
        text = value.replace("#", "::")
        if text == RUN_DIR_REF:
            return True
        if text.startswith("@") and not any(c in text for c in " +()[]'\""):
            try:
                return self._is_run_dir(get_by_id(dict(self.config), text[1:]), depth + 1)
            except (KeyError, IndexError, TypeError):
                return False
        return False

    def reader_writer(self, id_path: str, key: str, value: str) -> None:
        if "." in value:
            self.dotted_name(id_path, value, key)
            return
        import monai.data

        if hasattr(monai.data, value):
            return
        if importlib.util.find_spec(value) is not None:
            self.add(id_path, f"{key} '{value}' is not a monai.data reader/writer; MONAI would import module '{value}'")


_UNKNOWN = object()  # a value --safe cannot reduce to a literal without running the config


def _plain_file_name(value: Any) -> bool:
    """True for a literal part of a file name that cannot leave its folder (None: not given)."""
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    text = str(value)
    return "/" not in text and "\\" not in text and "\0" not in text and text not in (".", "..")


def _shadowing_problems(bundle_dir: Path) -> list[Problem]:
    """Top-level Python modules of the bundle that would hide an installed module of the same name."""
    root = bundle_dir.resolve()
    names: dict[str, Path] = {}
    for child in sorted(bundle_dir.iterdir()):
        if child.is_dir() and (child / "__init__.py").is_file():
            names.setdefault(child.name, child)
        elif child.is_file() and child.suffix in (".py", ".pyc", ".so", ".pyd"):
            names.setdefault(child.name.split(".", 1)[0], child)
    problems = []
    for name, path in sorted(names.items()):
        if name in sys.modules:
            continue  # already imported: the bundle's copy can no longer replace it
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or spec.origin == "namespace":
            continue  # nothing installed by that name, or a namespace folder (a regular package wins anyway)
        if root not in Path(spec.origin).resolve().parents:
            problems.append(
                Problem(str(path), None,
                        f"the bundle's module '{name}' would shadow the installed module '{name}' while the bundle "
                        "root is on sys.path; --safe refuses it")
            )
    return problems


_SAFE_HANDLER_CLASSES = frozenset({"StreamHandler", "logging.StreamHandler", "NullHandler", "logging.NullHandler"})
_SAFE_HANDLER_ARGS = frozenset({"", "()", "(sys.stdout,)", "(sys.stderr,)", "(sys.stdout)", "(sys.stderr)"})
_SAFE_FORMATTER_CLASSES = frozenset({"", "logging.Formatter", "Formatter"})


def logging_problems(path: Path) -> list[Problem]:
    """What ``--safe`` refuses in a logging INI file: ``fileConfig`` evals ``args``/``kwargs`` and imports ``class``."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(read_record_text(path, "logging config") or "", source=str(path))
    except (OSError, UserError, configparser.Error) as exc:
        return [Problem(str(path), None, f"the logging config cannot be read ({type(exc).__name__}); --safe refuses "
                        "what it cannot check")]
    problems = []
    for section in parser.sections():
        items = {k: v.strip() for k, v in parser.items(section)}
        where = f"{path} [{section}]"
        if section.startswith("handler_"):
            if items.get("class", "") not in _SAFE_HANDLER_CLASSES:
                problems.append(Problem(where, None, f"handler class {items.get('class', '')!r} is refused: fileConfig "
                                        "imports it by name; --safe allows StreamHandler"))
            if items.get("args", "").replace(" ", "") not in _SAFE_HANDLER_ARGS:
                problems.append(Problem(where, None, f"handler args {items.get('args', '')[:60]!r} are refused: "
                                        "fileConfig evaluates them with eval(); --safe allows (sys.stdout,) or "
                                        "(sys.stderr,)"))
            if items.get("kwargs", "{}").replace(" ", "") not in ("{}", ""):
                problems.append(Problem(where, None, "handler kwargs are refused: fileConfig evaluates them with "
                                        "eval()"))
        elif section.startswith("formatter_") and items.get("class", "") not in _SAFE_FORMATTER_CLASSES:
            problems.append(Problem(where, None, f"formatter class {items['class']!r} is refused: fileConfig imports "
                                    "it by name"))
    return problems


def safe_problems(
    config: Mapping[str, Any],
    where: Mapping[str, str],
    policy: SafePolicy | None = None,
    bundle_dir: Path | None = None,
) -> list[Problem]:
    """Return everything ``--safe`` refuses in an expanded config (``_meta_`` included)."""
    checker = _Checker(policy or SafePolicy(), config, lambda id_path: locate(dict(where), id_path))
    if isinstance(config.get("_target_"), str):
        checker.component("", dict(config))
    for id_path, value in iter_ids(config):
        key = id_path.rsplit("::", 1)[-1]
        if isinstance(value, dict) and "_target_" in value:
            checker.component(id_path, value)
        elif isinstance(value, str) and key != "_target_":
            if value.startswith("$"):
                checker.expression(id_path, value)
            elif key in NAME_KEYS and value and not value.startswith(("@", "%")):
                checker.reader_writer(id_path, key, value)
    if bundle_dir is not None and bundle_dir.is_dir():
        checker.problems.extend(_shadowing_problems(bundle_dir))
    return checker.problems


def bundle_problems(cfg: Any, policy: SafePolicy, bundle_dir: Path | None = None) -> list[Problem]:
    """Return everything ``--safe`` refuses in a loaded BundleConfig: its config and its logging file."""
    problems = safe_problems(cfg.expanded(), cfg.where, policy, bundle_dir)
    logging_file = getattr(cfg, "logging_file", None)
    if logging_file is not None and Path(logging_file).is_file():
        problems += logging_problems(Path(logging_file))
    return problems


def check_safe(cfg: Any, environ: Mapping[str, str] | None = None) -> None:
    """Raise BundleError listing everything ``--safe`` refuses in a BundleConfig (all at once)."""
    problems = bundle_problems(cfg, policy_for_user(environ), cfg.bundle_dir)
    if problems:
        raise problems_error(
            problems,
            f"--safe refuses bundle {cfg.name}",
            expected=EXPECTED,
            hint=f"Allow more modules under 'safe_targets:' in {user_config_path(environ)}, or run without --safe "
            "if you trust the bundle",
        )
