"""Which values of a config are input paths that the run reads: the pre-flight checks that these exist, only these.

A false positive (a valid bundle refused for a "path" that is no path, or one the run never reads) is worse
than a miss, so a value is checked only when three things hold:

- **it is where a path is written**: a top-level id, or an argument of a component (a mapping with
  ``_target_``), whose key names an input (``dataset_dir``, ``data_dir``, ``data_root``: folders;
  ``datalist``, ``datalist_file``, ``datalist_path``, ``data_list_file_path``: files; ``ckpt``, ``ckpt_path``,
  ``load_path``, ``images``, ``labels``: either); or a ``*_dir``/``*_path``/``*_file``/``*_root`` id that a
  ``$`` expression hands to a reader (``glob``, ``listdir``, ``load_decathlon_datalist``, ``torch.load``,
  ``np.load``, ``read_csv``, ...); or a file named in the literal ``data`` of a ``*Dataset`` component (what
  ``LoadImaged`` will open). A key inside a plain mapping is not checked: in ``NPZDictItemDataset(keys=
  {"images": "image"})`` ``images`` names a key of the arrays, not a folder.
- **it looks like a path**: any text for a folder name (``dataset_dir: data``); otherwise it must contain a
  ``/``, start with ``.`` or ``~``, or end with a file suffix (``.json``, ``.nii.gz``, ``.pt``, ...).
- **the run reads it**: what runs (the entry, ``initialize``, ``finalize`` or what they refer to) refers to it,
  and ``initialize`` does not make it (it neither refers to it nor repeats its value).

Values are followed through pure ``@id`` references (``bundle_root`` is the bundle folder); paths built by
``$`` code are not known without running it and are not checked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from hpc_runner.config.ids import get_by_id, has_id, iter_ids, normalize_id

INPUT_DIRS = ("dataset_dir", "data_dir", "data_root")
INPUT_FILES = ("datalist", "datalist_file", "datalist_path", "data_list_file_path")
INPUT_PATHS = ("ckpt", "ckpt_path", "load_path", "images", "labels")  # a file or a folder
PATTERN_ENDINGS = ("_dir", "_path", "_file", "_root")  # inputs only where a reader consumes them
FILE_SUFFIXES = (".json", ".yaml", ".yml", ".csv")  # a name in INPUT_FILES must be such a file
PATH_SUFFIXES = (
    *FILE_SUFFIXES, ".txt", ".pt", ".pth", ".ts", ".ckpt", ".onnx", ".nii", ".nii.gz", ".mha", ".mhd", ".nrrd",
    ".npz", ".npy", ".h5", ".hdf5", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".svs", ".dcm", ".zip", ".gz",
)
# calls that read the path they are given (a missing one fails, or silently yields nothing)
_READER = re.compile(r"\b(?:glob|iglob|listdir|scandir|walk|load_decathlon_datalist|load|read_csv|imread)\s*\(")
_REF = re.compile(r"@(?:\w*)(?:::\w*)*")
_CODE_PREFIXES = ("$", "@", "%")
BUNDLE_ROOT_ID = "bundle_root"
META_KEY = "_meta_"
MAX_DATA_ITEMS = 10_000


@dataclass
class InputPath:
    """A value the run reads as a path: where it is used, what it must be, and the ids followed to it."""

    id_path: str
    kind: str  # "dir", "file" (one of FILE_SUFFIXES when the name says so) or "any"
    path: str
    chain: list[str]  # the id, then each id a pure reference led to
    used_by: str = ""  # the id whose use by what runs makes it read (default: id_path)

    def __post_init__(self) -> None:
        self.used_by = self.used_by or self.id_path


def looks_like_path(value: str) -> bool:
    """True for text written as a path: a separator, a leading ``.``/``~``, or a file suffix."""
    return "/" in value or "\\" in value or value.startswith((".", "~")) or value.lower().endswith(PATH_SUFFIXES)


def _pure_ref(value: Any) -> str | None:
    if isinstance(value, str):
        v = normalize_id(value)
        if v.startswith("@") and _REF.fullmatch(v) and len(v) > 1:
            return v[1:]
    return None


def follow(config: Mapping[str, Any], id_path: str, bundle_root: str | None) -> tuple[Any, list[str]]:
    """Follow pure references from ``id_path``; return the value reached and the ids on the way."""
    chain = [id_path]
    value = get_by_id(config, id_path)
    while (ref := _pure_ref(value)) is not None and ref not in chain and len(chain) < 20:
        chain.append(ref)
        if ref == BUNDLE_ROOT_ID and bundle_root is not None:
            return bundle_root, chain
        if not has_id(config, ref):
            return None, chain
        value = get_by_id(config, ref)
    return value, chain


def maybe_disabled(node: Mapping[str, Any]) -> bool:
    """True for ``_disabled_: true``, and for a computed one (``$``/``@``): it may be true when the job runs."""
    flag = node.get("_disabled_", False)
    if isinstance(flag, str):
        return flag.strip().lower() == "true" or flag.startswith(_CODE_PREFIXES)
    return bool(flag)


def _plain_text(value: Any) -> str | None:
    return value if isinstance(value, str) and value and not value.startswith(_CODE_PREFIXES) else None


def _is_component(node: Any) -> bool:
    return isinstance(node, dict) and "_target_" in node


def _parent(config: Mapping[str, Any], id_path: str) -> Any:
    parent = id_path.rsplit("::", 1)[0] if "::" in id_path else None
    return config if parent is None else get_by_id(config, parent)


def read_by_code(config: Mapping[str, Any]) -> set[str]:
    """Ids that a ``$`` expression passes to a reader (``glob.glob(@image_dir + '/*')``, ``torch.load(@ckpt)``)."""
    found: set[str] = set()
    for _, value in iter_ids(config):
        if isinstance(value, str) and value.startswith("$") and _READER.search(value):
            found.update(m[1:] for m in _REF.findall(normalize_id(value)) if len(m) > 1)
    return found


def _kind(key: str) -> str | None:
    if key in INPUT_DIRS:
        return "dir"
    if key in INPUT_FILES:
        return "file"
    if key in INPUT_PATHS:
        return "any"
    return None


def _dataset_files(config: Mapping[str, Any], id_path: str, node: dict, bundle_root: str | None
                   ) -> Iterator[InputPath]:
    """Files named in the literal ``data`` of a ``*Dataset`` component (what its LoadImaged will open)."""
    data_id = f"{id_path}::data" if id_path else "data"
    data, chain = follow(config, data_id, bundle_root)
    if not isinstance(data, list):
        return
    for i, item in enumerate(data[:MAX_DATA_ITEMS]):
        values = item.items() if isinstance(item, dict) else [(None, item)]
        for key, value in values:
            text = _plain_text(value)
            if text and looks_like_path(text) and text.lower().endswith(PATH_SUFFIXES):
                where = "::".join(str(p) for p in (chain[-1], i, key) if p is not None)
                yield InputPath(where, "any", text, [where], used_by=id_path)


def input_paths(config: Mapping[str, Any], bundle_root: str | None = None) -> Iterator[InputPath]:
    """Yield every value of ``config`` (macros expanded, with ``_meta_``) that is an input path, as above.

    Whether the run reads it (what runs refers to it; ``initialize`` does not make it) is the caller's test.
    """
    readers = read_by_code(config)
    disabled: list[str] = []
    for id_path, value in iter_ids(config):
        if id_path.startswith(META_KEY):
            continue  # metadata is followed into (``data: "@_meta_::datalist"``), never checked on its own
        if any(id_path.startswith(d + "::") for d in disabled):
            continue  # MONAI never builds a disabled component: its paths are not read
        if _is_component(value) and maybe_disabled(value):
            disabled.append(id_path)
            continue
        key = id_path.rsplit("::", 1)[-1]
        if _is_component(value) and str(value.get("_target_", "")).endswith("Dataset") and "data" in value:
            yield from _dataset_files(config, id_path, value, bundle_root)
        kind = _kind(key)
        if kind is None and key.endswith(PATTERN_ENDINGS) and normalize_id(id_path) in readers:
            kind = "any"
        if kind is None:
            continue
        if "::" in id_path and not _is_component(_parent(config, id_path)):
            continue  # a key of a plain mapping (`keys: {images: image}`), not an argument naming a path
        target, chain = follow(config, id_path, bundle_root)
        text = _plain_text(target)
        if text is None or (kind != "dir" and not looks_like_path(text)):
            continue
        yield InputPath(id_path, kind, text, chain)
