"""Check every sweep point against the bundle config before anything is submitted.

A point is valid when each of its overrides names an existing id (or adds one), has a value of the
right type, and the config still resolves (no missing or circular references). Checking 5,000 full
configs one by one costs seconds, so each distinct (id, value) is checked once: when the swept ids do
not nest and no value holds a reference, expression or ``${env:}``, a point is valid exactly when each
of its values is (a plain value cannot create a reference, and a removed id that something references
fails on its own). Otherwise every point is checked whole.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

from hpc_runner.config.bundle_config import BundleConfig
from hpc_runner.config.env import has_env_refs
from hpc_runner.config.ids import get_by_id, has_id, split_id
from hpc_runner.config.overrides import Override, check_value_type, point_override
from hpc_runner.config.safe_mode import EXPECTED, policy_for_user, safe_problems
from hpc_runner.config.values import PASS_THROUGH_PREFIXES
from hpc_runner.engine.sandbox_job import refuse_hidden_at_submission
from hpc_runner.errors import ClusterError, ConfigError
from hpc_runner.registry.problems import problems_error
from hpc_runner.sweep.spec import ADD_PREFIX, describe_point


def has_references(value: Any) -> bool:
    """Return True when ``value`` holds a string MONAI would resolve (``@``, ``$``, ``%``) or ``${env:}``."""
    if isinstance(value, str):
        return value.startswith(PASS_THROUGH_PREFIXES) or has_env_refs(value)
    if isinstance(value, dict):
        return any(has_references(k) or has_references(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_references(v) for v in value)
    return False


def _nested(ids: Sequence[str]) -> bool:
    keys = sorted({tuple(split_id(i.lstrip(ADD_PREFIX))) for i in ids})
    return any(b[: len(a)] == a for a, b in itertools.pairwise(keys))


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _point_error(n: int, point: dict[str, Any], exc: ConfigError) -> ClusterError:
    return ClusterError(
        f"sweep point {n} ({describe_point(point)}) is not valid, nothing was submitted: {exc.message.rstrip('.')}",
        where=exc.where,
        id_path=exc.id_path,
        expected=exc.expected,
        hint=exc.hint,
    )


def _cheap_ok(cfg: BundleConfig, ov: Override) -> bool:
    """True when a plain value replaces a plain value of the right type (no need to copy the config)."""
    if ov.add or has_references(ov.value) or not has_id(cfg.config, ov.id):
        return False
    old = get_by_id(cfg.config, ov.id)
    return not isinstance(old, dict | list) and check_value_type(old, ov.value) is None


def _value_key(value: Any) -> tuple[Any, ...]:
    """A hashable key of a swept value: scalars as themselves with their type (1, 1.0 and True differ), others as
    JSON (a point of 10,000 numbers needs no JSON text per value)."""
    if value is None or isinstance(value, str | int | float | bool):
        return (type(value), value)
    return (object, _key(value))


def distinct_values(points: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], tuple[int, str, Any]]:
    """Return each distinct (spelled id, value) of the points with the first point that has it: ``(n, id, value)``,
    in the order of the points (so the first bad value found is in the first bad point)."""
    seen: dict[tuple[Any, ...], tuple[int, str, Any]] = {}
    for n, point in enumerate(points):
        for spelled, value in point.items():
            key = (spelled, _value_key(value))
            if key not in seen:
                seen[key] = (n, spelled, value)
    return seen


def check_whole_numbers(cfg: BundleConfig, points: Sequence[dict[str, Any]],
                        distinct: dict[tuple[Any, ...], tuple[int, str, Any]] | None = None) -> None:
    """ClusterError naming the first point that gives a fraction (2.5) to an id the config holds as a whole number
    other than 0 (``batch_size: 2``): a sweep is many jobs, each would fail when it starts. (``run`` takes
    it, as MONAI does; a 0 may be a rate, ``weight_decay: 0``, so it takes fractions.)"""
    for n, spelled, value in (distinct if distinct is not None else distinct_values(points)).values():
        if not isinstance(value, float) or value.is_integer() or not math.isfinite(value):
            continue
        ov = point_override(spelled, value)
        if ov.add or not has_id(cfg.config, ov.id):
            continue
        old = get_by_id(cfg.config, ov.id)
        if isinstance(old, int) and not isinstance(old, bool) and old != 0:
            raise ClusterError(
                f"sweep point {n} ({describe_point(points[n])}) gives id '{ov.id}' the fraction {value!r}, and the "
                f"config holds it as a whole number ({old!r}); nothing was submitted", id_path=ov.id,
                where=cfg.where.get(ov.id),
                expected=f"whole numbers for {ov.id}, or --{ov.id} {float(old)!r} with the sweep if it takes "
                "fractions")


def check_points(cfg: BundleConfig, points: Sequence[dict[str, Any]]) -> str:
    """Raise ClusterError naming the first invalid point; return how the points were checked."""
    if not points:
        raise ClusterError("the sweep has no points")
    distinct = distinct_values(points)
    check_whole_numbers(cfg, points, distinct)
    ids = list(points[0])
    per_value = not _nested(ids) and not any(has_references(v) for _, _, v in distinct.values())
    if per_value:
        for n, spelled, value in distinct.values():
            ov = point_override(spelled, value)
            if not _cheap_ok(cfg, ov):
                try:
                    cfg.with_overrides([ov])
                except ConfigError as exc:
                    raise _point_error(n, points[n], exc) from None
        check_safe_points(cfg, points)
        return f"{len(distinct)} distinct values checked once each"
    for n, point in enumerate(points):
        try:
            cfg.with_overrides([point_override(k, v) for k, v in point.items()])
        except ConfigError as exc:
            raise _point_error(n, point, exc) from None
    check_safe_points(cfg, points)
    return f"{len(points)} points checked whole (nested ids or references in the values)"


def _may_matter(spelled_id: str, value: Any) -> bool:
    """False for a number, bool or null given to an id other than ``_disabled_``: it cannot change a target, an
    expression or a path (config/preflight.py decides for the rest)."""
    return not (value is None or isinstance(value, int | float | bool)) or spelled_id.endswith("_disabled_")


def preflight_overrides(points: Sequence[dict[str, Any]]) -> list[list[Override]]:
    """Each point's overrides for the pre-flight's ``check_points``, none for a point of numbers only (10,000
    points of a learning-rate grid build no Override)."""
    return [[point_override(k, v) for k, v in p.items()] if any(_may_matter(k, v) for k, v in p.items()) else []
            for p in points]


def check_safe_points(cfg: BundleConfig, points: Sequence[dict[str, Any]]) -> None:
    """With ``--safe``, raise ClusterError naming the first point whose config the allow-list refuses.

    The base config was checked when it was loaded; a swept value (a ``$`` expression, a ``_target_``, a
    writer's folder, a value a reference reaches) is checked here, before anything is written or queued,
    with the same check each job makes when it starts (config/safe_mode.py). Each distinct point once.
    """
    if not cfg.safe:
        return

    policy = policy_for_user()
    seen: set[str] = set()
    for n, point in enumerate(points):
        key = _key(point)
        if key in seen:
            continue
        seen.add(key)
        new = cfg.with_overrides([point_override(k, v) for k, v in point.items()], check=False)
        problems = safe_problems(new.expanded(), new.where, policy)
        if problems:
            err = problems_error(problems, f"--safe refuses sweep point {n} ({describe_point(point)}), nothing was "
                                 "submitted", expected=EXPECTED)
            raise ClusterError(err.message)

        refuse_hidden_at_submission(cfg, new.config, f"sweep point {n} ({describe_point(point)})")


def check_extra_overrides(cfg: BundleConfig, points: Sequence[dict[str, Any]], extra: Sequence[Override]) -> None:
    """Raise ClusterError when ``extra`` overrides (resume fixes) make any of ``points`` invalid."""
    combined = [{**p, **{o.spelling(): o.value for o in extra}} for p in points]
    check_points(cfg, combined)
