"""Options shared by the commands that load a bundle (run, config, submit, sweep, cache, verify)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from hpc_runner.config.bundle_config import load_bundle_config
from hpc_runner.config.overrides import load_args_file, parse_cli_overrides
from hpc_runner.config.safe_mode import check_safe
from hpc_runner.config.sandbox_marks import static_check_skipped
from hpc_runner.data.staging import (
    ENV as STAGE_ENV,
)
from hpc_runner.data.staging import (
    check_fits_before_queueing,
    checked_staging,
    parse_stage_settings,
    settings_from_env,
)
from hpc_runner.engine.profiler import DEFAULT_STEPS, ENV
from hpc_runner.engine.sandbox import checked_grant
from hpc_runner.engine.sandbox_job import refuse_hidden_at_submission
from hpc_runner.errors import UserError
from hpc_runner.registry.search import resolve_bundle
from hpc_runner.registry.trust import check_trust
from hpc_runner.scheduler.profiles import available_profiles
from hpc_runner.tracking.settings import parse_tracking_option

# commands whose overrides must name ids the config has: a typo in a swept or tuned id stops them before
# anything is queued (run, config and submit add unknown ids as MONAI's runner does, unless --strict-ids)
STRICT_ID_COMMANDS = ("sweep", "tune", "submit")
# commands that run the config: an added id nothing references (`--max_epoch 2`) cannot change the run, so it is
# refused with the id it looks like; one something references is added, as MONAI adds it
UNUSED_ID_COMMANDS = ("run",)


def add_bundle_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --bundle, --config_file, --meta_file and --args_file."""
    g = parser.add_argument_group("bundle")
    g.add_argument(
        "--bundle",
        metavar="DIR|NAME[@VERSION]",
        help="bundle folder, or a name on the search path ($HPCR_BUNDLE_PATH, then ./bundles); "
        "picks configs/train.* and configs/metadata.json",
    )
    g.add_argument(
        "--config_file",
        "--config-file",
        action="append",
        metavar="FILE[,FILE...]",
        help="config file(s), merged in order; repeatable, comma-separated or a list as the model zoo writes it, "
        "\"['configs/train.json','configs/evaluate.json']\" (default: <bundle>/configs/train.*)",
    )
    g.add_argument(
        "--meta_file", "--meta-file", metavar="FILE",
        help="metadata file(s), merged in order (default: <bundle>/configs/metadata.json, else metadata.json "
        "beside the first config file, as MONAI)"
    )
    g.add_argument(
        "--args_file",
        "--args-file",
        metavar="FILE",
        help="YAML/JSON mapping of id: value overrides (below env and CLI)",
    )
    g.add_argument(
        "--logging_file",
        "--logging-file",
        metavar="FILE|False",
        help="logging INI file applied with logging.config.fileConfig before the run, as MONAI does "
        "(default: logging.conf beside the first config file; False: leave logging alone)",
    )
    g.add_argument("--run_id", "--run-id", metavar="ID", help="MONAI's spelling of ENTRY (the id to run)")
    g.add_argument("--init_id", "--init-id", metavar="ID",
                   help="id run before ENTRY (default initialize; optional in the config), as MONAI's --init_id")
    g.add_argument("--final_id", "--final-id", metavar="ID",
                   help="id run after ENTRY, even when it fails (default finalize; optional), as MONAI's --final_id")
    g.add_argument(
        "--strict-ids", "--strict_ids", dest="strict_ids", action="store_true",
        help="refuse an override of an id the config does not have (default: add it with a warning, as MONAI's "
        "runner does; sweep and tune always refuse, --+ID always adds)",
    )
    g.add_argument(
        "--tracking",
        metavar="mlflow|FILE",
        help="log the run to MLflow (as MONAI's --tracking: `mlflow`, or a JSON/YAML settings file); store from "
        "the file, $MLFLOW_TRACKING_URI or the user config, else mlflow.db beside the run (docs/tracking.md)",
    )
    g.add_argument(
        "--trust",
        action="store_true",
        help="use the bundle even if its files no longer match its MANIFEST (see 'hpc-runner verify'), and drop "
        "MONAI's warning that its configs run code",
    )
    g.add_argument(
        "--safe",
        action="store_true",
        help="refuse $ expressions and _target_ outside monai, torch, hpc_runner and the safe_targets of "
        "~/.config/hpc-runner/config.yaml ($HPCR_CONFIG); `run --safe` also runs the bundle in a bubblewrap "
        "sandbox (docs/security.md)",
    )


def add_writable_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--writable DIR`` and ``--readable DIR``: what the --safe sandbox may write and read besides the run dir
    (the only grants: engine/sandbox.py ``checked_grant`` refuses /, $HOME, a parent of either, a link)."""
    parser.add_argument(
        "--writable", action="append", metavar="DIR",
        help="with --safe: the sandbox lets the run (or each job) write DIR too (a dataset or cache folder you "
        "chose; the run dir and --cache_dir always); repeatable",
    )
    parser.add_argument(
        "--readable", action="append", metavar="DIR",
        help="with --safe: the sandbox lets the run (or each job) read DIR too (it shows only the system, Python, "
        "hpc-runner, the bundle, the current folder and what you name); repeatable",
    )


def add_preflight_argument(parser: argparse.ArgumentParser) -> None:
    """Add --no-preflight (run, submit, sweep, resume)."""
    parser.add_argument(
        "--no-preflight",
        "--no_preflight",
        dest="no_preflight",
        action="store_true",
        help="skip the pre-flight (every _target_ imports, every $ expression compiles, input paths exist, "
        "the scheduler would accept the resources: sbatch --test-only, qsub -w v)",
    )


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --torch-profile and --torch-profile-steps (run; submit and sweep pass them to their jobs the same way).

    ``--profile`` stays an alias of --torch-profile: a cluster profile is chosen with ``--cluster NAME`` (and
    ``--profile NAME``, naming one, is refused saying so: ``cluster_profile_mixup``)."""
    parser.add_argument(
        "--torch-profile", "--torch_profile", "--profile", dest="profile",
        action="store_true",
        help="run torch.profiler over a few training steps after warm-up: a trace for Perfetto/TensorBoard "
        "and the top operators by self time in RUN_DIR/profile/ (sets HPCR_PROFILE, which jobs inherit; "
        "--profile is its old name; a cluster profile is --cluster NAME)",
    )
    parser.add_argument(
        "--torch-profile-steps", "--torch_profile_steps", "--profile-steps", "--profile_steps", dest="profile_steps",
        type=_positive_steps, metavar="N",
        help="with --torch-profile: the number of steps to record (default 3, after 1 skipped and 1 warm-up)",
    )


PROFILE_ALIASES = ("--profile", "--torch-profile", "--torch_profile")


def cluster_profile_mixup(parser: argparse.ArgumentParser, tokens: list[str]) -> UserError | None:
    """Return the error for ``--profile jade`` where jade is a cluster profile (--profile is torch.profiler here;
    the docs call jade a "cluster profile"); None when the word after it names none."""
    for i, tok in enumerate(tokens):
        name, eq, value = tok.partition("=")
        if name not in PROFILE_ALIASES:
            continue
        word = value if eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
        if not word or word.startswith("-"):
            continue

        try:
            known = word in available_profiles()
        except (OSError, UserError):
            known = False
        if not known:
            continue
        has_cluster = "--cluster" in parser._option_string_actions
        meant = f"--cluster {word}" if has_cluster else f"`hpc-runner submit ... --cluster {word}` (run runs here)"
        return UserError(
            f"{name} {word}: {name} turns on torch.profiler (it takes no value), and {word} is a cluster profile "
            f"(did you mean {meant}?); nothing was run or queued",
            expected=f"--cluster {word} to use the cluster profile, --torch-profile (no value) to profile the steps",
        )
    return None


def _positive_steps(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of steps") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: profile at least 1 step")
    return value


@contextlib.contextmanager
def profile_request(args: argparse.Namespace) -> Iterator[None]:
    """Set HPCR_PROFILE for the duration when --torch-profile (or its steps) was given; restore it after."""
    steps = getattr(args, "profile_steps", None)
    if not getattr(args, "profile", False) and steps is None:
        yield
        return

    with environment_setting(ENV, str(steps or DEFAULT_STEPS)):
        yield


@contextlib.contextmanager
def environment_setting(name: str, value: str) -> Iterator[None]:
    """Set the environment variable ``name`` to ``value`` for the duration (jobs started meanwhile inherit it)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def load_config_from_args(args: argparse.Namespace, **kwargs: Any):
    """Return the BundleConfig that the parsed arguments and overrides describe.

    A bundle whose files differ from its MANIFEST is refused unless ``--trust``; with ``--safe``
    the loaded config must be declarative and allow-listed.
    """
    _check_monai_flags(args)
    if (getattr(args, "writable", None) or getattr(args, "readable", None)) and not getattr(args, "safe", False):
        raise UserError("--writable and --readable name what the --safe sandbox may write and read; without --safe "
                        "every folder is",
                        expected="--safe --writable DIR, or neither")
    bundle = args.bundle
    if bundle:
        # resolve once, so the folder checked is the folder loaded
        bundle_dir = resolve_bundle(str(bundle))
        check_trust(bundle_dir, trust=getattr(args, "trust", False))
        bundle = str(bundle_dir)
    typos = getattr(args, "option_typos", None) or {}
    try:
        cfg = load_bundle_config(
            bundle=bundle,
            config_files=args.config_file,
            meta_file=args.meta_file,
            args_file=args.args_file,
            cli_overrides=parse_cli_overrides(getattr(args, "override_tokens", [])),
            logging_file=getattr(args, "logging_file", None),
            entry=getattr(args, "entry", None),
            strict_ids=bool(getattr(args, "strict_ids", False)) or getattr(args, "command", None) in STRICT_ID_COMMANDS,
            refuse_unused_ids=getattr(args, "command", None) in UNUSED_ID_COMMANDS,
            tracking=getattr(args, "tracking_settings", None),
            **kwargs,
        )
    except UserError as err:
        if err.id_path in typos:  # `--clsuter jade`: a mistyped option, not an id the config lacks
            raise UserError(
                f"--{err.id_path} is not an option of hpc-runner {args.command} (did you mean {typos[err.id_path]}?) "
                f"nor an id of the config; nothing was run or queued", where=err.where, id_path=err.id_path,
                expected=f"{typos[err.id_path]} VALUE, or --+{err.id_path} VALUE to add that id to the config",
            ) from None
        raise
    cfg.init_id = getattr(args, "init_id", None) or cfg.init_id
    cfg.final_id = getattr(args, "final_id", None) or cfg.final_id

    if getattr(args, "safe", False) and not static_check_skipped():  # the switch is test-only, sandbox-only

        check_safe(cfg)
    cfg.trusted = bool(getattr(args, "trust", False))
    cfg.safe = bool(getattr(args, "safe", False))
    if cfg.safe:  # the folders the sandbox of this run (or of its jobs) may write and read besides the run dir
        cfg.sandbox_writable = tuple(named_writable(args))
        cfg.sandbox_readable = tuple(named_readable_grants(args))
        if getattr(args, "command", None) in ("submit", "sweep"):  # a path its jobs' sandbox hides: before queueing

            refuse_hidden_at_submission(cfg)
    cfg.tracking = getattr(args, "tracking_settings", None)  # recorded in the run dir by prepare_run
    if getattr(args, "command", None) in STRICT_ID_COMMANDS:  # submit, sweep, tune: before anything is queued
        check_stage_before_queueing(cfg)
    return cfg


def tracking_settings(args: argparse.Namespace, options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """Return the settings of ``--tracking`` (or MONAI's args_file ``tracking``), None without it; exit 2 if bad."""
    value = getattr(args, "tracking", None)
    where = None
    if value is None and (options or {}).get("tracking") is not None:
        value, where = options["tracking"], str(args.args_file)  # type: ignore[index]
    if value is None:
        return None

    return parse_tracking_option(value, where)


def _check_monai_flags(args: argparse.Namespace) -> None:
    """Take MONAI's run options from an args file as MONAI does (the command line wins); map --run_id to ENTRY."""
    options: dict[str, Any] = {}
    if getattr(args, "args_file", None):
        options = load_args_file(args.args_file)[1]  # MONAI's args_file may set these too
    for flag in ("init_id", "final_id"):
        value = getattr(args, flag, None)
        if value is None and options.get(flag) is not None:
            value = options[flag]
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise UserError(f"--{flag} {value!r} is not an id", where=str(args.args_file) if options else None,
                            expected="an id of the config, e.g. --init_id setup")
        setattr(args, flag, value)
    args.tracking_settings = tracking_settings(args, options)
    run_id = getattr(args, "run_id", None) or options.get("run_id")
    if run_id is not None and hasattr(args, "entry"):
        if args.entry and args.entry != run_id:
            raise UserError(f"ENTRY '{args.entry}' and --run_id '{run_id}' disagree",
                            expected="one of them (both name the id to run)")
        args.entry = str(run_id)


def cli_values(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """The (id, value) of every override on the command line."""
    return [(o.id, o.value) for o in parse_cli_overrides(getattr(args, "override_tokens", []))]


def named_writable(args: argparse.Namespace) -> list[str]:
    """The folders the user named for writing: ``--cache_dir DIR`` (an override) and every ``--writable DIR``."""
    found = [("--cache_dir", str(v)) for k, v in cli_values(args) if k == "cache_dir" and isinstance(v, str) and v]
    found += [("--writable", p) for p in getattr(args, "writable", None) or []]
    return [checked_grant(p, option) for option, p in found]


def named_readable_grants(args: argparse.Namespace) -> list[str]:
    """The folders the user named for reading under the sandbox's hidden ones: every ``--readable DIR``."""
    return [checked_grant(p, "--readable") for p in getattr(args, "readable", None) or []]


def add_stage_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --stage, --stage-dir, --stage-max-gb, --stage-clean and --read-slots (run, submit, sweep, tune, pipeline:
    one group, so the words and their meaning are the same everywhere; docs/data-on-the-cluster.md)."""
    g = parser.add_argument_group("data on the node (docs/data-on-the-cluster.md)")
    g.add_argument(
        "--stage", action="store_true",
        help="copy the folders of dataset_dir and cache_dir to node-local disk once per node and dataset version, "
        "and read the copy (the profile's stage: sets where; default the job's scratch folder, else $TMPDIR)",
    )
    g.add_argument("--stage-dir", "--stage_dir", dest="stage_dir", metavar="DIR",
                   help="with --stage: the node-local folder (absolute, or $VAR/...; {node} is the node's name)")
    g.add_argument("--stage-max-gb", "--stage_max_gb", dest="stage_max_gb", metavar="GB",
                   help="with --stage: at most this much staged on a node; the least recently used copies go first")
    g.add_argument("--stage-clean", "--stage_clean", dest="stage_clean", metavar="lru|never|end",
                   help="with --stage: lru (default) removes the least recently used copies to make room; "
                   "never keeps them; end also removes a sweep's copy when its last point on the node ends")
    g.add_argument("--read-slots", "--read_slots", dest="read_slots", metavar="N",
                   help="with --stage: at most N files read from shared storage at once per node (default 4), "
                   "whatever the number of tasks or transform threads (without --stage: HPCR_READ_SLOTS)")


def _stage_options(args: argparse.Namespace) -> dict[str, Any]:
    """The --stage options as the keys of a ``stage:`` mapping (None where not given)."""
    return {k: getattr(args, a, None) for k, a in (("where", "stage_dir"), ("max_gb", "stage_max_gb"),
                                                    ("clean", "stage_clean"), ("read_slots", "read_slots"))}


def stage_settings_from_args(args: argparse.Namespace) -> Any:
    """The StageSettings that --stage and its options state (None without --stage); exit 2 on a bad value."""
    given = _stage_options(args)
    if not getattr(args, "stage", False):
        named = [f"--{a.replace('_', '-')}" for a, v in zip(("stage_dir", "stage_max_gb", "stage_clean", "read_slots"),
                                                            given.values(), strict=True) if v is not None]
        if named:
            raise UserError(f"{', '.join(named)} only set how --stage copies the data; without --stage nothing is "
                            "staged", expected="--stage with them, or neither")
        return None
    return parse_stage_settings({k: v for k, v in given.items() if v is not None}, "--stage options")


# the options --stage was given with, while its command runs (stage_request): a profile's stage: fills in the rest
_STAGE_GIVEN: list[dict[str, Any]] = []


@contextlib.contextmanager
def stage_request(args: argparse.Namespace) -> Iterator[None]:
    """Set HPCR_STAGE (which jobs inherit) for the duration when --stage was given; a cluster profile's ``stage:``
    (``apply_profile_stage``) may set it meanwhile. HPCR_STAGE is as before afterwards, either way."""

    settings = stage_settings_from_args(args)
    before = os.environ.get(STAGE_ENV)
    try:
        if settings is not None:
            os.environ[STAGE_ENV] = settings.to_env()
            _STAGE_GIVEN.append({k: v for k, v in _stage_options(args).items() if v is not None})
        yield
    finally:
        if settings is not None:
            _STAGE_GIVEN.pop()
        if before is None:
            os.environ.pop(STAGE_ENV, None)
        else:
            os.environ[STAGE_ENV] = before


def apply_profile_stage(profile: Any) -> None:
    """A profile's ``stage:`` becomes HPCR_STAGE for the jobs; with --stage, the options given on the command line
    win over the profile's (a bare --stage stages where the profile says)."""

    raw = profile.get("stage")
    if raw is not None and raw is not False and (_STAGE_GIVEN or not os.environ.get(STAGE_ENV)):
        settings = parse_stage_settings(raw, profile.where)  # the profile's own, checked as it is written
        if _STAGE_GIVEN:
            own = {"where": raw} if isinstance(raw, str) else dict(raw) if isinstance(raw, dict) else {}
            settings = parse_stage_settings({**own, **_STAGE_GIVEN[-1]}, profile.where)
        os.environ[STAGE_ENV] = settings.to_env()
    if os.environ.get(STAGE_ENV) and checked_staging(profile.settings, settings_from_env(),
                                               partition=profile.get("partition")) is None:
        os.environ.pop(STAGE_ENV, None)  # `cluster check` found no scratch: staging off (said once)


def check_stage_before_queueing(cfg: Any, where: str = "--stage") -> None:
    """Exit 2 before anything is queued when the data cannot fit on a node whose scratch size the settings state."""
    settings = settings_from_env()
    if settings is not None:
        check_fits_before_queueing(cfg.expanded(), settings, where)
