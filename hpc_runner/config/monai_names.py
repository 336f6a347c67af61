"""The names MONAI accepts as bare ``_target_``s (``UNet``, ``Compose``), read from its source, not imported.

``monai.bundle.ComponentLocator`` scans the loaded ``monai*`` modules for classes and functions whose
``__module__`` is that module: what a module defines itself (``def``/``class``, and aliases of those such as
``Unet = UNet``), not what it re-exports. ``import monai`` loads every submodule except the ones its
``load_submodules`` pattern excludes (``_EXCLUDED`` below), unless something imports them anyway; every package
is loaded, since ``pkgutil.walk_packages`` imports packages to walk them.

The index is built by parsing MONAI's ~440 files once (about two seconds) and kept in
``$XDG_CACHE_HOME/hpc-runner/monai-names.json``, keyed by MONAI's version, folder and every file's size and
mtime: an upgrade or an edited file builds it again.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from importlib import metadata
from pathlib import Path

from hpc_runner.config.module_source import ModuleBindings, Undecided, bindings_of, find_module
from hpc_runner.config.target_verdicts import cache_file
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.read import read_json_cache

PACKAGE = "monai"  # ComponentLocator.MOD_START
# monai/__init__.py's load_submodules exclude pattern (MONAI 1.6): these modules load only when imported
_EXCLUDED = re.compile(r"(^(monai.handlers))|(^(monai.bundle))|(^(monai.fl))|((\.so)\Z)|(^(monai._C))|"
                       r"(.*(__main__)\Z)|(.*(video_dataset)\Z)|(.*(nnunet).*\Z)")
MAYBE = "?"  # prefix of a module that defines the name only with some optional packages installed
MAX_BYTES = 4 << 20
MAX_FILES = 5000


def index_file() -> Path:
    """Return where the index is kept (beside the target verdicts)."""
    return cache_file().parent / "monai-names.json"


def _module_files(root: Path) -> dict[str, Path]:
    """Return every ``.py`` module under MONAI's folder by its dotted name."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
        rel = Path(folder).relative_to(root.parent)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            parts = [*rel.parts] + ([] if name == "__init__.py" else [name[:-3]])
            found[".".join(parts)] = Path(folder) / name
            if len(found) > MAX_FILES:
                raise Undecided(f"{root} holds more than {MAX_FILES} modules")
    return found


def _stamp(root: Path, files: dict[str, Path]) -> str:
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "?"
    digest = hashlib.sha256(f"{root}\0{version}".encode())
    for name, path in files.items():
        try:
            info = path.stat()
        except OSError as exc:
            raise Undecided(f"cannot read {path}: {exc}") from None
        digest.update(f"\0{name}:{info.st_size}:{info.st_mtime_ns}".encode())
    return digest.hexdigest()


def _own_names(found: ModuleBindings) -> tuple[list[str], list[str]]:
    """The names a module binds to classes or functions it defines itself (what ComponentLocator keeps).

    Returned as (sure, maybe): a name also bound otherwise (``try: X = other.X`` / ``except: def X``) is a
    class of this module or not depending on what is installed, so only importing MONAI tells.
    """
    sure: list[str] = []
    maybe: list[str] = []
    for name in found.names:
        kinds: set[str] = set()
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current not in found.names:
                kinds.add("other")
            for binding in found.names.get(current, []):
                if binding.kind == "alias":
                    todo.append(binding.name)
                else:
                    kinds.add(binding.kind)
        if kinds == {"def"}:
            sure.append(name)
        elif "def" in kinds:
            maybe.append(name)
    return sure, maybe


def build_index(root: Path) -> dict[str, str]:
    """Return {component name: the first module that defines it} for MONAI's source under ``root``.

    A name that only some installs define (:func:`_own_names`) maps to its module prefixed by :data:`MAYBE`.
    """
    files = _module_files(root)
    bindings: dict[str, ModuleBindings] = {}
    for name in files:
        spec = find_module(name)
        if spec is not None:
            try:
                bindings[name] = bindings_of(spec)
            except Undecided:
                continue  # a file Python cannot parse is a module that cannot load: no components
    packages = {n for n, p in files.items() if p.name == "__init__.py"}
    todo = [n for n in files if n in packages or not _EXCLUDED.match(n)]
    loaded: set[str] = set()
    while todo:
        name = todo.pop()
        if name in loaded or name not in bindings:
            continue
        loaded.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:n]) for n in range(1, len(parts))]  # importing a module loads its packages
        todo += [m for m in bindings[name].imported if m.startswith(PACKAGE) and m in files]
    index: dict[str, str] = {}
    maybe: dict[str, str] = {}
    for name in sorted(loaded):
        sure, unsure = _own_names(bindings[name])
        for component in sure:
            index.setdefault(component, name)
        for component in unsure:
            maybe.setdefault(component, name)
    return {**{k: MAYBE + v for k, v in maybe.items() if k not in index}, **index}


class MonaiNames:
    """MONAI's component names, read from the cache file or built from MONAI's source once per process."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._index: dict[str, str] | None = None
        self._files: dict[str, Path] = {}

    def _load(self) -> dict[str, str]:
        if self._index is not None:
            return self._index
        spec = find_module(PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise Undecided(f"'{PACKAGE}' is not installed: importing it reports that")
        root = Path(next(iter(spec.submodule_search_locations)))
        self._files = _module_files(root)
        stamp = _stamp(root, self._files)
        path = self.path or index_file()
        kept = read_json_cache(path, "MONAI names", limit=MAX_BYTES)
        if kept.get("stamp") == stamp and isinstance(kept.get("names"), dict):
            self._index = kept["names"]
        else:
            self._index = build_index(root)
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, json.dumps({"stamp": stamp, "names": self._index}))
            except OSError:
                pass  # a read-only home: the next command builds it again, nothing worse
        return self._index

    def module_of(self, name: str) -> str | None:
        """Return the MONAI module that defines component ``name`` (None: no such component)."""
        module = self._load().get(name)
        if isinstance(module, str) and module.startswith(MAYBE):
            raise Undecided(f"'{module[1:]}' defines '{name}' only with some optional packages: importing tells")
        return module if isinstance(module, str) else None

    def close_to(self, name: str) -> list[str]:
        """Return up to three component names spelled like ``name`` (for "did you mean")."""
        index = self._load()
        sure = [k for k, v in index.items() if not v.startswith(MAYBE)]
        return difflib.get_close_matches(name, sure, n=3, cutoff=0.8)

    def file_of(self, module: str) -> Path:
        """Return the source file of a MONAI module the index names."""
        self._load()
        return self._files[module]
