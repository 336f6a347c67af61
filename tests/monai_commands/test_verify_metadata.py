"""verify_metadata: MONAI's test_bundle_verify_metadata scenario through both runners (schema kept at --filepath)."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from tests.monai_commands.conftest import DATA, Workspace, assert_both_succeed, write_def_args

pytestmark = pytest.mark.slow


def test_verify_passes_with_the_schema_already_at_filepath(workspace: Workspace) -> None:
    """Both use an existing schema file (hash-checked) instead of downloading it, as MONAI's test does once
    its setUp has downloaded the schema."""
    schema = workspace.path / "schema" / "schema.json"
    schema.parent.mkdir()
    shutil.copyfile(DATA / "meta_schema_small.json", schema)
    md5 = hashlib.md5(schema.read_bytes()).hexdigest()
    write_def_args(workspace.path / "def_args.json", {"meta_file": "will be replaced by `meta_file` arg"})
    both = workspace.run_both("verify_metadata", "--meta_file", "data/metadata.json", "--filepath",
                              "schema/schema.json", "--hash_val", md5, "--args_file", "def_args.json")
    assert_both_succeed(both)
    assert both.hpcr.info()[-1] == "metadata is verified with no error."
    assert any("skipped downloading" in line for line in both.hpcr.info())
