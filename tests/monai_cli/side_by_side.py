"""Run one argv through `python -m monai.bundle run` and through `python -m hpc_runner run`, each in its own copy of
a scenario's working folder, and compare what they print and leave behind (imported by the tests of this folder)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warm_python import WARM

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
MONAI = "monai"
HPCR = "hpc_runner"
RUNNERS = (MONAI, HPCR)
# what hpc-runner writes into a run dir besides the bundle's own outputs (compared by neither name nor content)
HPCR_RECORDS = frozenset({
    "config.yaml", "overrides.yaml", "run.yaml", "log.txt", "summary.json", "metrics.jsonl", "error.txt",
    "tracking.json", "mlflow-run.json", "mlflow-unsent.jsonl", "report.html", "plots", "tb", "mlartifacts",
    "checkpoints", "profile", ".run.lock", "data_io.json", ".data_io.json.lock",
})
_STAMP = re.compile(r"config_\d{8}_\d{6}\.json")
_RUN_DIR = re.compile(r"^hpc-runner: run dir (.+)$", re.M)


@dataclass
class Outcome:
    """How one runner ended: exit code, output, seconds, its working folder and the files it made there."""

    runner: str
    code: int
    stdout: str
    stderr: str
    seconds: float
    root: Path
    made: dict[str, Path] = field(default_factory=dict)  # normalised relative name -> file

    @property
    def printed(self) -> str:
        """stdout and stderr together."""
        return self.stdout + self.stderr

    def explain(self) -> str:
        """What a failed assertion should show: the command's exit code and the end of its output."""
        return f"--- {self.runner} exit {self.code} in {self.seconds:.1f} s\n{self.printed[-4000:]}"


def clean_env(root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment both runners get: this checkout first on sys.path, no HPCR/MLflow settings, one thread."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HPCR", "MLFLOW_", "MONAI_FAIL_ON", "SLURM_JOB", "SLURM_ARRAY"))}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["XDG_CONFIG_HOME"] = str(root / ".xdg")  # never the developer's own hpc-runner user config
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and ".xdg" not in p.parts and "__pycache__" not in p.parts}


def normalised(name: str) -> str:
    """A file name with the parts that differ between any two runs (timestamps) made equal."""
    return _STAMP.sub("config_<time>.json", name)


def _text(out: str | bytes | None) -> str:
    return out.decode(errors="replace") if isinstance(out, bytes) else out or ""


def run_both(
    tmp_path: Path,
    setup: Callable[[Path], None],
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    monai_command: Sequence[str] = ("-m", "monai.bundle", "run"),
    timeout: float = 300,
) -> dict[str, Outcome]:
    """Run ``argv`` (``{root}`` replaced by the working folder) through both runners, side by side.

    Each runner gets a fresh folder made by ``setup``; ``made`` holds what it created there: MONAI's files as
    they lie, hpc-runner's with its run dir's path replaced by where ``--output_dir`` points (when given) and
    its own record files left out.
    """
    started = {}
    ended: dict[str, tuple[int, str, str, float]] = {}
    for runner in RUNNERS:  # one after the other, each a fork of a process with torch and MONAI imported
        root = tmp_path / runner
        root.mkdir()
        setup(root)
        before = _files(root)
        args = [a.replace("{root}", str(root)) for a in argv]
        command = [*monai_command] if runner == MONAI else ["-m", "hpc_runner", "run"]
        start = time.monotonic()
        if command[0] == "-m":
            try:
                done = WARM.run(command[1], [*command[2:], *args], cwd=root, env=clean_env(root, env),
                                timeout=timeout)
            except subprocess.TimeoutExpired as e:
                done = subprocess.CompletedProcess(e.cmd, -9, _text(e.stdout), _text(e.stderr))
        else:
            try:
                done = subprocess.run([sys.executable, *command, *args], cwd=root, env=clean_env(root, env),
                                      capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired as e:
                done = subprocess.CompletedProcess(e.cmd, -9, _text(e.stdout), _text(e.stderr))
        ended[runner] = (done.returncode, done.stdout, done.stderr, time.monotonic() - start)
        started[runner] = (root, before, args)
    outcomes = {}
    for runner, (root, before, args) in started.items():
        code, stdout, stderr, seconds = ended[runner]
        outcome = Outcome(runner, code, stdout, stderr, seconds, root)
        run_dir = None
        if runner == HPCR and (m := _RUN_DIR.search(stdout)):
            run_dir = (root / m.group(1)).resolve()  # printed relative to the working folder, or absolute
        for path in sorted(_files(root) - before):
            rel = path.relative_to(root)
            if run_dir is not None and run_dir in path.parents:
                inside = path.relative_to(run_dir)
                if inside.parts[0] in HPCR_RECORDS:
                    continue
                # under --output_dir: where MONAI's output_dir puts it; else relative to runs/<name>/<time>
                rel = run_dir.relative_to(root) / inside if "--output_dir" in args else inside
            outcome.made[normalised(rel.as_posix())] = path
        outcomes[runner] = outcome
    if os.environ.get("MONAI_CLI_TIMES"):  # a JSON line per scenario for the table in docs/zoo.md
        with open(os.environ["MONAI_CLI_TIMES"], "a", encoding="utf-8") as log:
            log.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                                  **{r: [o.code, round(o.seconds, 1)] for r, o in outcomes.items()}}) + "\n")
    return outcomes


def explain(outcomes: dict[str, Outcome]) -> str:
    """Both runners' exit codes and output tails, for assertion messages."""
    return "\n".join(o.explain() for o in outcomes.values())


def _nifti(path: Path):
    import nibabel as nib
    import numpy as np

    image = nib.load(str(path))
    return image.shape, np.asarray(image.dataobj)


def _json_text(path: Path, root: Path) -> object:
    text = _STAMP.sub("config_<time>.json", path.read_text(encoding="utf-8")).replace(str(root), "<root>")
    return json.loads(text)


def same_content(a: Path, a_root: Path, b: Path, b_root: Path, json_ignore: Sequence[str] = ()) -> bool:
    """Whether two artefacts hold the same thing: NIfTI arrays equal; JSON equal once the working folder and
    timestamps are written alike (top-level keys in ``json_ignore`` left out); SQLite stores both non-empty;
    anything else byte-equal once paths are."""
    name = a.name.lower()
    if name.endswith((".nii", ".nii.gz")):
        import numpy as np

        (shape_a, data_a), (shape_b, data_b) = _nifti(a), _nifti(b)
        return shape_a == shape_b and np.array_equal(data_a, data_b)
    if name.endswith(".json"):
        docs = [_json_text(a, a_root), _json_text(b, b_root)]
        for doc in docs:
            if isinstance(doc, dict):
                for key in json_ignore:
                    doc.pop(key, None)
        return docs[0] == docs[1]
    if name.endswith(".db"):
        return a.stat().st_size > 0 and b.stat().st_size > 0
    read = (lambda p: gzip.decompress(p.read_bytes())) if name.endswith(".gz") else (lambda p: p.read_bytes())
    return read(a).replace(bytes(a_root), b"<root>") == read(b).replace(bytes(b_root), b"<root>")


def compare_artefacts(outcomes: dict[str, Outcome], json_ignore: Sequence[str] = ()) -> list[str]:
    """Return what differs between the files the two runners made (names, then contents); empty when equal."""
    monai, ours = outcomes[MONAI], outcomes[HPCR]
    problems = []
    if set(monai.made) != set(ours.made):
        problems.append(f"files: MONAI made {sorted(monai.made)}, hpc-runner {sorted(ours.made)}")
    for name in sorted(set(monai.made) & set(ours.made)):
        if not same_content(monai.made[name], monai.root, ours.made[name], ours.root, json_ignore):
            problems.append(f"{name}: the contents differ")
    return problems
