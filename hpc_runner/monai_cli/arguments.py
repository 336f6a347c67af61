"""MONAI's argument handling for its bundle subcommands, with one-paragraph errors instead of tracebacks.

``merge_args`` is MONAI's ``update_kwargs`` (the ``--args_file`` mapping first, then the arguments
given), preceded by a readable refusal of an args file that is missing or not a mapping; the input
summary is logged as MONAI logs it. ``load_config_parser`` reads config and metadata files into a MONAI
``ConfigParser`` the way MONAI's commands do (same merge, same duplicate-key rule) but names the file,
and the line where the parser gives one, when a file is missing or broken.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpc_runner.config.loader import MAX_CONFIG_BYTES
from hpc_runner.errors import ConfigError, UserError
from hpc_runner.records.read import not_regular, read_record_text
from hpc_runner.records.shape import MAX_CONFIG_NODES, check_json_depth, check_yaml_shape

LOGGER_NAME = "hpc_runner.monai_cli"
MONAI_FORMAT = "%(asctime)s - %(levelname)s - %(message)s"  # monai.apps.utils.DEFAULT_FMT
SUMMARY_EDGES = 5  # MONAI's PPRINT_CONFIG_N
_quiet = False  # the submit pre-flight checks the arguments; the job prints their summary


class _StdoutHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stdout`` is at the time (a job's tee, a test's capture)."""

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def get_logger() -> logging.Logger:
    """Return the logger of these commands: INFO lines on stdout in MONAI's format (``time - INFO - msg``)."""
    logger = logging.getLogger(LOGGER_NAME)
    if not logger.handlers:
        handler = _StdoutHandler()
        handler.setFormatter(logging.Formatter(MONAI_FORMAT))
        logger.addHandler(handler)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    return logger


def log_input_summary(tag: str, args: dict) -> None:
    """Log the arguments as MONAI's ``_log_input_summary`` does (``> name: value``)."""
    from monai.utils import pprint_edges

    if _quiet:
        return
    logger = get_logger()
    logger.info(f"--- input summary of hpc-runner {tag} ---")
    for name, val in args.items():
        logger.info(f"> {name}: {pprint_edges(val, SUMMARY_EDGES)}")
    logger.info("---\n\n")


@contextmanager
def quiet_summary() -> Iterator[None]:
    """Leave out the input summary while checking arguments (the submit pre-flight)."""
    global _quiet
    before, _quiet = _quiet, True
    try:
        yield
    finally:
        _quiet = before


def config_paths(files: Any) -> list[str]:
    """Return the file names MONAI's ``load_config_files`` reads for ``files`` (a name, a comma list, a list)."""
    if files is None:
        return []
    if isinstance(files, str | os.PathLike):
        text = str(files)
        if not Path(text).is_file() and "," in text:
            return [p for p in text.split(",")]
        return [text]
    if isinstance(files, Sequence):
        return [str(f) for f in files]
    return [str(files)]


def _line_of(exc: BaseException) -> int | None:
    line = getattr(exc, "lineno", None)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if line is None and mark is not None:
        line = mark.line + 1
    return line


def _check_readable(path: str, what: str) -> None:
    """ConfigError naming ``path`` unless it is a regular file of a config's size whose nesting and aliases are
    within the config bounds (records/read.py, records/shape.py): checked before MONAI's loader reads it, which
    reads any file whole (a named pipe blocks it, a 600 MB file fills memory) and recurses on deep nesting."""
    import contextlib

    import yaml

    text = read_record_text(path, what, MAX_CONFIG_BYTES, error=ConfigError) or ""
    if path.lower().endswith(".json"):
        check_json_depth(text, path)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with contextlib.suppress(yaml.YAMLError):  # a syntax error: MONAI's loader reports it below, as it does
        check_yaml_shape(loader(text), path, MAX_CONFIG_NODES)


def load_file(path: str, what: str, *, mapping: bool = True) -> Any:
    """Load one JSON/YAML file with MONAI's loader; raise ConfigError naming it (and the line) when it cannot, or
    (``mapping``) when it does not hold a mapping: a config, metadata, args or schema file that is a number, a
    string or null would reach MONAI, which fails on it with an AttributeError.

    Read through the bounded readers first (``_check_readable``): a regular file, of sensible size and shape."""
    from monai.bundle import ConfigParser

    kind = not_regular(path)  # a named pipe, a folder, a dangling link: named as what it is, not "does not exist"
    if kind is not None:
        raise ConfigError(f"{what} is {kind}, not a regular file", where=path,
                          expected="an existing .json, .yaml or .yml file")
    if not Path(path).is_file():
        hint = "The path is relative to the working dir" if not Path(path).is_absolute() else None
        raise ConfigError(f"{what} does not exist", where=path, hint=hint,
                          expected="an existing .json, .yaml or .yml file")
    _check_readable(path, what)
    try:
        content = ConfigParser.load_config_file(path)
    except Exception as exc:  # JSON/YAML syntax, duplicate keys (MONAI_FAIL_ON_DUPLICATE_CONFIG), unknown suffix
        line = _line_of(exc)
        where = f"{path}:{line}" if line else path
        first = str(getattr(exc, "msg", None) or getattr(exc, "problem", None) or exc).strip().splitlines()
        raise ConfigError(f"{what} cannot be read: {type(exc).__name__}: {first[0] if first else ''}",
                          where=where, expected="a valid JSON or YAML file") from None
    if mapping and not isinstance(content, dict):
        raise ConfigError(f"{what} holds {'nothing' if content is None else 'a ' + type(content).__name__}, not a "
                          "mapping", where=path, expected="a JSON or YAML mapping (of ids, or of keys, to values)")
    return content


def merge_args(tag: str, args_file: str | None, **kwargs: Any) -> dict:
    """Return MONAI's ``update_kwargs(args=args_file, **kwargs)`` and log the input summary as MONAI does."""
    from monai.bundle import update_kwargs

    if args_file is not None:
        content = load_file(str(args_file), "the --args_file")
        if not isinstance(content, dict):
            raise ConfigError(f"the --args_file holds a {type(content).__name__}, not a mapping", where=str(args_file),
                              expected="a mapping of argument names (and config ids) to values")
    try:
        merged = update_kwargs(args=args_file, **kwargs)
    except ValueError as exc:  # merge_kv's `+key` with mismatched types
        where = str(args_file) if args_file else None
        raise ConfigError(f"the arguments cannot be merged: {exc}", where=where) from None
    log_input_summary(tag, merged)
    return merged


def require(args: dict, name: str, tag: str, expected: str) -> Any:
    """Return ``args[name]``; refuse its absence as MONAI would fail on it, in one paragraph."""
    if args.get(name) is None:
        raise UserError(f"{tag} needs --{name}", expected=expected,
                        hint="Give it on the command line or in the --args_file")
    return args[name]


def check_files(files: Any, what: str) -> list[str]:
    """Load every file of ``files`` once (existence, syntax); return their names."""
    paths = config_paths(files)
    for path in paths:
        load_file(path, what)
    return paths


def load_config_parser(config_file: Any, meta_file: Any = None, overrides: dict | None = None) -> Any:
    """Return a MONAI ConfigParser with the config files, the metadata files and the overrides, as MONAI does.

    ``meta_file`` None: no metadata. Overrides are set one by one (``parser[id] = value``) after both.
    """
    from monai.bundle import ConfigParser

    check_files(config_file, "the config file")
    if meta_file is not None:
        check_files(meta_file, "the metadata file")
    parser = ConfigParser()
    try:
        parser.read_config(f=config_file)
        if meta_file is not None:
            parser.read_meta(f=meta_file)
    except ValueError as exc:  # merge_kv of `+key` with mismatched types
        raise ConfigError(f"the config files cannot be merged: {exc}") from None
    for key, value in (overrides or {}).items():
        try:
            parser[key] = value
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise ConfigError(f"the override --{key} cannot be set: {type(exc).__name__}: {exc}", id_path=key,
                              expected="an id whose parent exists in the config (a mapping, or a list index)") from None
    return parser


def parsed_content(parser: Any, id_path: str, what: str, config_file: Any) -> Any:
    """Return ``parser.get_parsed_content(id_path)``; a missing id or a failing component is one paragraph."""
    where = ", ".join(config_paths(config_file)) or None
    if id_path not in parser:
        raise ConfigError(f"{what} '{id_path}' is not in the config", where=where,
                          hint="Name the network's id as the first argument (net_id), e.g. network_def")
    try:
        return parser.get_parsed_content(id_path)
    except Exception as exc:  # a _target_ that does not import, a bad argument, a failing $ expression
        text = str(exc).strip().splitlines()
        raise ConfigError(f"building {what} '{id_path}' failed: {type(exc).__name__}: {text[0] if text else ''}",
                          where=where, id_path=id_path) from None


def check_writable_file(path: str | os.PathLike, what: str) -> Path:
    """Refuse an output file whose folder is missing or not writable, or that names a folder."""
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{what} {target} is a folder", expected="a file name")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"the folder of {what} does not exist", where=str(folder),
                        expected="an existing folder (MONAI does not create it either)",
                        hint=f"Create it first: mkdir -p {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"the folder of {what} is not writable", where=str(folder))
    return target


@contextmanager
def output_beside(target: Path) -> Iterator[Path]:
    """Yield a temporary path with ``target``'s name in a new folder beside it; move it onto ``target`` after.

    The exported file is complete or absent: a failure (or a kill) never leaves a half-written model, and
    the file keeps its name while written (TorchScript stores it inside the archive).
    """
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        staged = folder / target.name
        yield staged
        if not staged.is_file():
            raise RuntimeError(f"nothing was written to {staged}")
        with open(staged, "rb") as f:
            os.fsync(f.fileno())
        os.replace(staged, target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
