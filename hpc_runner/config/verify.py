"""``hpc-runner verify``: every check of a bundle that needs no data and no training, all problems at once.

MANIFEST (when there is one), metadata against the packaged schemas (offline: MONAI's semantics, then
hpc-runner's stricter checks, which ``run`` only warns about), every config file
(loads, merges, references, ``_target_`` imports and arguments), optionally ``--safe`` rules and the
network's input/output shapes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hpc_runner.config.loader import load_file
from hpc_runner.config.merge import locate
from hpc_runner.config.safe_mode import bundle_problems, policy_for_user
from hpc_runner.config.verify_configs import check_configs
from hpc_runner.config.verify_net import net_problems
from hpc_runner.errors import UserError
from hpc_runner.records.read import not_regular
from hpc_runner.registry.manifest import MANIFEST_NAME, diff_manifest, read_manifest
from hpc_runner.registry.metadata import STRICT_LABEL, metadata_problems
from hpc_runner.registry.problems import Problem, problems_error
from hpc_runner.registry.search import META_RELPATH

ENV_OVERRIDE_PREFIX = "HPCR__"


@dataclass
class VerifyReport:
    """What ``verify`` found: the bundle, every problem, and what was checked."""

    bundle_dir: Path
    name: str
    version: str
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Return True when no problem was found."""
        return not self.problems


def manifest_problems(bundle_dir: Path) -> tuple[list[Problem], str | None]:
    """Return one problem per file that differs from the MANIFEST, and a note (None without a MANIFEST)."""
    try:
        manifest = read_manifest(bundle_dir)
    except UserError as err:
        return [Problem(err.where, None, err.message)], None
    if manifest is None:
        return [], None
    diff = diff_manifest(bundle_dir, manifest)
    where = str(bundle_dir / MANIFEST_NAME)
    problems = [Problem(where, None, f"'{rel}' changed since the bundle was packed") for rel in diff.changed]
    problems += [Problem(where, None, f"'{rel}' is listed but missing") for rel in diff.missing]
    problems += [Problem(where, None, f"'{rel}' was added after the bundle was packed") for rel in diff.added]
    return problems, f"{MANIFEST_NAME} matches ({len(manifest)} files)" if diff.ok else None


def meta_problems(meta_path: Path) -> tuple[dict, dict[str, str], list[Problem]]:
    """Load the metadata; return it, ``{_meta_::id: file:line}`` and every schema problem."""
    try:
        loaded = load_file(meta_path)
    except UserError as err:
        return {}, {}, [Problem(err.where, None, err.message)]
    lines = {k: f"{meta_path}:{v}" for k, v in loaded.lines.items()}
    problems = []
    for p in metadata_problems(loaded.data):
        where = locate(lines, p.id_path) or f"{meta_path}:1"
        message = f"{p.message} ({STRICT_LABEL})" if p.strict else p.message
        problems.append(Problem(where, p.id_path or None, message))
    meta = loaded.data
    version, changelog = meta.get("version"), meta.get("changelog")
    if isinstance(changelog, dict) and changelog and isinstance(version, str) and version not in changelog:
        problems.append(Problem(locate(lines, "changelog") or str(meta_path), "changelog",
                                f"no entry for the current version {version}"))
    return meta, {f"_meta_::{k}": v for k, v in lines.items()}, problems


def verify_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the environment a bundle is verified with: no ``HPCR__`` overrides (the bundle as shipped)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if not k.startswith(ENV_OVERRIDE_PREFIX)}


def verify_bundle(
    bundle_dir: Path,
    *,
    imports: bool = True,
    net: bool = False,
    net_id: str = "network_def",
    safe: bool = False,
    check_manifest: bool = True,
    environ: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> VerifyReport:
    """Check a bundle without running it and return every problem found (``progress``: told each step as it
    starts; the CLI shows them on a terminal, since importing the targets and --net take seconds)."""
    step = progress or (lambda _: None)
    bundle_dir = Path(bundle_dir)
    env = verify_environ(environ)
    meta_path = bundle_dir / META_RELPATH
    report = VerifyReport(bundle_dir, bundle_dir.name, "?")
    if check_manifest:
        step("MANIFEST")
        found, note = manifest_problems(bundle_dir)
        report.problems += found
        if note:
            report.notes.append(note)
    step("metadata")
    if meta_path.is_file():
        meta, meta_where, found = meta_problems(meta_path)
        report.problems += found
        report.name = str(meta.get("name") or bundle_dir.name)
        report.version = str(meta.get("version", "?"))
        if not found:
            report.notes.append("metadata follows MONAI's schema and hpc-runner's stricter checks")
    else:
        meta, meta_where = {}, {}
        kind = not_regular(meta_path)  # a FIFO, a folder, a dangling link is there, named as what it is
        report.problems.append(Problem(str(meta_path), None, f"{kind}, not a regular file (every bundle needs "
                                       "configs/metadata.json as a file)" if kind else
                                       "missing (every bundle needs configs/metadata.json)"))
    # under --safe only allow-listed modules are imported (by the safe checks), nothing else runs
    step("configs" + (" and their _target_ imports" if imports and not safe else ""))
    sets, found, notes = check_configs(bundle_dir, meta, meta_where, meta_path if meta else None, env,
                                       imports=imports and not safe)
    report.problems += found
    report.notes += notes
    loaded = [s.cfg for s in sets if s.cfg is not None]
    unsafe: list[Problem] = []
    if safe and loaded:
        step("--safe rules")
        unsafe = _safe_problems(loaded, bundle_dir, env)
        report.problems += unsafe
        if not unsafe:
            report.notes.append("--safe rules pass")
    if unsafe and net:
        report.notes.append("--net skipped: building the network would run what --safe refuses")
    elif net and sets and sets[0].cfg is not None:
        step(f"the network {net_id} on a dummy input (--net)")
        found, note = net_problems(sets[0].cfg, net_id)
        report.problems += found
        if note:
            report.notes.append(note)
    seen: set[str] = set()
    report.problems = [p for p in report.problems if not (p.line() in seen or seen.add(p.line()))]
    return report


def _safe_problems(cfgs: list, bundle_dir: Path, environ: Mapping[str, str]) -> list[Problem]:
    try:
        policy = policy_for_user(environ)
    except UserError as err:
        return [Problem(err.where, err.id_path, err.message)]
    problems = []
    for i, cfg in enumerate(cfgs):
        try:
            problems += bundle_problems(cfg, policy, bundle_dir if i == 0 else None)
        except UserError:
            continue
    return problems


def check_packable(bundle_dir: Path) -> None:
    """Refuse to pack a bundle that does not load (``hpc-runner pack``: no imports, no MANIFEST check)."""
    report = verify_bundle(bundle_dir, imports=False, check_manifest=False)
    if report.problems:
        raise problems_error(report.problems, f"cannot pack {bundle_dir}", expected="a bundle that loads",
                             hint="'hpc-runner verify' checks it; fix the problems first")
