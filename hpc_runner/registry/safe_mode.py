"""``--safe``: run a bundle only when its config is purely declarative and calls allow-listed code.

Refused: every ``$`` expression (MONAI ``eval()``s them) except ``$import M`` of an allowed module;
``_target_`` values that are computed (``$``/``@``) or that resolve outside the allow-list (the
resolved object's own module counts, so ``torch.os.system`` is refused); known code-running entry
points inside the allowed packages (``DENIED``); ``reader``/``writer`` names that MONAI would import;
pickle switches (``weights_only: false``, ``allow_pickle: true``); and bundle folders whose Python
modules would shadow an installed module while the bundle root is on ``sys.path``.
The allow-list is monai, torch and hpc_runner plus ``safe_targets`` of the user's config file.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import iter_ids, join_id
from hpc_runner.config.merge import locate
from hpc_runner.registry.problems import Problem, problems_error
from hpc_runner.registry.targets import import_statement_modules

DEFAULT_ALLOWED = ("monai", "torch", "hpc_runner")
# code-running entry points inside the allowed packages (prefixes of module paths or object paths)
DENIED = (
    "monai.bundle",  # runs other bundles and their $ expressions
    "monai.utils.module",  # instantiate / optional_import / locate: import anything
    "monai.utils.misc.run_cmd",
    "monai.utils.run_cmd",
    "monai.auto3dseg",
    "monai.apps.auto3dseg",
    "monai.apps.nnunet",
    "monai.apps.mmars",
    "monai.fl",
    "torch.hub",
    "torch.load",
    "torch.serialization",
    "torch.package",
    "torch.jit.load",
    "torch.jit._serialization",
    "torch.utils.cpp_extension",
    "torch.utils.benchmark",  # Timer(stmt=...) compiles strings
    "torch.ops",
    "torch._ops",
    "torch.classes",
    "torch._classes",
    "torch.library",
    "torch.distributed.run",
    "torch.distributed.launch",
    "torch.distributed.elastic",
    "torch.distributed.rpc",
    "hpc_runner.cli",
    "hpc_runner.config",
    "hpc_runner.registry",
    "hpc_runner.slurm",
)
UNSAFE_VALUES: dict[str, Any] = {"weights_only": False, "allow_pickle": True, "trust_remote_code": True}
NAME_KEYS = ("reader", "writer")  # MONAI's LoadImage/SaveImage import dotted names given here
EXPECTED = (
    "a declarative config: no '$' expressions, and _target_/reader/writer names inside monai, torch, "
    "hpc_runner or the 'safe_targets' of your user config file"
)


def _under(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


class SafePolicy:
    """What ``--safe`` allows: module prefixes minus the denied entry points."""

    def __init__(self, allowed: Sequence[str] = DEFAULT_ALLOWED, denied: Sequence[str] = DENIED) -> None:
        self.allowed = tuple(allowed)
        self.denied = tuple(denied)

    def refusal(self, dotted: str, *, private_ok: bool = False) -> str | None:
        """Return why a dotted path is refused, or None when it is allowed."""
        if _under(dotted, self.denied):
            return "it is a code-running entry point that --safe denies"
        if not _under(dotted, self.allowed):
            return f"it is outside the allow-list ({', '.join(self.allowed)})"
        if not private_ok and any(part.startswith("_") for part in dotted.split(".")):
            return "it names a private attribute"
        return None


def policy_for_user(environ: Mapping[str, str] | None = None) -> SafePolicy:
    """Return the policy: the defaults plus the user's ``safe_targets``."""
    from hpc_runner.registry.user_config import safe_targets

    return SafePolicy((*DEFAULT_ALLOWED, *safe_targets(environ)))


class _Checker:
    def __init__(self, policy: SafePolicy, where: Callable[[str], str | None]) -> None:
        self.policy = policy
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
            why = self.policy.refusal(module)
            if why:
                self.add(id_path, f"'$import {module}' is refused: {why}")
                continue
            try:  # imported now, so a module of the bundle cannot shadow it later
                importlib.import_module(module)
            except Exception as exc:
                self.add(id_path, f"'$import {module}' fails: {type(exc).__name__}: {exc}")

    def dotted_name(self, id_path: str, name: str, what: str) -> None:
        """Check a dotted or bare name that MONAI will import (``_target_``, reader, writer)."""
        from hpc_runner.registry.targets import TargetError, locate_target, object_path, target_path

        path = target_path(name)
        if "." not in path:
            self.add(id_path, f"{what} '{name}' is not a MONAI component; MONAI would import it as a top-level "
                     "Python name (e.g. a builtin)")
            return
        why = self.policy.refusal(path)
        if why:
            self.add(id_path, f"{what} '{name}' is refused: {why}")
            return
        try:
            obj = locate_target(name)
        except TargetError as exc:
            self.add(id_path, f"{what} '{name}' cannot be imported: {exc}")
            return
        real = object_path(obj)  # where it really lives: attribute chains can leave the allowed package
        why = self.policy.refusal(real, private_ok=True) if real else None
        if why:
            self.add(id_path, f"{what} '{name}' resolves to {real}, which is refused: {why}")
            return
        if not callable(obj) or type(obj).__name__ == "module":
            self.add(id_path, f"{what} '{name}' is not a class or function")

    def component(self, id_path: str, node: dict) -> None:
        target = node["_target_"]
        tid = join_id(id_path, "_target_") if id_path else "_target_"
        if not isinstance(target, str):
            self.add(tid, f"_target_ of type {type(target).__name__} is refused")
        elif target.startswith(("$", "@", "%")):
            self.add(tid, f"computed _target_ {target!r} is refused: only a literal class or function name is allowed")
        else:
            self.dotted_name(tid, target, "_target_")
        if str(node.get("_mode_", "")).lower() == "debug":
            self.add(join_id(id_path, "_mode_"), "_mode_ 'debug' (pdb) is refused")

    def reader_writer(self, id_path: str, key: str, value: str) -> None:
        if "." in value:
            self.dotted_name(id_path, value, key)
            return
        import monai.data

        if hasattr(monai.data, value):
            return
        if importlib.util.find_spec(value) is not None:
            self.add(id_path, f"{key} '{value}' is not a monai.data reader/writer; MONAI would import module '{value}'")


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


def safe_problems(
    config: Mapping[str, Any],
    where: Mapping[str, str],
    policy: SafePolicy | None = None,
    bundle_dir: Path | None = None,
) -> list[Problem]:
    """Return everything ``--safe`` refuses in an expanded config (``_meta_`` is not checked)."""
    checker = _Checker(policy or SafePolicy(), lambda id_path: locate(dict(where), id_path))
    body = {k: v for k, v in config.items() if k != "_meta_"}
    if isinstance(body.get("_target_"), str):
        checker.component("", body)
    for id_path, value in iter_ids(body):
        key = id_path.rsplit("::", 1)[-1]
        if isinstance(value, dict) and "_target_" in value:
            checker.component(id_path, value)
        elif isinstance(value, str) and key != "_target_":
            if value.startswith("$"):
                checker.expression(id_path, value)
            elif key in NAME_KEYS and value and not value.startswith(("@", "%")):
                checker.reader_writer(id_path, key, value)
        elif key in UNSAFE_VALUES and value is UNSAFE_VALUES[key]:
            checker.add(id_path, f"'{key}: {str(value).lower()}' is refused: it lets pickle files run code")
    if bundle_dir is not None and bundle_dir.is_dir():
        checker.problems.extend(_shadowing_problems(bundle_dir))
    return checker.problems


def check_safe(cfg: Any, environ: Mapping[str, str] | None = None) -> None:
    """Raise BundleError listing everything ``--safe`` refuses in a BundleConfig (all at once)."""
    from hpc_runner.registry.user_config import user_config_path

    problems = safe_problems(cfg.expanded(), cfg.where, policy_for_user(environ), cfg.bundle_dir)
    if problems:
        raise problems_error(
            problems,
            f"--safe refuses bundle {cfg.name}",
            expected=EXPECTED,
            hint=f"Allow more modules under 'safe_targets:' in {user_config_path(environ)}, or run without --safe "
            "if you trust the bundle",
        )
