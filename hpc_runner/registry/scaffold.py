"""``hpc-runner init``: a new bundle copied from a template, with its own name, version and metadata.

The copy leaves out what a MANIFEST leaves out (caches, data, runs) and the template's MANIFEST and
docs; the template's name is replaced in the config files; metadata gets the new name, version
0.1.0, a changelog entry, the author and the installed monai/torch/numpy versions; docs/README.md
says how to run, verify, pack and install it. It is written to a temporary folder and renamed.
"""

from __future__ import annotations

import contextlib
import datetime
import getpass
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from importlib import metadata as importlib_metadata
from pathlib import Path

import hpc_runner
from hpc_runner.errors import BundleError
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import read_record_text
from hpc_runner.registry.archive import bundle_identity
from hpc_runner.registry.manifest import scan_bundle
from hpc_runner.registry.search import META_RELPATH, list_bundles

DEFAULT_TEMPLATE = "synthetic_seg"
FIRST_VERSION = "0.1.0"
NAME_PATTERN = re.compile(r"\A[A-Za-z][A-Za-z0-9_]*\Z")
SKIPPED = ("docs/README.md",)
CONFIG_SUFFIXES = (".json", ".yaml", ".yml")


def default_template() -> Path:
    """Return the default template: ``synthetic_seg`` on the search path, else the source checkout's copy."""
    found = list_bundles(name=DEFAULT_TEMPLATE)
    if found:
        return found[0].path
    checkout = Path(hpc_runner.__file__).resolve().parents[1] / "bundles" / DEFAULT_TEMPLATE
    if (checkout / META_RELPATH).is_file():
        return checkout
    raise BundleError(f"the default template '{DEFAULT_TEMPLATE}' is not on the search path",
                      expected="--from DIR|NAME naming the bundle to start from")


def installed_version(package: str, fallback: str = "") -> str:
    """Return the installed version of ``package`` (without a local ``+`` part), else ``fallback``."""
    try:
        return importlib_metadata.version(package).split("+")[0]
    except importlib_metadata.PackageNotFoundError:
        return fallback


def new_metadata(template_meta: dict, name: str, template: str, author: str) -> dict:
    """Return the metadata of a new bundle made from ``template_meta``."""
    meta = dict(template_meta)
    year = datetime.date.today().year
    meta.update(
        name=name,
        version=FIRST_VERSION,
        changelog={FIRST_VERSION: f"created by 'hpc-runner init' from {template}"},
        description=f"TODO: what {name} does, on which data. (Started from {template}: "
        f"{str(template_meta.get('description', '')).strip()})",
        authors=author,
        copyright=f"Copyright (c) {year} {author}",
        monai_version=installed_version("monai", str(meta.get("monai_version", ""))),
        pytorch_version=installed_version("torch", str(meta.get("pytorch_version", ""))),
        numpy_version=installed_version("numpy", str(meta.get("numpy_version", ""))),
    )
    return meta


def readme(name: str, template: str) -> str:
    """Return docs/README.md of a new bundle."""
    return f"""# {name}

TODO: describe the task, the data and the model, and how well it does.

Started from `{template}` with `hpc-runner init`. Edit `configs/train.*` (the training config) and
`configs/metadata.json` (what the network takes and returns, authors, version and changelog).

## Use

```
hpc-runner verify {name} --net                 # metadata, configs, imports, network shapes
hpc-runner run --bundle {name} --max_epochs 1  # train here; any id can be overridden
```

## Share

```
hpc-runner pack {name} --out dist/
hpc-runner install dist/{name}-<version>.tar.gz --to /shared/group/bundles
HPCR_BUNDLE_PATH=/shared/group/bundles hpc-runner run --bundle {name}
```

Bump `version` (and add a `changelog` entry) in `configs/metadata.json` for every change you share.
"""


def check_name(name: str) -> None:
    """Raise BundleError unless ``name`` is a usable bundle name."""
    if not NAME_PATTERN.match(name):
        raise BundleError(f"'{name}' is not a usable bundle name",
                          expected="letters, digits and '_', starting with a letter (e.g. spleen_seg)")


def write_new_bundle(name: str, dest: Path, fill: Callable[[Path], None]) -> Path:
    """Check ``name`` and ``dest``, let ``fill`` write the bundle into a staging folder, rename it to ``dest``.

    Nothing half-written is ever seen at ``dest``: an error in ``fill`` leaves it as it was.
    """
    check_name(name)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BundleError("the destination already exists and is not empty", where=str(dest),
                          expected="a new folder (--to DIR)")
    made = [p for p in (dest.parent, *dest.parent.parents) if not p.exists()]  # the folders made here, deepest first
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-init-", dir=dest.parent))
    done = False
    try:
        staged = tmp / name
        staged.mkdir()
        fill(staged)
        if dest.exists():
            dest.rmdir()
        staged.rename(dest)
        done = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        for folder in made if not done else ():  # nothing half-made is left: not even the empty bundles/
            with contextlib.suppress(OSError):
                folder.rmdir()
    return dest


def write_files(staged: Path, files: dict[str, str]) -> None:
    """Write ``files`` (relative path: text) under ``staged``."""
    for rel, text in files.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_text(text, encoding="utf-8")


def init_bundle(name: str, dest: Path, template: Path | None = None, *, author: str | None = None) -> Path:
    """Create bundle ``name`` in folder ``dest`` from ``template``; return ``dest``."""
    check_name(name)  # before the template is looked for: the name is the first mistake to show
    template = template or default_template()
    tname, tversion, tmeta = bundle_identity(template)

    def fill(staged: Path) -> None:
        for rel in scan_bundle(template).files:
            if rel in SKIPPED:
                continue
            target = staged / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(template / rel, target)
            if rel.startswith("configs/") and target.suffix in CONFIG_SUFFIXES and rel != META_RELPATH.as_posix():
                text = read_record_text(target, "template config", error=BundleError) or ""
                target.write_text(re.sub(rf"\b{re.escape(tname)}\b", name, text), encoding="utf-8")
        meta = new_metadata(tmeta, name, f"{tname} {tversion}", author or getpass.getuser())
        write_files(staged, {META_RELPATH.as_posix(): dumps_json(meta, indent=4) + "\n",
                             "docs/README.md": readme(name, f"{tname} {tversion}")})

    return write_new_bundle(name, dest, fill)


# ---------------------------------------------------------------- MONAI's init_bundle

# MONAI's text, byte for byte (its source continues the command's lines with backslash-newline, so they join)
MONAI_README = (
    "\n# Your Model Name\n\nDescribe your model here and how to run it, for example using `inference.json`:\n\n"
    "```\npython -m monai.bundle run             --meta_file /path/to/bundle/configs/metadata.json"
    "             --config_file /path/to/bundle/configs/inference.json             --dataset_dir ./input"
    "             --bundle_root /path/to/bundle\n```\n"
)


def init_monai_bundle(
    bundle_dir: str | Path,
    ckpt_file: str | Path | None = None,
    network: object | None = None,
    dataset_license: bool = False,
    metadata_str: dict | str | None = None,
    inference_str: dict | str | None = None,
) -> Path:
    """MONAI's ``init_bundle``: the same files with the same content, made in a temporary folder and renamed.

    ``ckpt_file`` may be an hpc-runner run dir (its model.pt is copied). Return the bundle folder.
    """
    from monai.bundle.utils import DEFAULT_INFERENCE, DEFAULT_METADATA

    metadata = DEFAULT_METADATA if metadata_str is None else metadata_str
    inference = DEFAULT_INFERENCE if inference_str is None else inference_str
    bundle = Path(bundle_dir).absolute()
    if bundle.exists():
        raise BundleError(f"Specified bundle directory '{bundle}' already exists", expected="a new folder name")
    if not bundle.parent.is_dir():
        raise BundleError(f"Parent directory of specified bundle directory '{bundle}' does not exist",
                          hint=f"Create it first: mkdir -p {bundle.parent}")
    weights = _init_weights(ckpt_file) if ckpt_file is not None else None
    tmp = Path(tempfile.mkdtemp(prefix=f".{bundle.name}-init-", dir=bundle.parent))
    try:
        staged = tmp / bundle.name
        for sub in ("configs", "models", "docs"):
            (staged / sub).mkdir(parents=True)
        for name, content in (("metadata.json", metadata), ("inference.json", inference)):
            text = json.dumps(content, indent=4) if isinstance(content, dict) else str(content)
            (staged / "configs" / name).write_text(text)
        (staged / "docs" / "README.md").write_text(MONAI_README)
        (staged / "LICENSE").write_text("Select a license and place its terms here\n")
        if dataset_license is True:
            (staged / "docs" / "data_license.txt").write_text("Select a license for dataset and place its terms here\n")
        if weights is not None:
            shutil.copyfile(weights, staged / "models" / "model.pt")
        elif network is not None:
            from monai.networks import save_state

            save_state(network, str(staged / "models" / "model.pt"))
        staged.rename(bundle)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return bundle


def _init_weights(ckpt_file: str | Path) -> Path:
    """The file to copy as models/model.pt: ``ckpt_file`` itself, or a run dir's model.pt."""
    path = Path(ckpt_file).expanduser()
    if path.is_dir() and (path / "model.pt").is_file():
        return path / "model.pt"
    if not path.is_file():
        raise BundleError("the checkpoint to copy does not exist" if not path.exists() else
                          "the folder holds no model.pt", where=str(path),
                          expected="a weights file, or an hpc-runner run dir with a model.pt")
    return path
