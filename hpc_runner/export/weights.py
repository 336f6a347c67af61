"""The weights an export loads: MONAI's ``--ckpt_file``/``--key_in_ckpt``, or an hpc-runner run dir.

A file is loaded as MONAI loads it (ignite's ``Checkpoint.load_objects``: with ``key_in_ckpt`` the
weights under that key, else the whole file as a state dict, or the entry named ``key_in_ckpt`` when
it has one), on the CPU so that weights saved on a GPU load on a login node too. A run dir of
``hpc-runner run`` stands for its ``model.pt``, else for its newest ``checkpoints/ckpt_*.pt`` (whose
weights are under ``network``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpc_runner.errors import UserError
from hpc_runner.records.rundir import CHECKPOINT_DIR

MODEL_FILE = "model.pt"  # what hpc-runner's Trainer writes at the end of a run (a state dict)
CHECKPOINT_KEY = "network"  # where the network's weights sit in hpc-runner's trainer checkpoints


def resolve_ckpt(ckpt_file: str | Path, key_in_ckpt: str) -> tuple[Path, str]:
    """Return the weights file ``ckpt_file`` names (a run dir: its model.pt or newest checkpoint) and its key."""
    from hpc_runner.engine.checkpoint import list_checkpoints  # deferred: imports torch
    path = Path(ckpt_file).expanduser()
    if path.is_file():
        return path, key_in_ckpt
    if path.is_dir():
        if (path / MODEL_FILE).is_file():
            return path / MODEL_FILE, key_in_ckpt
        found = list_checkpoints(path / CHECKPOINT_DIR)
        if found:
            return found[-1], key_in_ckpt or CHECKPOINT_KEY
        raise UserError(f"--ckpt_file names a folder with no {MODEL_FILE} and no {CHECKPOINT_DIR}/ckpt_*.pt",
                        where=str(path), expected="a checkpoint file, or an hpc-runner run dir with weights")
    raise UserError(f'Checkpoint file "{path}" not found (--ckpt_file)',
                    expected="an existing checkpoint file (MONAI's models/model.pt) or an hpc-runner run dir",
                    hint='Specify it with --ckpt_file (relative paths start at the working dir, or at --bundle_root '
                    'for the default models/model.pt)')


def _keys(obj: Any) -> str:
    keys = [str(k) for k in obj] if isinstance(obj, dict) else []
    return ", ".join(keys[:8]) + (", ..." if len(keys) > 8 else "")


def load_weights(net: Any, path: Path, key_in_ckpt: str) -> None:
    """Load the weights in ``path`` (under ``key_in_ckpt`` when nested) into ``net`` as MONAI's export does."""
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # not a torch file, truncated, or pickled objects beyond tensors
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        raise UserError(f"the checkpoint cannot be read: {type(exc).__name__}: {first}", where=str(path),
                        expected="a file written by torch.save holding a state dict (or a dict of them)") from None
    try:
        from ignite.handlers import Checkpoint
    except ImportError:  # MONAI's own fallback without ignite
        from monai.networks.utils import copy_model_state

        try:
            copy_model_state(dst=net, src=checkpoint if key_in_ckpt == "" else checkpoint[key_in_ckpt])
        except Exception as exc:
            raise _mismatch(path, key_in_ckpt, checkpoint, exc) from None
        return
    try:  # a key the file lacks loads the whole file, as in MONAI (ignite's rule for one object)
        Checkpoint.load_objects(to_load={key_in_ckpt: net}, checkpoint=checkpoint)
    except Exception as exc:  # keys or shapes of another network, or a nested file without --key_in_ckpt
        raise _mismatch(path, key_in_ckpt, checkpoint, exc) from None


def _mismatch(path: Path, key: str, checkpoint: Any, exc: BaseException) -> UserError:
    text = " ".join(str(exc).split())
    if len(text) > 400:
        text = text[:400] + " ..."
    nested = isinstance(checkpoint, dict) and any(isinstance(v, dict) for v in checkpoint.values())
    if nested and key not in checkpoint:
        hint = f"The file is a nested checkpoint (keys: {_keys(checkpoint)}): name the weights with --key_in_ckpt"
    else:
        hint = "Check that the config builds the network these weights were trained for"
    which = f" (--key_in_ckpt '{key}')" if key else ""
    return UserError(f"the weights{which} do not fit the network: {type(exc).__name__}: {text}", where=str(path),
                     hint=hint)
