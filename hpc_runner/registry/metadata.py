"""Bundle metadata: validated offline against the JSON schema shipped in this package."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hpc_runner.errors import BundleError

SCHEMA_PATH = Path(__file__).with_name("schemas") / "metadata.schema.json"


@dataclass(frozen=True)
class MetadataProblem:
    """One schema violation: the id path inside metadata.json and what is wrong."""

    id_path: str
    message: str


@lru_cache(maxsize=1)
def metadata_schema() -> dict:
    """Return the packaged metadata JSON schema."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def metadata_problems(meta: Any) -> list[MetadataProblem]:
    """Return every schema violation in ``meta`` (empty when valid), in document order."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(metadata_schema())
    problems = []
    for err in sorted(validator.iter_errors(meta), key=lambda e: [str(p) for p in e.absolute_path]):
        id_path = "::".join(str(p) for p in err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            id_path = "::".join(filter(None, [id_path, missing]))
            message = f"required field '{missing}' is missing"
        else:
            message = err.message
        problems.append(MetadataProblem(id_path, message))
    return problems


def check_metadata(meta: Any, where: str) -> None:
    """Raise BundleError naming the file and field when ``meta`` breaks the schema."""
    problems = metadata_problems(meta)
    if problems:
        first = problems[0]
        more = f" ({len(problems) - 1} more problem(s); run 'hpc-runner verify' for all)" if len(problems) > 1 else ""
        raise BundleError(
            f"invalid metadata: {first.message}{more}",
            where=where,
            id_path=first.id_path or None,
            expected="metadata that follows the MONAI bundle specification (schema: hpc_runner/registry/"
            "schemas/metadata.schema.json)",
        )
