"""An export stage: MONAI's ``ckpt_export`` of the chosen point's weights, as ``hpc-runner ckpt_export`` runs it.

The stage's job waits (``afterok``) on its select stage, then reads the choice from the pipeline record
and runs ``ckpt_export`` (hpc_runner/monai_cli, hpc_runner/export) with: the stage's ``export`` fields
(``net_id``, ``filepath`` in the stage's folder, ``key_in_ckpt``, ``use_trace``, ``input_shape``), the
chosen run dir as ``--ckpt_file``, the stage's config (``config_file``, default the bundle's
configs/inference.*), the bundle's metadata and root, and the chosen values the config has as overrides
(e.g. ``network_def::channels``, so the network matches the weights). command.yaml records what ran.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from hpc_runner.config.loader import load_file
from hpc_runner.config.values import format_value
from hpc_runner.jobs.governor import outside_the_job
from hpc_runner.jobs.ledger import JOB_FOLDER
from hpc_runner.monai_cli.job import run_monai_command
from hpc_runner.pipeline import record as pr
from hpc_runner.pipeline.choice import choice_values
from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.rundir import dump_yaml, now_iso
from hpc_runner.scheduler.executor import JobRequest, job_entry

COMMAND_FILE = "command.yaml"


class ExportFailed(RuntimeError):
    """The export stage could not run (no choice to export, or ckpt_export refused its input)."""


def export_argv(record: pr.PipelineRecord, name: str, choice: dict[str, Any]) -> list[str]:
    """Return the arguments of ``hpc-runner ckpt_export`` for export stage ``name`` and ``choice``."""
    stage = record.stage(name)
    spec = stage.get("spec") or {}
    export = {"net_id": "network_def", "filepath": "model.ts", **(spec.get("export") or {})}
    files = [str(f) for f in stage.get("config_files") or []]
    config: dict[str, Any] = {}
    for f in files:
        config.update(load_file(f).data)
    bundle_dir = Path(stage.get("bundle_dir") or ".")
    argv = ["--net_id", str(export["net_id"]), "--filepath", str(record.stage_dir(name) / str(export["filepath"])),
            "--ckpt_file", str(choice["run_dir"]),
            "--config_file", files[0] if len(files) == 1 else repr(files)]
    meta = bundle_dir / "configs" / "metadata.json"
    if meta.is_file():
        argv += ["--meta_file", str(meta)]
    for key in ("key_in_ckpt", "input_shape"):
        if export.get(key) is not None:
            argv += [f"--{key}", format_value(export[key])]
    if export.get("use_trace"):
        argv.append("--use_trace")
    argv += ["--bundle_root", str(bundle_dir)]
    values, _ = choice_values(config, choice)
    for key, value in values.items():
        argv += [f"--{key}", format_value(value)]
    return argv


def submit_export(executor: Any, directory: Path, name: str, dependency: str | None) -> str:
    """Queue the export stage's job (waiting on ``dependency``); return its job id."""
    folder = directory / name
    folder.mkdir(parents=True, exist_ok=True)
    request = JobRequest(job_name=f"hpcr-export-{name}", folder=folder / JOB_FOLDER, chdir=os.getcwd(),
                         dependency=dependency)
    with outside_the_job():
        return executor.submit(run_export_stage, [[str(directory.resolve())], [name]], request)[0].job_id


@job_entry
def run_export_stage(pipeline_dir: str, name: str) -> dict[str, Any]:
    """The export stage's job: ckpt_export of the chosen weights; raise ExportFailed when it cannot."""
    directory = Path(pipeline_dir)
    record = pr.read_settled(directory)
    stage = record.stage(name)
    source = stage["inputs"][0]
    choice = record.choice(source)
    if choice is None:
        raise ExportFailed(f"select stage '{source}' has not chosen (it is {record.stage(source).get('state')}); "
                           "nothing to export")
    argv = export_argv(record, name, choice)
    write_text_atomic(record.stage_dir(name) / COMMAND_FILE,
                      dump_yaml({"command": "ckpt_export", "argv": argv, "shell": shlex.join(["hpc-runner",
                                 "ckpt_export", *argv]), "at": now_iso(), "choice": choice}))
    return run_monai_command("ckpt_export", argv)


def exported_file(record: pr.PipelineRecord, name: str) -> Path:
    """Return where export stage ``name`` writes its file."""
    export = {"filepath": "model.ts", **((record.stage(name).get("spec") or {}).get("export") or {})}
    path = record.stage_dir(name) / str(export["filepath"])
    return path if path.suffix else path.with_suffix(".ts")


def stage_fields(sc: Any) -> dict[str, Any]:
    """Return what the record keeps of an export stage's config (its files and the bundle), for its job."""
    if sc.cfg is None:
        return {}
    return {"config_files": [str(Path(f).resolve()) for f in sc.config_files],
            "bundle_dir": str(sc.cfg.bundle_dir.resolve()) if sc.cfg.bundle_dir else None}
