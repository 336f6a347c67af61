"""What a stage ``from`` a select stage gets from its choice, and how it gets it before it starts.

A choice (written by the select stage into the pipeline record) names the chosen run dir and the
point's swept values. A stage that takes from it gets, on top of its own config and overrides
(pipeline/configs.py): each chosen value whose id its config has (unless the stage sets it itself:
e.g. ``network_def::channels`` reaches an evaluate config, ``learning_rate`` does not), and the weights
id (``ckpt``) set to the chosen run dir (inference/weights.py loads its model.pt).

Stages are queued before the choice is known, with a placeholder for the weights. The select stage's
job, once it has chosen and before it ends (the stages wait on it with ``afterok``), rewrites the
prepared config of each such stage: the run dir's config.yaml, or a sharded stage's base/config.yaml
(its points are made from it when they start). The file is replaced atomically, in the form the job
reads back (``load_recorded_config`` + ``expanded``), and overrides.yaml lists what came from the choice.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.config.display import to_plain
from hpc_runner.config.ids import has_id, normalize_id
from hpc_runner.config.overrides import Override
from hpc_runner.config.recorded import load_recorded_config
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.rundir import CONFIG_FILE, OVERRIDES_FILE, RunDir, dump_yaml, now_iso

SOURCE = "pipeline"


def choice_values(config: dict[str, Any], choice: dict[str, Any], own: Collection[str] = ()) -> tuple[dict, list]:
    """Return the chosen values a config takes (ids it has, not set by the stage itself) and the ids it has not."""
    mine = {normalize_id(k.lstrip("+")) for k in own}
    taken, skipped = {}, []
    for key, value in (choice.get("params") or {}).items():
        bare = normalize_id(str(key).lstrip("+"))
        if bare in mine:
            continue
        if has_id(config, bare):
            taken[bare] = value
        else:
            skipped.append(bare)
    return taken, skipped


def choice_overrides(cfg: BundleConfig, choice: dict[str, Any], weights_id: str,
                     own: Collection[str] = ()) -> list[Override]:
    """Return the overrides a stage's config takes from ``choice``: the chosen values, then the weights."""
    taken, _ = choice_values(cfg.config, choice, own)
    origin = f"chosen by {choice.get('stage')}: point {choice.get('point')} of {choice.get('from')}"
    out = [Override(k, v, SOURCE, origin) for k, v in taken.items()]
    out.append(Override(weights_id, str(choice["run_dir"]), SOURCE, origin))
    return out


def apply_choice(prepared: Path, choice: dict[str, Any], weights_id: str, own: Collection[str] = ()) -> dict:
    """Rewrite the prepared config in ``prepared`` (a run dir, or a sweep's base/) with the choice; return
    what was applied (recorded in its run.yaml under ``pipeline``)."""
    rd = RunDir(prepared)
    base, _ = load_recorded_config(prepared)
    overrides = choice_overrides(base, choice, weights_id, own)
    cfg = base.with_overrides(overrides, check=True)
    _, skipped = choice_values(base.config, choice, own)
    entries = rd.read_yaml(OVERRIDES_FILE) or []
    entries = [e for e in entries if not (isinstance(e, dict) and e.get("source") == SOURCE
                                          and e.get("id") in {o.id for o in overrides})]
    entries += [{"id": o.spelling(), "value": to_plain(o.value), "source": o.source, "origin": o.origin,
                 "replaced": None} for o in overrides]
    rd.write_yaml(OVERRIDES_FILE, entries)
    write_text_atomic(rd.file(CONFIG_FILE), dump_yaml(to_plain(cfg.expanded())))
    applied = {"at": now_iso(), "choice": {k: choice.get(k) for k in ("stage", "from", "point", "run_dir")},
               "values": {o.id: to_plain(o.value) for o in overrides}, "not_in_config": skipped}
    rd.update_record(pipeline=applied)
    return applied
