"""The inputs of an inference or evaluation run: a folder, a datalist file or a list, split into shards.

Every item gets a ``case`` (the image file name without ``.nii``/``.nii.gz``): outputs are named after
it, the manifest records it, and labels given as a folder are matched to images by it. Shards are
deterministic: the items are sorted by case and item ``i`` goes to shard ``i % num_shards``, so every
case lands in exactly one shard whatever machine computes the split.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import ConfigError, UserError
from hpc_runner.records.read import DATALIST_MAX_BYTES, parse_json_text, read_record_text

DATALIST_KEYS = ("testing", "test", "validation", "val", "inference")
_EXTENSIONS = (".nii.gz", ".nii", ".mha", ".nrrd", ".gz")


def case_name(path: str | os.PathLike) -> str:
    """Return the case name of an input file: its name without ``.nii``/``.nii.gz``."""
    name = Path(path).name
    for ext in (".nii.gz", ".nii"):
        if name.endswith(ext):
            return name[: -len(ext)]
    return name.split(".", 1)[0] or name


def _read_datalist(path: Path, key: str | None, id_path: str) -> list[Any]:
    expected = "a JSON list of files or of {'image': ...} items, or a MONAI datalist"
    try:  # the one bounded reader: a regular file of sensible size, its nesting bounded before it is parsed
        text = read_record_text(path, "datalist", DATALIST_MAX_BYTES, error=UserError)
        if text is None:
            raise UserError("the datalist does not exist", where=str(path))
        data = parse_json_text(text, path, "datalist", error=UserError)
    except UserError as err:
        raise UserError(f"the datalist cannot be read: {err.message}", where=err.where or str(path), id_path=id_path,
                        expected=expected) from None
    if isinstance(data, dict):
        keys = [key] if key else [k for k in DATALIST_KEYS if k in data]
        if not keys or keys[0] not in data:
            raise UserError(
                f"the datalist has no list under {key!r}" if key else "the datalist has none of the keys "
                + ", ".join(DATALIST_KEYS), where=str(path), id_path=id_path,
                expected=f"one of its keys ({', '.join(map(str, data))}) given as `key`")
        data = data[keys[0]]
    if not isinstance(data, list):
        raise UserError("the datalist is not a list", where=str(path), id_path=id_path,
                        expected="a JSON list of files or of {'image': ...} items")
    base = path.parent  # relative entries of a datalist file mean its folder, as MONAI's load_decathlon_datalist
    return [_rebase(item, base) for item in data]


def _rebase(item: Any, base: Path) -> Any:
    if isinstance(item, str):
        return item if os.path.isabs(item) else str(base / item)
    if isinstance(item, dict):
        return {k: (v if not isinstance(v, str) or os.path.isabs(v) or not _looks_like_file(v) else str(base / v))
                for k, v in item.items()}
    return item


def _looks_like_file(value: str) -> bool:
    return value.endswith(_EXTENSIONS)


def _items(source: Any, pattern: str, key: str | None, field: str, id_path: str) -> list[dict[str, Any]]:
    """Return ``source`` (folder, datalist file or list) as a list of dicts holding ``field``."""
    if isinstance(source, str | os.PathLike):
        path = Path(source).expanduser()
        if path.is_dir():
            files = sorted(p for p in path.glob(pattern) if not p.is_dir() and not p.name.startswith("."))
            if not files:
                raise UserError(f"no file in the folder matches {pattern!r}", where=str(path), id_path=id_path,
                                expected=f"NIfTI volumes matching `pattern` ({pattern!r})")
            raw: list[Any] = [str(p) for p in files]
        elif path.is_file() and path.suffix.lower() == ".json":
            raw = _read_datalist(path, key, id_path)
        elif path.is_file():
            raw = [str(path)]
        else:
            raise UserError(f"the input '{source}' does not exist", where=str(path), id_path=id_path,
                            expected="a folder of volumes, a datalist .json or a list of files")
    elif isinstance(source, Sequence):
        raw = list(source)
    else:
        raise ConfigError(f"cannot read inputs from a {type(source).__name__}", id_path=id_path,
                          expected="a folder, a datalist .json file or a list of files or dicts")
    items = []
    for n, item in enumerate(raw):
        if isinstance(item, str | os.PathLike):
            items.append({field: str(item)})
        elif isinstance(item, dict) and isinstance(item.get(field), str | os.PathLike):
            items.append(dict(item))
        else:
            raise ConfigError(f"item {n} of the inputs is {item!r}", id_path=id_path,
                              expected=f"a file name or a dict with a '{field}' file")
    return items


def _by_case(items: list[dict[str, Any]], field: str, id_path: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        case = str(item.get("case") or case_name(item[field]))
        if case in out:
            raise UserError(f"two inputs have the case name '{case}': {out[case][field]} and {item[field]}",
                            id_path=id_path, expected="one input per case name (outputs are named after it)")
        out[case] = {**item, "case": case}
    return out


def shard_of(items: list[dict[str, Any]], shard_index: int, num_shards: int) -> list[dict[str, Any]]:
    """Return shard ``shard_index`` of ``num_shards``: items sorted by case, item i to shard i % num_shards."""
    if not (isinstance(num_shards, int) and num_shards >= 1 and isinstance(shard_index, int)
            and 0 <= shard_index < num_shards):
        raise ConfigError(f"shard_index {shard_index!r} of num_shards {num_shards!r} is not a shard",
                          id_path="shard_index", expected="integers with 0 <= shard_index < num_shards")
    ordered = sorted(items, key=lambda item: item["case"])
    return ordered[shard_index::num_shards]


def inference_datalist(
    images: Any,
    labels: Any = None,
    *,
    pattern: str = "*.nii.gz",
    label_pattern: str | None = None,
    key: str | None = None,
    shard_index: int = 0,
    num_shards: int = 1,
    image_key: str = "image",
    label_key: str = "label",
    require_labels: bool = False,
) -> list[dict[str, Any]]:
    """Return this shard's items ``{image_key, [label_key], "case"}`` from a folder, datalist file or list.

    ``labels`` (a folder, datalist or list) are matched to the images by case name; items that already
    hold ``label_key`` (a datalist of pairs) keep theirs; ``require_labels`` (evaluation) refuses items
    left without one. Refused with one paragraph: no inputs, two
    inputs with one case name, a missing label, a shard that does not exist.
    """
    shard_index, num_shards = int(shard_index), int(num_shards)
    by_case = _by_case(_items(images, pattern, key, image_key, "images"), image_key, "images")
    if labels is not None:
        found = _by_case(_items(labels, label_pattern or pattern, key, label_key, "labels"), label_key, "labels")
        missing = sorted(c for c, item in by_case.items() if label_key not in item and c not in found)
        if missing:
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            where = str(labels) if isinstance(labels, str | os.PathLike) else None
            raise UserError(f"no label for the case(s) {shown}", where=where, id_path="labels",
                            expected="one label per image, with the image's file name")
        for case, item in by_case.items():
            if label_key not in item:
                item[label_key] = found[case][label_key]
    elif require_labels:
        missing = sorted(c for c, item in by_case.items() if label_key not in item)
        if missing:
            shown = ", ".join(missing[:3])
            raise ConfigError(f"{len(missing)} input(s) have no label ({shown}) and `labels` is not set",
                              id_path="labels", expected="a labels folder, datalist or list, or a datalist "
                              f"whose items hold '{label_key}'")
    return shard_of(list(by_case.values()), shard_index, num_shards)
