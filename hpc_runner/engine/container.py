"""Run the bundle inside a container image (Charliecloud, Apptainer, Singularity, podman); the scheduler stays outside.

``--container IMAGE`` (or a profile's ``container:`` block) makes hpc-runner start itself again inside the image:
``run`` as ``python -m hpc_runner run ...``, a job as ``python -m hpc_runner.engine.sandbox_job RUN_DIR ENTRY``
(the same inner entry as a ``--safe`` job). The process outside, on the host, keeps everything that needs the
scheduler (signals, requeue, the sweep's top-ups), so no SLURM command is ever needed in the image.

The decisions are plain functions: :func:`container_spec` (the options, checked), :func:`detect_runtime`,
:func:`container_argv` (the exact command line of each runtime), :func:`container_env` (what is passed in).
One function, :func:`bind_argument`, makes every bind option of every runtime; a path holding a character the
runtime reads as a separator (``:`` everywhere, ``,`` for Apptainer/Singularity) is refused, never spliced.
A profile's binds are checked as ``--writable`` is (no ``/``, ``$HOME``, parent of either, or link).
:func:`check_image` runs the image once to prove that ``python -m hpc_runner`` with torch and MONAI imports inside
it, cached per image fingerprint, so a missing image or module is exit 2 before anything is queued.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpc_runner.config.ids import iter_ids
from hpc_runner.config.sandbox_marks import INSIDE_CONTAINER_ENV
from hpc_runner.engine.sandbox import checked_grant
from hpc_runner.errors import UserError
from hpc_runner.records.command_output import run_command
from hpc_runner.records.read import parse_json_text, read_json_cache
from hpc_runner.records.user_cache import user_cache_dir
from hpc_runner.scheduler.job_env import job_variables

RUNTIMES = ("charliecloud", "apptainer", "singularity", "podman")
PROGRAMS = {"charliecloud": "ch-run", "apptainer": "apptainer", "singularity": "singularity", "podman": "podman"}
GPU_FLAGS = ("nv", "rocm", None)
SPEC_KEYS = {"image", "runtime", "python", "gpu", "binds", "options", "path", "on"}
# container.on: where the runtime is. "compute": on the compute nodes only (JADE: no apptainer on the login node),
# so the image is not started before queueing; "any" (default): here too, and the image is checked here first
RUNTIME_PLACES = ("any", "compute")
# variables passed into the image by name or prefix; PATH, HOME and PYTHONPATH are the image's own
PASS_NAMES = (
    "LANG", "LANGUAGE", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR",
    "PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK",
)
PASS_PREFIXES = ("LC_", "HPCR_")
SYSTEM = ("/usr", "/etc", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/proc", "/sys", "/dev", "/run", "/boot",
          "/var/lib", "/var/cache")  # the image's own: never bound over from the host
BIND_OPTIONS = {"charliecloud": "--bind=", "apptainer": "--bind=", "singularity": "--bind=", "podman": "--volume="}
# characters each runtime's bind option reads as a separator (SRC:DST[:OPTS]; Apptainer: A,B for two binds)
BIND_SEPARATORS = {"charliecloud": ":", "apptainer": ":,", "singularity": ":,", "podman": ":"}
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # PATH in a Charliecloud image
CHECK_TIMEOUT_S = 300  # importing torch and MONAI from a cold image on a shared filesystem


@dataclass(frozen=True)
class ContainerSpec:
    """What image to run, with which runtime, Python and GPU flag, and the user's extra binds and options."""

    image: str
    runtime: str
    python: str = "python3"
    gpu: str | None = None  # "nv" (NVIDIA) or "rocm"; Charliecloud injects GPU libraries at build time instead
    binds: tuple[str, ...] = ()  # SRC[:DST] of the user's profile (a bundle cannot add any)
    options: tuple[str, ...] = ()  # extra runtime flags from the user's profile
    where: str = "--container"  # what named it, for messages
    path: str | None = None  # the runtime's program where the jobs run (container.path), else found on PATH
    on: str = "any"  # "compute": the runtime is on the compute nodes only (RUNTIME_PLACES)

    @property
    def program(self) -> str:
        """The runtime's command: the profile's path, else its name (found on PATH)."""
        return self.path or PROGRAMS[self.runtime]

    def to_record(self) -> dict[str, Any]:
        """Return what run.yaml records (the image's fingerprint is added by :func:`image_fingerprint`)."""
        return {"image": self.image, "runtime": self.runtime, "python": self.python, "gpu": self.gpu,
                "binds": list(self.binds), "options": list(self.options), "path": self.path, "on": self.on}


def detect_runtime(image: str, which: Any = shutil.which) -> str:
    """Return the runtime for ``image`` when none is named: a folder or .sqfs is Charliecloud's, a .sif
    Apptainer's (else Singularity's), a ``docker://`` reference the first of Apptainer, Singularity, podman found."""
    if os.path.isdir(image) or image.endswith((".sqfs", ".squashfs")):
        return "charliecloud"
    order = ("apptainer", "singularity") if image.endswith(".sif") else ("apptainer", "singularity", "podman")
    for runtime in order:
        if which(PROGRAMS[runtime]):
            return runtime
    return order[0]


def container_spec(cli_image: str | None, cli_runtime: str | None, profile_block: Any,
                   where: str) -> ContainerSpec | None:
    """Return the container to run in: ``--container``/``--container-runtime`` over the profile's ``container:``
    block; None when neither names an image. A wrong value is bad input naming where it came from."""
    block = profile_block if isinstance(profile_block, dict) else {}
    # YAML 1.1 (PyYAML) reads the key `on` as true: container: {on: compute} is what the user wrote
    block = {("on" if k is True else k): v for k, v in block.items()}
    if profile_block is not None and not isinstance(profile_block, dict):
        raise UserError(f"container: is {profile_block!r}, not a mapping", where=where,
                        expected="container: {image: PATH, runtime: charliecloud|apptainer|singularity|podman, "
                        "python: python3, gpu: nv|rocm, binds: [SRC:DST], options: [FLAG]}")
    unknown = sorted(str(k) for k in set(block) - SPEC_KEYS)
    if unknown:
        raise UserError(f"container: has unknown key(s) {', '.join(unknown)}", where=where,
                        expected=f"only {', '.join(sorted(SPEC_KEYS))}")
    if cli_image is not None and (not isinstance(cli_image, str) or not cli_image.strip()):
        raise UserError("--container names no image (an empty name); nothing was run or queued", where="--container",
                        expected="--container IMAGE (a SIF file, a Charliecloud image folder or SquashFS file, or "
                        "docker://NAME:TAG), or no --container to run on the host")
    if cli_image is None and profile_block is not None and (
            not isinstance(block.get("image"), str) or not block["image"].strip()):
        raise UserError(f"the profile's container: block names no image ({block.get('image')!r}); nothing was run "
                        "or queued", where=where,
                        expected="container: {image: PATH} naming the image, or no container: block "
                        "(--scheduler-option container=null) to run on the host")
    image = cli_image or block.get("image")
    if not image:
        return None
    if not isinstance(image, str) or "\n" in image or "\0" in image:
        raise UserError(f"the container image {image!r} is not a path or a reference", where=where,
                        expected="a SIF file, a Charliecloud image folder or SquashFS file, or docker://NAME:TAG")
    source = "--container" if cli_image else f"{where}: container.image"
    if "://" not in image:
        image = os.path.abspath(os.path.expanduser(image))
        if not os.path.exists(image):
            raise UserError(f"the container image {image} does not exist; nothing was run or queued", where=source,
                            expected="a SIF file, a Charliecloud image folder or SquashFS file, or docker://NAME:TAG")
    runtime = cli_runtime or block.get("runtime") or detect_runtime(image)
    if runtime not in RUNTIMES:
        raise UserError(f"container runtime {runtime!r} is not one hpc-runner knows", where=where,
                        expected=f"one of {', '.join(RUNTIMES)}")
    gpu = block.get("gpu")
    if gpu not in GPU_FLAGS:
        raise UserError(f"container: gpu is {gpu!r}", where=where, expected="nv, rocm, or nothing")
    lists = {}
    for key in ("binds", "options"):
        value = block.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v and "\n" not in v for v in value):
            raise UserError(f"container: {key} is {value!r}", where=where, expected=f"a list of strings ({key})")
        lists[key] = tuple(value)
    for bind in lists["binds"]:  # the user's own grants: checked as --writable is, and sayable by the runtime
        src, dst = parse_bind(bind, where)
        bind_argument(runtime, src, dst, where)
    python = block.get("python") or "python3"
    if not isinstance(python, str) or not python or any(c.isspace() for c in python):
        raise UserError(f"container: python is {python!r}", where=where, expected="a command, e.g. python3")
    path, on = block.get("path"), block.get("on") or "any"
    if path is not None and (not isinstance(path, str) or not os.path.isabs(path) or any(c.isspace() or c == "\0"
                                                                                           for c in path)):
        raise UserError(f"container: path is {path!r}", where=where,
                        expected="the absolute path of the runtime's program, e.g. /apps/apptainer/bin/apptainer")
    if on not in RUNTIME_PLACES:
        raise UserError(f"container: on is {on!r}", where=where,
                        expected="compute (the runtime is on the compute nodes only) or any (here too; the default)")
    return ContainerSpec(image=image, runtime=runtime, python=python, gpu=gpu, binds=lists["binds"],
                         options=lists["options"], where=where, path=path, on=on)


def spec_from_record(record: Mapping[str, Any], where: str) -> ContainerSpec:
    """Return the container a run recorded (run.yaml ``container:``); a damaged record is bad input naming it."""
    found = record.get("container")
    if not isinstance(found, dict) or not isinstance(found.get("image"), str):
        raise UserError(f"the run's record names no container image ({found!r:.120})", where=where,
                        expected="container: {image: ..., runtime: ...} as hpc-runner recorded it")
    spec = container_spec(found["image"], found.get("runtime"),
                          {k: v for k, v in found.items() if k in SPEC_KEYS - {"image", "runtime"} and v is not None},
                          where)
    assert spec is not None
    return spec


def container_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Return the variables passed into the image: locale, Python, GPU, threads, HPCR_*, the job's scheduler ones."""
    env = {k: v for k, v in environ.items() if k in PASS_NAMES or k.startswith(PASS_PREFIXES)}
    env.update(job_variables(environ))
    env.pop("HPCR_CONFIG", None)  # the user's config file is the host's, read outside
    env[INSIDE_CONTAINER_ENV] = "1"
    return env


def parse_bind(text: str, where: str) -> tuple[str, str]:
    """Return (source, destination) of a profile's ``SRC[:DST]`` bind; the source is checked as ``--writable`` is
    (not ``/``, ``$HOME``, a parent of either, nor a path through a link)."""
    parts = text.split(":")
    if len(parts) > 2 or not all(p.startswith("/") for p in parts):
        raise UserError(f"container: binds has {text!r}", where=where,
                        expected="SRC or SRC:DST, two absolute paths (no other ':')")
    src = checked_grant(parts[0], f"{where}: container.binds")
    return src, os.path.normpath(parts[-1])


def bind_argument(runtime: str, src: str, dst: str | None = None, where: str = "a bind") -> str:
    """Return the one option that binds host ``src`` at ``dst`` (default: the same path) for ``runtime``; bad
    input when a path holds what that runtime's option reads as a separator or a control character."""
    dst = src if dst is None else dst
    for path in (src, dst):
        bad = [c for c in path if c in BIND_SEPARATORS[runtime] or ord(c) < 32 or ord(c) == 127]
        if bad or not path.startswith("/"):
            raise UserError(
                f"the path {path!r} cannot be bound into the image by {runtime}: "
                + (f"its {bad[0]!r} is a separator of {runtime}'s {BIND_OPTIONS[runtime].rstrip('=')} option"
                   if bad else "it is not absolute") + "; nothing was run or queued", where=where,
                expected=f"the folder at a path without {' or '.join(repr(c) for c in BIND_SEPARATORS[runtime])} "
                "(rename it, or move the run dir, bundle or data there)")
    return f"{BIND_OPTIONS[runtime]}{src}:{dst}"


def bind_list(paths: Sequence[str]) -> list[str]:
    """Return the folders to bind, each once, deepest covered by its shallowest (a path inside a bound folder is
    seen through it); existing paths only, absolute."""
    out: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)}, key=len):
        if path == "/" or any(path == s or path.startswith(s + "/") for s in SYSTEM):  # the image has its own
            continue
        if not any(path == b or path.startswith(b.rstrip("/") + "/") for b in out):
            out.append(path)
    return sorted(out)


def config_binds(config: Any, always: Sequence[str], where: str = "the config") -> list[str]:
    """Return the folders to bind for ``config``: ``always`` (run dir, bundle, working folder), every absolute
    path among its values that exists, and for one that does not yet (a folder the run makes) its nearest
    existing parent. A path whose nearest existing parent is ``/`` or a top-level folder cannot be bound
    without binding the host's system: bad input naming the id, before anything is queued."""
    paths = [p for p in always if p]
    for id_path, value in iter_ids(config):
        if not isinstance(value, str) or not value.startswith("/") or "\n" in value or len(value) > 4096:
            continue
        path = os.path.normpath(value)
        if os.path.exists(path):
            paths.append(path)
            continue
        parent = os.path.dirname(path)
        while parent != "/" and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if len(Path(parent).parts) <= 2:  # "/" or "/scratch": binding it would bind the host's whole tree
            raise UserError(f"id '{id_path}' names {value[:200]}, which does not exist and no folder a container "
                            f"can bind covers (its nearest existing folder is {parent}); nothing was run or queued",
                            where=where, id_path=id_path,
                            expected="a path under a folder that exists (make it first), so that it can be bound "
                            "into the image")
        paths.append(parent)
    return bind_list(paths)


def missing_mount_points(spec: ContainerSpec, binds: Sequence[str]) -> list[str]:
    """Return the bind destinations a Charliecloud folder image lacks (its ch-run mounts the image read-only and
    cannot make them; Apptainer, Singularity and podman make their own). ``/tmp`` is the host's under ch-run."""
    if spec.runtime != "charliecloud" or not os.path.isdir(spec.image):
        return []
    missing = []
    for dst in [*binds, *(parse_bind(b, spec.where)[1] for b in spec.binds)]:
        if dst == "/tmp" or dst.startswith("/tmp/"):
            continue
        if not os.path.isdir(os.path.join(spec.image, dst.lstrip("/"))):
            missing.append(dst)
    return missing


def check_mount_points(spec: ContainerSpec, binds: Sequence[str]) -> None:
    """Bad input naming the first folder the image cannot bind onto, and how to make it."""
    missing = missing_mount_points(spec, binds)
    if missing:
        raise UserError(f"the Charliecloud image {spec.image} has no folder {missing[0]} to bind the host's "
                        f"{missing[0]} onto ({len(missing)} such folder(s): {', '.join(missing[:4])}); nothing was run "
                        "or queued", where=spec.where,
                        expected=f"the folders made in the image (mkdir -p {spec.image}{missing[0]}, or RUN mkdir -p "
                        f"{missing[0]} in its recipe), or the run dir, bundle and data under /tmp or folders the "
                        "image has")


@dataclass(frozen=True)
class Mounts:
    """The folders a run in the image sees: the host's paths at the same place; the writable ones marked."""

    paths: tuple[str, ...]
    cwd: str
    env: dict[str, str] = field(default_factory=dict)


def container_argv(spec: ContainerSpec, mounts: Mounts, command: Sequence[str]) -> list[str]:
    """Return the exact command line that runs ``command`` inside the image with ``mounts``, for its runtime."""
    program = spec.program
    pairs = [(p, p) for p in mounts.paths] + [parse_bind(b, spec.where) for b in spec.binds]
    binds = [bind_argument(spec.runtime, src, dst, spec.where) for src, dst in pairs]
    if spec.runtime == "charliecloud":
        argv = [program, "--unset-env=*"]  # ch-run passes the host's whole environment otherwise
        argv += binds
        env = {"PATH": IMAGE_PATH, "HOME": "/tmp", **mounts.env}  # no $HOME bound: packages' caches go to /tmp
        argv += [f"--set-env={k}={v}" for k, v in sorted(env.items())]
        argv += [f"--cd={mounts.cwd}", *spec.options, spec.image, "--", *command]
        return argv
    if spec.runtime in ("apptainer", "singularity"):
        argv = [program, "exec", "--containall", "--cleanenv", "--no-home"]
        argv += [f"--{spec.gpu}"] if spec.gpu else []
        argv += binds
        argv += [f"--env={k}={v}" for k, v in sorted(mounts.env.items())]
        argv += [f"--pwd={mounts.cwd}", *spec.options, spec.image, *command]
        return argv
    argv = [program, "run", "--rm", "--init", "--network=host", "--ipc=host", "--userns=keep-id"]
    if spec.gpu == "nv":
        argv.append("--device=nvidia.com/gpu=all")
    elif spec.gpu == "rocm":
        argv += ["--device=/dev/kfd", "--device=/dev/dri"]
    argv += binds
    argv += [f"--env={k}={v}" for k, v in sorted(mounts.env.items())]
    argv += [f"--workdir={mounts.cwd}", *spec.options, spec.image, *command]
    return argv


def check_unchanged(recorded: Mapping[str, Any], where: str) -> None:
    """Refuse to go on in a recorded image that changed since (its fingerprint differs): bad input saying how to
    accept it (naming the image with --container)."""
    image, then = recorded.get("image"), recorded.get("fingerprint")
    if not isinstance(image, str) or not then or "://" in image:
        return
    if not os.path.exists(image):
        raise UserError(f"the run was made in the container image {image}, which is gone; nothing was run",
                        where=where, expected="--container IMAGE naming the image to go on in")
    now = image_fingerprint(image)
    if now != then:
        raise UserError(f"the container image {image} changed since the run was made in it ({then} then, {now} now); "
                        "nothing was run", where=where,
                        expected=f"--container {image} to go on in the image as it is now, or the image restored")


def image_cache_dir(environ: Mapping[str, str]) -> Path:
    """Where the image checks are cached (``$XDG_CACHE_HOME/hpc-runner/containers``)."""
    return user_cache_dir(environ) / "containers"


def image_fingerprint(image: str) -> str:
    """Return a cheap fingerprint of the image: a file's size, mtime and first and last MiB; a folder's tree
    of names, sizes and mtimes down to its Python packages' folders (not every file of torch)."""
    if "://" in image:
        return "ref:" + image
    digest = hashlib.sha256()
    path = Path(image)
    if path.is_file():
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            st = os.fstat(fd)
            digest.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
            digest.update(os.pread(fd, 1 << 20, 0))
            digest.update(os.pread(fd, 1 << 20, max(0, st.st_size - (1 << 20))))
        finally:
            os.close(fd)
        return "file:" + digest.hexdigest()[:32]
    for root, dirs, files in os.walk(path):
        depth = len(Path(root).relative_to(path).parts)
        dirs.sort()
        if depth >= 6:  # /opt/venv/lib/python3.11/site-packages/<package>: the package folders' own stats
            dirs[:] = []
        for name in sorted(files) + dirs:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            digest.update(f"{os.path.join(root, name)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return "dir:" + digest.hexdigest()[:32]


CHECK_CODE = ("import sys, importlib.metadata as m; import torch, monai, hpc_runner; "
              "print(__import__('json').dumps({'python_version': sys.version.split()[0], 'torch': torch.__version__, "
              "'monai': monai.__version__, 'hpc_runner': hpc_runner.__version__}))")


def check_image(spec: ContainerSpec, cache_dir: Path, environ: Mapping[str, str], cwd: str) -> dict[str, Any]:
    """Prove that the image runs ``python -c 'import torch, monai, hpc_runner'``; return what it reported.

    Cached per (runtime, image fingerprint, python) in ``cache_dir``. A missing runtime, an image that does not
    start or a module that does not import is bad input naming the image, before anything is queued."""
    program = spec.program
    if spec.on == "compute" and shutil.which(program) is None:  # not here, by the profile's word: checked in the job
        return {"checked": "in the job: the runtime is on the compute nodes only (container.on: compute)",
                "fingerprint": image_fingerprint(spec.image)}
    if shutil.which(program) is None:
        raise UserError(f"the container runtime {spec.runtime} ({program}) is not on PATH; nothing was run or queued",
                        where=spec.where, expected=f"{program} installed here (and on the compute nodes), or "
                        "--container-runtime naming one that is; where only the compute nodes have it (JADE), "
                        "`on: compute` and the runtime's `path:` there in the profile's container: block "
                        "(docs/containers.md)")
    fingerprint = image_fingerprint(spec.image)
    key = hashlib.sha256(f"2|{spec.runtime}|{fingerprint}|{spec.python}|{spec.options}".encode()).hexdigest()[:24]
    cached = cache_dir / f"image-{key}.json"
    known = read_json_cache(cached, "the image check's cache")  # {} when absent or damaged: checked again
    if known:
        return {**known, "fingerprint": fingerprint}
    mounts = Mounts(paths=tuple(bind_list([cwd])), cwd=cwd, env=container_env(environ))
    argv = container_argv(spec, mounts, [spec.python, "-c", CHECK_CODE])
    try:
        proc = run_command(argv, timeout=CHECK_TIMEOUT_S, env={**os.environ, **starter_env(os.environ)})
    except subprocess.TimeoutExpired:
        raise UserError(f"the container image {spec.image} did not answer within {CHECK_TIMEOUT_S} s", where=spec.where,
                        expected="an image whose Python starts") from None
    out, err = proc.stdout, proc.stderr
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        last = (err or out).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"the container image {spec.image} cannot run hpc-runner ({spec.runtime}, {spec.python}): "
                        f"{last[0][:300]}; nothing was run or queued", where=spec.where,
                        expected=f"an image with Python, torch, MONAI and hpc-runner installed (try: {program} ... "
                        f"{spec.python} -c 'import torch, monai, hpc_runner')")
    try:
        found = parse_json_text(lines[-1], spec.image, "image check's answer")
    except UserError:
        found = {"answer": lines[-1][:200]}
    if not isinstance(found, dict):
        found = {"answer": lines[-1][:200]}
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(found), encoding="utf-8")
    return {**found, "fingerprint": fingerprint}


def starter_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the runtime's own process on the host: PATH, HOME and USER (which ch-run needs)."""
    import pwd

    try:
        user = environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = str(os.getuid())
    return {"PATH": environ.get("PATH", "/usr/bin:/bin"), "USER": user,
            **({"HOME": environ["HOME"]} if "HOME" in environ else {})}
