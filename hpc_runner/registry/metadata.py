"""Bundle metadata, validated offline: MONAI's schema semantics (must pass) and hpc-runner's stricter checks.

``metadata.schema.json`` accepts what MONAI's published metadata schemas accept (free-text names,
extra fields, the ``schema`` URL key): a bundle that MONAI runs, hpc-runner runs.
``metadata.strict.schema.json`` adds hpc-runner's own rules (a name usable as ``NAME@VERSION``, a
semantic version, non-empty descriptions): ``verify`` reports them as problems. ``run`` and ``config``
never refuse metadata (MONAI's runner never validates it): :func:`metadata_note` gives them one line to warn.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from hpc_runner.errors import BundleError
from hpc_runner.records.read import read_json_record

SCHEMA_DIR = Path(__file__).with_name("schemas")
SCHEMA_PATH = SCHEMA_DIR / "metadata.schema.json"
STRICT_SCHEMA_PATH = SCHEMA_DIR / "metadata.strict.schema.json"
STRICT_LABEL = "hpc-runner stricter check; MONAI's schema accepts it"


@dataclass(frozen=True)
class MetadataProblem:
    """One schema violation: the id path inside metadata.json and what is wrong."""

    id_path: str
    message: str
    strict: bool = False  # True: only hpc-runner's stricter schema objects, MONAI's accepts it


@lru_cache(maxsize=2)
def metadata_schema(strict: bool = False) -> dict:
    """Return the packaged metadata JSON schema (MONAI semantics, or hpc-runner's stricter additions)."""
    path = STRICT_SCHEMA_PATH if strict else SCHEMA_PATH
    schema = read_json_record(path, "packaged metadata schema")
    if schema is None:
        raise BundleError("the packaged metadata schema is missing", where=str(path),
                          expected="hpc-runner installed whole (reinstall it)")
    return schema


def _problems(meta: Any, schema: dict, strict: bool) -> list[MetadataProblem]:
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    problems = []
    for err in sorted(validator.iter_errors(meta), key=lambda e: [str(p) for p in e.absolute_path]):
        id_path = "::".join(str(p) for p in err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            id_path = "::".join(filter(None, [id_path, missing]))
            message = f"required field '{missing}' is missing"
        else:
            message = err.message
        problems.append(MetadataProblem(id_path, message, strict))
    return problems


def metadata_problems(meta: Any, *, strict: bool = True) -> list[MetadataProblem]:
    """Return every violation of MONAI's schema semantics, then (``strict``) of hpc-runner's stricter checks.

    A stricter problem at an id that already breaks MONAI's schema is left out (one report per id).
    """
    problems = _problems(meta, metadata_schema(False), False)
    if strict and isinstance(meta, dict):
        seen = {p.id_path for p in problems}
        problems += [p for p in _problems(meta, metadata_schema(True), True) if p.id_path not in seen]
    return problems


def check_metadata(meta: Any, where: str, *, strict: bool = False) -> None:
    """Raise BundleError for what MONAI's schema refuses; warn about hpc-runner's stricter checks.

    ``strict`` (for bundles shared through hpc-runner's registry) makes the stricter checks errors too.
    """
    problems = metadata_problems(meta)
    errors = [p for p in problems if strict or not p.strict]
    if errors:
        first = errors[0]
        more = f" ({len(errors) - 1} more problem(s); run 'hpc-runner verify' for all)" if len(errors) > 1 else ""
        label = f" ({STRICT_LABEL})" if first.strict else ""
        raise BundleError(
            f"invalid metadata: {first.message}{label}{more}",
            where=where,
            id_path=first.id_path or None,
            expected="metadata that follows the MONAI bundle specification (schema: hpc_runner/registry/"
            "schemas/metadata.schema.json)",
        )
    for p in problems:
        warnings.warn(f"{where}: id '{p.id_path}': {p.message} ({STRICT_LABEL}, so it runs; "
                      "'hpc-runner verify' reports it as a problem)", stacklevel=2)


def metadata_note(meta: Any, where: str) -> str | None:
    """Return one line saying what the schemas find in ``meta`` (for ``run``: a warning, never a refusal), else None."""
    problems = metadata_problems(meta)
    if not problems:
        return None
    first = problems[0]
    at = f"id '{first.id_path}': " if first.id_path else ""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    if all(p.strict for p in problems):
        why = f"{STRICT_LABEL}, so it runs; 'hpc-runner verify' reports it as a problem"
    else:
        why = "MONAI's runner does not check metadata either, so it runs; 'hpc-runner verify' lists every problem"
    return f"{where}: {at}{first.message}{more} ({why})"
