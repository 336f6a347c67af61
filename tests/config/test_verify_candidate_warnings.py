"""``verify`` tries several ways to load an overlay config (alone, over the file its name extends, over the main
config) and keeps the first that works; only that one's warnings are shown. Before, loading the overlay alone
warned "can't merge '+imports', 'imports' is not defined before" although the set checked (swin_unetr_btcv's
``inference_trt.json`` over ``inference.json``) merges fine."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from hpc_runner.config.verify_configs import check_configs


def _bundle(root: Path) -> Path:
    (root / "configs").mkdir(parents=True)
    base = {"imports": ["$import os"], "net": {"_target_": "monai.networks.nets.UNet"}, "run": ["$print(1)"]}
    (root / "configs" / "inference.json").write_text(json.dumps(base))
    (root / "configs" / "inference_trt.json").write_text(json.dumps({"+imports": ["$import glob"]}))
    return root


def test_an_overlay_that_merges_over_the_file_it_extends_gives_no_merge_warning(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        chosen, problems, _ = check_configs(bundle, {"name": "b"}, {}, None, {}, imports=False)
    assert [s.label(bundle) for s in chosen] == ["configs/inference.json",
                                                 "configs/inference_trt.json over configs/inference.json"]
    assert problems == []
    assert not [w for w in caught if "can't merge" in str(w.message)]  # before: one, from loading it alone


def test_the_chosen_sets_own_warning_is_still_shown(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path / "b")
    (bundle / "configs" / "inference.json").write_text(json.dumps({"run": ["$print(1)"]}))  # no imports to merge into
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_configs(bundle, {"name": "b"}, {}, None, {}, imports=False)
    merge = [str(w.message) for w in caught if "can't merge" in str(w.message)]
    assert len(merge) == 1 and "inference_trt.json" in merge[0]
