"""Metadata: what MONAI's published schema accepts runs; hpc-runner's stricter checks are marked as such."""

from __future__ import annotations

import copy
import json

import pytest
from registry_helpers import ZOO

from hpc_runner.errors import BundleError
from hpc_runner.registry.metadata import check_metadata, metadata_problems

GENERATOR_SCHEMA = ("https://github.com/Project-MONAI/MONAI-extra-test-data/releases/download/0.8.1/"
                    "meta_schema_generator_ldm_20240318.json")


@pytest.fixture
def meta() -> dict:
    """The metadata of the zoo-like test bundle (valid under both schemas)."""
    return json.loads((ZOO / "configs" / "metadata.json").read_text())


def test_free_text_name_extra_fields_and_schema_key_pass_monai_semantics_but_not_the_stricter_check(meta) -> None:
    meta.update(name="Spleen CT segmentation", supported_apps={"x": 1}, anything_else=[1, 2])
    problems = metadata_problems(meta)
    assert [(p.id_path, p.strict) for p in problems] == [("name", True)]
    with pytest.warns(UserWarning, match=r"id 'name'.*hpc-runner stricter check; MONAI's schema accepts it"):
        check_metadata(meta, "metadata.json")  # runs, with a warning


def test_a_generator_bundle_needs_no_network_data_format_while_others_do(meta) -> None:
    del meta["network_data_format"]
    with pytest.raises(BundleError, match="required field 'network_data_format' is missing"):
        check_metadata(copy.deepcopy(meta), "metadata.json")
    meta["schema"] = GENERATOR_SCHEMA
    assert [(p.id_path, p.strict) for p in metadata_problems(meta)] == [("network_data_format", True)]


def test_what_only_hpc_runner_requires_is_strict_and_what_monai_requires_is_not(meta) -> None:
    meta.update(version="1.0", copyright="")
    meta["network_data_format"]["inputs"]["image"]["num_channels"] = 0
    del meta["authors"]
    found = {p.id_path: p.strict for p in metadata_problems(meta)}
    assert found == {"authors": False, "version": True, "copyright": True,
                     "network_data_format::inputs::image::num_channels": True}


def test_strict_check_turns_the_stricter_rules_into_errors(meta) -> None:
    meta["name"] = "Spleen CT segmentation"
    with pytest.raises(BundleError, match=r"does not match.*hpc-runner stricter check"):
        check_metadata(meta, "metadata.json", strict=True)
