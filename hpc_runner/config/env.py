"""Environment: ``HPCR__a__b=value`` per-id overrides and ``${env:NAME,default}`` expansion (no eval)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hpc_runner.config.ids import SEP
from hpc_runner.config.values import parse_value
from hpc_runner.errors import ConfigError

ENV_PREFIX = "HPCR__"
_ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?:,([^}]*))?\}")


def env_var_to_id(name: str) -> str:
    """Return the config id named by an ``HPCR__`` variable (``HPCR__a__b`` -> ``a::b``)."""
    return name[len(ENV_PREFIX) :].replace("__", SEP)


def id_to_env_var(id_path: str) -> str:
    """Return the ``HPCR__`` variable that overrides ``id_path`` (``a::b`` -> ``HPCR__a__b``)."""
    return ENV_PREFIX + id_path.replace("#", SEP).replace(SEP, "__")


def env_override_vars(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """Return ``(variable, raw value)`` for every ``HPCR__`` variable, sorted for a stable order."""
    return sorted((k, v) for k, v in environ.items() if k.startswith(ENV_PREFIX) and len(k) > len(ENV_PREFIX))


def has_env_refs(value: Any) -> bool:
    """Return True when a string value holds a ``${env:...}`` reference."""
    return isinstance(value, str) and "${env:" in value


def expand_env_refs(
    value: str, environ: Mapping[str, str], *, id_path: str, where: str | None, used: dict[str, str | None]
) -> Any:
    """Expand ``${env:NAME}``/``${env:NAME,default}`` in ``value``.

    A value that is exactly one reference is typed like a command-line value (``100`` -> int);
    a reference inside a longer string is substituted as text. ``used`` collects each variable
    read and its value (None when the default was taken).
    """

    def lookup(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            used[name] = environ[name]
            return environ[name]
        if default is not None:
            used[name] = None
            return default
        raise ConfigError(
            f"environment variable {name} is not set",
            where=where,
            id_path=id_path,
            expected=f"{name} in the environment, or a default as in ${{env:{name},value}}",
            hint=f"Under SLURM, pass it with sbatch --export=ALL,{name}=...",
        )

    whole = _ENV_REF.fullmatch(value.strip())
    if whole:
        return parse_value(lookup(whole), what=f"${{env:{whole.group(1)}}}")
    return _ENV_REF.sub(lookup, value)
