"""MONAI's ``run_workflow``: create a ``BundleWorkflow`` (ConfigWorkflow, a class path, a PythonicWorkflow), check
its properties, run and finalize it.

The workflow is created by MONAI's own ``create_workflow`` (same class lookup, same keywords, same
``initialize``), so it behaves as under ``python -m monai.bundle run_workflow``. Added here: a class,
config file or keyword that cannot work is one paragraph (exit 2) before anything runs; with
``--workflow_type`` the workflow's properties are checked before ``run`` (missing required ones are
reported; ``submit`` refuses them before queueing); ``--trust`` leaves out MONAI's code-in-config warning.

For a ConfigWorkflow the properties are checked by config id, without building them: MONAI's
``check_properties`` builds every property (the trainer, its datasets) and raises KeyError on the first
missing one, where a list of every missing property is wanted.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.errors import ConfigError, UserError
from hpc_runner.monai_cli.arguments import config_paths, load_config_parser, load_file
from hpc_runner.records.read import parse_json_text, read_record_text

TAG = "run_workflow"
CONFIG_WORKFLOW = "ConfigWorkflow"


@dataclass
class WorkflowPlan:
    """A checked run_workflow: the class and the keywords it will be created with."""

    workflow_class: Any
    kwargs: dict
    workflow_type: str | None  # as given (None: not given, MONAI checks nothing)
    problems: list[str] = field(default_factory=list)  # properties missing or referenced under a wrong id


def resolve_workflow_class(name: Any) -> Any:
    """Return the workflow class ``name`` names as MONAI's create_workflow finds it (monai.bundle, then a path)."""
    from monai.bundle import BundleWorkflow, ConfigWorkflow
    from monai.utils import optional_import

    if name is None:
        return ConfigWorkflow
    if isinstance(name, str):
        cls, found = optional_import("monai.bundle", name=name)
        if not found:
            from pydoc import locate

            try:
                cls = locate(name)
            except Exception as exc:  # the module exists but fails to import
                raise UserError(f"the workflow class {name} (--workflow_name) cannot be imported: "
                                f"{type(exc).__name__}: {exc}") from None
        if cls is None:
            raise UserError(f"cannot locate specified workflow class: {name} (--workflow_name)",
                            expected="a class of monai.bundle (ConfigWorkflow) or an importable dotted path "
                            "(package.module.Class) to a BundleWorkflow subclass",
                            hint="A class in the bundle's scripts/ needs the bundle folder on PYTHONPATH (or run "
                            "from it)")
        name = cls
    if not (inspect.isclass(name) and issubclass(name, BundleWorkflow)):
        raise UserError(f"Argument `workflow_name` must be a bundle workflow class name or subclass of "
                        f"BundleWorkflow, got: {name} (--workflow_name)")
    return name


def _required_ids(workflow_type: str | None, properties_path: str | None) -> dict[str, dict]:
    """The properties a ConfigWorkflow of ``workflow_type`` checks, as BundleWorkflow.__init__ picks them."""
    from monai.bundle.properties import InferProperties, MetaProperties, TrainProperties

    kind = None
    if workflow_type is not None:
        low = str(workflow_type).lower()
        if low in ("train", "training"):
            kind = "train"
        elif low in ("infer", "inference", "eval", "evaluation"):
            kind = "infer"
        else:
            raise UserError(f"Unsupported workflow type: '{workflow_type}' (--workflow_type)",
                            expected="train, training, infer, inference, eval or evaluation")
    if properties_path is not None:
        path = Path(properties_path)

        text = read_record_text(path, "property file", error=ConfigError)
        if text is None:
            raise UserError(f"Property file {path} does not exist (--properties_path)")
        props = parse_json_text(text, path, "property file", error=ConfigError)
        if not isinstance(props, dict):
            raise ConfigError("the property file is not a JSON object", where=str(path))
        chosen = dict(props.get(kind, {})) if kind else {}
        chosen.update(props.get("meta", {}))
        return chosen
    if kind == "train":
        return {**TrainProperties, **MetaProperties}
    if kind == "infer":
        return {**InferProperties, **MetaProperties}
    return dict(MetaProperties)


def config_property_problems(parser: Any, workflow_type: str | None, properties_path: str | None = None) -> list[str]:
    """Return ConfigWorkflow's check_properties answer by config id (nothing is built): missing required
    properties, then optional ones referenced under a wrong id."""
    from monai.bundle.utils import EXPR_KEY, ID_REF_KEY, ID_SEP_KEY
    from monai.utils import BundleProperty, BundlePropertyConfig

    props = _required_ids(workflow_type, properties_path)
    missing = [n for n, p in props.items() if p.get(BundleProperty.REQUIRED, False)
               and p.get(BundlePropertyConfig.ID) is not None and p[BundlePropertyConfig.ID] not in parser]
    wrong = []
    for name, p in props.items():  # ConfigWorkflow._check_optional_id
        ref_id = p.get(BundlePropertyConfig.REF_ID)
        if p.get(BundleProperty.REQUIRED, False) or ref_id is None:
            continue
        ref = None
        if name in ("evaluator", "val_interval"):
            handlers = parser.get(f"train{ID_SEP_KEY}handlers") or []
            for h in handlers if isinstance(handlers, list) else []:
                if isinstance(h, dict) and h.get("_target_") == "ValidationHandler":
                    ref = h.get(ref_id)
        else:
            ref = parser.get(ref_id, None)
        if isinstance(ref, str) and not ref.startswith(EXPR_KEY) and ref != ID_REF_KEY + p[BundlePropertyConfig.ID]:
            wrong.append(name)
    return [*(f"{n} (required; config id '{props[n][BundlePropertyConfig.ID]}')" for n in missing),
            *(f"{n} (optional; referenced under another id)" for n in wrong)]


def _config_parser_of(kwargs: dict) -> Any:
    """The ConfigWorkflow's config (files, metadata, overrides) read as its __init__ reads it; nothing runs."""
    config_file = kwargs.get("config_file")
    if config_file is None:
        raise UserError("run_workflow with ConfigWorkflow needs --config_file",
                        expected="the config file(s), e.g. --config_file configs/train.json")
    files = config_paths(config_file)
    meta = kwargs.get("meta_file")
    if meta is None:
        root = Path(files[0]).parent
        meta = str(root / "metadata.json")
    metas = [m for m in config_paths(meta) if Path(m).is_file()]  # MONAI only logs a missing metadata file
    known = set(inspect.signature(_config_workflow_init()).parameters)
    overrides = {k: v for k, v in kwargs.items() if k not in known}
    return load_config_parser(files if len(files) > 1 else files[0], metas or None, overrides)


def _config_workflow_init() -> Any:
    from monai.bundle import ConfigWorkflow

    return ConfigWorkflow.__init__


def plan_workflow(workflow_name: Any = None, args_file: str | None = None, **kwargs: Any) -> WorkflowPlan:
    """Merge the arguments as MONAI's create_workflow does and check what can be checked without running code."""
    from monai.bundle import ConfigWorkflow, update_kwargs

    if args_file is not None:
        content = load_file(str(args_file), "the --args_file")
        if not isinstance(content, dict):
            raise ConfigError(f"the --args_file holds a {type(content).__name__}, not a mapping",
                              where=str(args_file))
    merged = update_kwargs(args=args_file, workflow_name=workflow_name, **kwargs)
    cls = resolve_workflow_class(merged.pop("workflow_name", None))
    workflow_type = merged.get("workflow_type")
    plan = WorkflowPlan(cls, merged, workflow_type)
    if issubclass(cls, ConfigWorkflow):
        parser = _config_parser_of(merged)
        run_id = merged.get("run_id", "run")
        if run_id not in parser:
            raise ConfigError(f"run ID '{run_id}' doesn't exist in the config file",
                              where=", ".join(map(str, [merged["config_file"]])), id_path=str(run_id),
                              hint="Name the id to run with --run_id (e.g. --run_id training)")
        if workflow_type is not None:
            plan.problems = config_property_problems(parser, workflow_type, merged.get("properties_path"))
    else:
        _check_keywords(cls, merged)
    return plan


def _check_keywords(cls: Any, kwargs: dict) -> None:
    """Refuse keywords the workflow class does not take (it would fail with a TypeError when created)."""
    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return
    params = list(sig.parameters.values())[1:]
    if any(p.kind == p.VAR_KEYWORD for p in params):
        return
    try:
        sig.bind(None, **kwargs)
    except TypeError as exc:
        names = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        raise UserError(f"{cls.__name__} cannot be created with these arguments: {exc}",
                        expected=f"its keywords: {', '.join('--' + n for n in names)}") from None


def create_checked(plan: WorkflowPlan, trust: bool = False) -> Any:
    """Create and initialize the workflow with MONAI's create_workflow; creation errors become one paragraph."""
    from monai.bundle import create_workflow

    with warnings.catch_warnings():
        if trust:  # a trusted config: MONAI's "parsing config_file runs code" warning says nothing new
            warnings.filterwarnings("ignore", message="parsing config_file")
        try:
            return create_workflow(workflow_name=plan.workflow_class, **plan.kwargs)
        except (FileNotFoundError, TypeError) as exc:
            raise UserError(f"the workflow cannot be created: {type(exc).__name__}: {exc}") from None


def property_problems(plan: WorkflowPlan, workflow: Any) -> list[str]:
    """The workflow's properties that are missing (only when --workflow_type was given, as MONAI's check)."""
    from monai.bundle import ConfigWorkflow

    if plan.workflow_type is None:
        return []
    if isinstance(workflow, ConfigWorkflow):
        return config_property_problems(workflow.parser, plan.workflow_type, plan.kwargs.get("properties_path"))
    try:
        missing = workflow.check_properties()
    except Exception as exc:  # a PythonicWorkflow raises for a required property it has no get_<name> for
        return [f"{type(exc).__name__}: {exc}"]
    return [str(m) for m in missing or []]


def run_workflow(workflow_name: Any = None, args_file: str | None = None, trust: bool = False, **kwargs: Any) -> Any:
    """MONAI's ``run_workflow``: create, check properties (--workflow_type), run, finalize; return run's result."""
    plan = plan_workflow(workflow_name, args_file, **kwargs)
    workflow = create_checked(plan, trust)
    problems = property_problems(plan, workflow)
    if problems:
        warnings.warn(f"the {plan.workflow_type} workflow lacks properties that check_properties() expects: "
                      f"{'; '.join(problems)} (it runs anyway, as in MONAI)", stacklevel=2)
    result = workflow.run()
    workflow.finalize()
    return result
