"""Hand a checked config to ``monai.bundle.ConfigParser`` and run its ids the way MONAI's workflow does."""

from __future__ import annotations

import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpc_runner.config.bundle_config import META_KEY, BundleConfig
from hpc_runner.config.code_warnings import remember, warned_before
from hpc_runner.errors import ConfigError

if TYPE_CHECKING:  # importing monai costs seconds; only the run path pays it
    from monai.bundle import ConfigParser


# MONAI 1.6 warns on every parse that a config runs code (monai.bundle.scripts.create_workflow, used by `run`,
# `run_workflow` and `load`): a UserWarning whose message starts so. hpc-runner says it once per submission.
MONAI_CODE_WARNING = r"parsing config_file "
ADVISORY = "https://github.com/Project-MONAI/MONAI/security/advisories/GHSA-873f-pvrv-4x83"
_code_warning_shown = False


def silence_monai_code_warning() -> None:
    """Ignore MONAI's per-parse "config runs code" warning in this process, and no other warning.

    A job (every task of an array) calls this: the warning was shown once, when it was submitted.
    """
    warnings.filterwarnings("ignore", message=MONAI_CODE_WARNING, category=UserWarning)


def code_warning(cfg: BundleConfig) -> str:
    """Return hpc-runner's one-line form of MONAI's warning that a config runs code."""
    files = ", ".join(str(f) for f in cfg.config_files) or cfg.name
    return (f"{files}: every `_target_` is imported and called and every `$` value is passed to eval(), as MONAI warns "
            f"({ADVISORY}); run only configs you trust (--trust: a bundle you trust, no warning)")


def warn_code_once(cfg: BundleConfig, *, trusted: bool) -> bool:
    """Show MONAI's "config runs code" warning once per bundle unless it is trusted; return whether shown.

    Once per bundle: not again in this process, nor in a later command for the same config files (their bytes
    unchanged; config/code_warnings.py).

    Call it where a submission is made (``run``, and ``submit``/``sweep``/``tune`` on the login node), never in
    a job: jobs call :func:`silence_monai_code_warning`. MONAI's own copy of the warning is silenced from here on,
    so a ``run_workflow`` that parses through MONAI does not repeat it. ``--safe`` configs run no foreign code.
    """
    global _code_warning_shown
    silence_monai_code_warning()
    if trusted or cfg.safe or _code_warning_shown:
        return False
    _code_warning_shown = True
    if warned_before(cfg):  # said for these exact files before, in an earlier command: once per bundle
        return False
    warnings.warn(code_warning(cfg), stacklevel=2)
    remember(cfg)
    return True


def failing_id(exc: BaseException) -> str | None:
    """Return the innermost config id whose resolution raised ``exc`` (set by the tracking resolver)."""
    return getattr(exc, "hpcr_config_id", None)


def _tracking_resolver() -> Any:
    from monai.bundle import ReferenceResolver

    class TrackingResolver(ReferenceResolver):
        """MONAI's resolver, plus a note of which id was being resolved when something raised."""

        def _resolve_one_item(self, id: str, waiting_list: set[str] | None = None, **kwargs: Any) -> Any:
            try:
                return super()._resolve_one_item(id, waiting_list, **kwargs)
            except Exception as exc:
                if not hasattr(exc, "hpcr_config_id"):
                    exc.hpcr_config_id = self.normalize_id(id)  # type: ignore[attr-defined]
                raise

    return TrackingResolver()


def _snapshot_module_names(locator: Any) -> list[str]:
    """MONAI's ComponentLocator._find_module_names over a copy of sys.modules."""
    excludes = locator.excludes
    return [m for m in list(sys.modules) if m.startswith(locator.MOD_START) and all(s not in m for s in excludes)]


def _guard_component_locator() -> None:
    """Make MONAI's first `_target_` lookup safe while other threads import modules.

    ComponentLocator iterates ``sys.modules`` in Python; a thread that imports meanwhile (the MLflow
    sender, a prefetch worker's first transform) makes it fail with "dictionary changed size during
    iteration" at a random id. ``list(sys.modules)`` is copied in one step under the GIL.
    """
    from monai.bundle.config_item import ComponentLocator

    if ComponentLocator._find_module_names is not _snapshot_module_names:
        ComponentLocator._find_module_names = _snapshot_module_names


def build_parser(cfg: BundleConfig, expanded: dict | None = None) -> ConfigParser:
    """Return a MONAI ConfigParser holding ``cfg`` (macros expanded), as ``ConfigWorkflow`` builds it."""
    from monai.bundle import ConfigParser

    _guard_component_locator()
    content = dict(expanded if expanded is not None else cfg.expanded())
    meta = content.pop(META_KEY, {})
    parser = ConfigParser()
    parser.ref_resolver = _tracking_resolver()
    parser.read_config(f=content)
    parser.read_meta(f=meta)
    return parser


def run_expr(parser: ConfigParser, id_path: str) -> list[Any]:
    """Evaluate an id (or each item of a list id) and forget the result, as ``ConfigWorkflow._run_expr``."""
    results: list[Any] = []
    if id_path not in parser:
        return results
    if isinstance(parser[id_path], list):
        for i in range(len(parser[id_path])):
            sub = f"{id_path}::{i}"
            results.append(parser.get_parsed_content(sub))
            parser.ref_resolver.remove_resolved_content(sub)
    else:
        results.append(parser.get_parsed_content(id_path))
        parser.ref_resolver.remove_resolved_content(id_path)
    return results


def _forget_other_bundles(entry: str) -> None:
    """Drop the modules of this bundle's top-level names (its ``scripts`` package) that another bundle gave
    this process (an earlier stage of a pipeline, an earlier test), so ``scripts.x`` is this bundle's code.
    Only a module that lives in another bundle root (a folder with ``configs/``) is dropped, never an
    installed one: a bundle's ``nibabel.py`` stays harmless (sys.path is appended)."""
    root = Path(entry)
    try:
        names = {p.stem if p.suffix == ".py" else p.name for p in root.iterdir()
                 if p.suffix == ".py" or (p.is_dir() and p.name.isidentifier())}
    except OSError:
        return
    for name in [n for n in names if n in sys.modules]:
        module = sys.modules[name]
        packages = [Path(p) for p in getattr(module, "__path__", None) or []]  # a package: its folders
        where = getattr(module, "__file__", None)
        owners = [p.parent for p in packages] or ([Path(where).parent] if where else [])  # the roots it came from
        if owners and all(o.resolve() != root and (o / "configs").is_dir() for o in owners):
            for sub in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[sub]


@contextmanager
def bundle_on_sys_path(bundle_dir: Path | None):
    """Put the bundle root on ``sys.path`` while it runs, so its ``scripts/`` package imports (as MONAI).

    MONAI inserts it near the front; appending means a bundle's file can never hide an installed
    package (a ``nibabel.py`` in a shared bundle stays harmless).
    """
    if bundle_dir is None:
        yield
        return
    entry = str(Path(bundle_dir).resolve())
    _forget_other_bundles(entry)
    sys.path.append(entry)
    try:
        yield
    finally:
        if entry in sys.path:
            sys.path.remove(entry)


def apply_logging_file(path: Path | None) -> None:
    """Configure logging from an INI file as MONAI's workflow does (``logging.config.fileConfig``).

    MONAI's own loader is used when present: it refuses ``class=``/``args=`` that would run arbitrary code.
    """
    if path is None:
        return
    try:
        try:
            from monai.bundle.workflows import _apply_logging_file
        except ImportError:  # older MONAI: the plain stdlib call it used to make
            import logging.config

            logging.config.fileConfig(str(path), disable_existing_loggers=False)
            return
        _apply_logging_file(str(path))
    except Exception as exc:  # refused (code in it) or malformed: bad input, named, before anything is built

        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ConfigError(f"the logging file cannot be applied ({type(exc).__name__}: {message[:300]})",
                          where=str(path), expected="an INI file for logging.config.fileConfig with stream handlers "
                          "and formatters, as MONAI's bundles have (or --logging_file False)") from exc
