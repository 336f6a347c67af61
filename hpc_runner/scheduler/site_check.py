"""The job side of ``hpc-runner cluster check``: what a compute node gives a job, probed where the job runs.

``run_site_check`` is the check job's entry (a command job, like every job): it runs each probe below as a plain
function, writes what it found to one JSON file beside the job's logs (atomically, after every probe, so a job the
scheduler kills still leaves what it found so far), then waits for the stop signal and asks to be requeued. The
login side (scheduler/cluster_check.py) reads that file back with the one bounded reader and adds what only it can
see (accounting, the queue wait). The probes name no scheduler: what the scheduler told the job comes through the
job side (scheduler/job_env.py), and a backend adds its own probes through ``JobEnvironment.site_probes``.

Each probe returns ``{"ok": True | False | None, "detail": one line for people, ...figures}``; ``ok`` None means
"nothing to check here" (no GPU asked, no container named).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hpc_runner.records.atomic import write_text_atomic
from hpc_runner.records.command_output import run_command
from hpc_runner.records.json_out import dumps_json
from hpc_runner.records.read import RecordError, parse_json_text, read_record_text
from hpc_runner.scheduler import job_env
from hpc_runner.scheduler.executor import job_entry

FINDINGS_VERSION = 1
MAX_FINDINGS_BYTES = 1 << 20
SETUP_TIMEOUT_S = 300.0
IMPORT_TIMEOUT_S = 600.0
# what the import probe runs in the job's own python: each import timed, the answer one JSON line
IMPORT_CODE = ("import json, time\nout = {}\nfor name in ('torch', 'monai'):\n    t = time.time()\n    try:\n"
               "        m = __import__(name)\n        out[name] = {'s': round(time.time() - t, 2), "
               "'version': str(getattr(m, '__version__', '?'))}\n    except Exception as exc:\n"
               "        out[name] = {'error': (type(exc).__name__ + ': ' + str(exc))[:300]}\nprint(json.dumps(out))\n")
SETUP_MARK = "hpcr-setup-line"
CONTAINER_RUNTIMES = ("apptainer", "singularity", "podman", "docker")
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)


def finding(ok: bool | None, detail: str, **figures: Any) -> dict[str, Any]:
    """Return one probe's answer: ``ok`` (None: nothing to check), a line for people, and its figures."""
    return {"ok": ok, "detail": detail, **figures}


# ---------------------------------------------------------------- the probes, each a plain function


def probe_gpus(requested: int, environ: Mapping[str, str] | None = None,
               listed: Callable[[], int | None] | None = None) -> dict[str, Any]:
    """The GPUs the job sees against those asked: the scheduler's grant, CUDA_VISIBLE_DEVICES, the driver's list."""
    env = job_env.env_of(environ)
    grant = job_env.gpu_grant(environ)
    granted = len(grant[0]) if grant else 0
    visible_text = env.get("CUDA_VISIBLE_DEVICES")
    visible = len([v for v in visible_text.split(",") if v.strip()]) if visible_text is not None else None
    driver = (listed or _driver_gpus)()
    seen = visible if visible is not None else driver if driver is not None else granted
    figures = {"requested": requested, "granted": granted, "visible": seen, "driver": driver}
    if requested == 0 and seen == 0:
        return finding(None, "no GPU asked, none visible", **figures)
    if seen == requested:
        return finding(True, f"{seen} GPU(s) visible, as asked", **figures)
    return finding(False, f"{seen} GPU(s) visible, {requested} asked (granted {granted})", **figures)


def _driver_gpus() -> int | None:
    """How many GPUs the NVIDIA driver lists on this node (None without the tool or an answer)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        res = run_command(["nvidia-smi", "-L"], timeout=30)
    except (OSError, TimeoutError, Exception):  # a hung driver: no answer, not a failed check
        return None
    return sum(1 for line in res.stdout.splitlines() if line.startswith("GPU ")) if res.returncode == 0 else None


def probe_cpu_binding(requested: int | None, affinity: int | None = None,
                      environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The CPUs this process may run on (its affinity) against the CPUs per task asked: fewer is a failure (the
    job's threads share them), more is "not bound" (the threads are sized by the grant, not the affinity)."""
    affinity = affinity if affinity is not None else len(os.sched_getaffinity(0))
    grant = job_env.cpu_grant(environ)
    granted = grant[0] if grant else None
    figures = {"requested": requested, "affinity": affinity, "granted": granted}
    if not requested:
        return finding(None, f"no CPUs per task asked; the job may run on {affinity} CPU(s)", **figures)
    if affinity == requested:
        return finding(True, f"bound to {affinity} CPU(s), as asked", **figures)
    if affinity < requested:
        return finding(False, f"bound to {affinity} CPU(s) of the {requested} asked: the job's threads share them",
                       **figures)
    return finding(True, f"not bound: {affinity} CPU(s) usable, {requested} asked (threads are sized by the grant"
                   f"{f', {granted}' if granted else ''})", **figures)


def probe_scratch(environ: Mapping[str, str] | None = None, test_mb: int = 64) -> dict[str, Any]:
    """Node-local scratch: the job's own folder (the scheduler's), else $TMPDIR, else /tmp; its free space and how
    fast ``test_mb`` MB are written (and synced) there."""
    env = job_env.env_of(environ)
    named = job_env.scratch_dir(environ)
    source = "the scheduler's job folder" if named else None
    if not named and env.get("TMPDIR"):
        named, source = env["TMPDIR"], "TMPDIR"
    if not named:
        named, source = "/tmp", "/tmp (TMPDIR unset)"
    path = Path(named)
    if not path.is_dir():
        return finding(False, f"no scratch folder: {named} ({source}) does not exist", path=named, source=source)
    if not os.access(path, os.W_OK | os.X_OK):
        return finding(False, f"no scratch folder: {named} ({source}) is not writable", path=named, source=source)
    stat = os.statvfs(path)
    free_gb = round(stat.f_bavail * stat.f_frsize / 1e9, 1)
    speed = _write_speed(path, test_mb)
    if speed is None:
        return finding(False, f"no scratch folder: writing to {named} ({source}) failed", path=named, source=source,
                       free_gb=free_gb)
    return finding(True, f"{named} ({source}): {free_gb} GB free, writes {speed} MB/s", path=named, source=source,
                   free_gb=free_gb, write_mb_s=speed)


def _write_speed(folder: Path, test_mb: int) -> float | None:
    """MB/s of writing ``test_mb`` MB to a new file in ``folder`` and syncing it (the file removed after)."""
    chunk = b"\0" * (1 << 20)
    target = folder / f".hpcr-scratch-test-{os.getpid()}"
    try:
        start = time.perf_counter()
        with open(target, "wb") as out:
            for _ in range(max(1, test_mb)):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        elapsed = max(time.perf_counter() - start, 1e-6)
    except OSError:
        return None
    finally:
        target.unlink(missing_ok=True)
    return round(max(1, test_mb) / elapsed, 1)


def probe_shm(path: str = "/dev/shm") -> dict[str, Any]:
    """The size of the shared-memory folder (what data-loader workers pass batches through)."""
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        return finding(False, f"{path} is missing ({exc.strerror}): data-loader workers cannot share batches",
                       path=path)
    size_gb, free_gb = round(stat.f_blocks * stat.f_frsize / 1e9, 2), round(stat.f_bavail * stat.f_frsize / 1e9, 2)
    ok = size_gb >= 1.0
    return finding(ok, f"{path}: {size_gb} GB ({free_gb} GB free)" + ("" if ok else ": small for workers' batches"),
                   path=path, size_gb=size_gb, free_gb=free_gb)


def setup_script(lines: Sequence[str]) -> str:
    """Return the shell text that runs the profile's setup lines as the job script does (one after another, each
    as written), stopping at the first that fails, with a numbered mark after each."""
    out = ["set -e"]
    for number, line in enumerate(lines, 1):
        out += [str(line), f"echo {SETUP_MARK} {int(number)}"]
    return "\n".join(out) + "\n"


def probe_setup(lines: Sequence[str], timeout: float = SETUP_TIMEOUT_S) -> dict[str, Any]:
    """Run the profile's setup lines here, as the job script does (bash), and name the first that fails."""
    if not lines:
        return finding(None, "no setup lines in the profile", lines=0)
    try:
        res = run_command(["bash", "-c", setup_script(lines)], timeout=timeout)
    except Exception as exc:  # a line that never returns, or no bash on the node
        return finding(False, f"the setup lines did not finish: {str(exc)[:200]}", lines=len(lines))
    done = sum(1 for line in res.stdout.splitlines() if line.startswith(SETUP_MARK))
    if res.returncode == 0 and done == len(lines):
        return finding(True, f"{len(lines)} setup line(s) ran", lines=len(lines))
    failed = min(done + 1, len(lines))
    said = " ".join((res.stderr or res.stdout).split())[-200:]
    return finding(False, f"setup line {failed} failed (exit {res.returncode}): {lines[failed - 1]!s:.80}"
                   + (f": {said}" if said else ""), lines=len(lines), failed_line=failed)


def probe_imports(python: str | None = None, timeout: float = IMPORT_TIMEOUT_S) -> dict[str, Any]:
    """Import torch and MONAI in the job's python (a fresh process), each timed."""
    try:
        res = run_command([python or sys.executable, "-c", IMPORT_CODE], timeout=timeout)
    except Exception as exc:
        return finding(False, f"importing torch and MONAI did not finish: {str(exc)[:200]}")
    try:
        answer = parse_json_text(res.stdout.strip().splitlines()[-1] if res.stdout.strip() else "", "import probe")
    except RecordError:
        answer = None
    if not isinstance(answer, dict):
        return finding(False, f"the job's python could not run the import probe (exit {res.returncode}): "
                       f"{' '.join(res.stderr.split())[-200:]}")
    failed = [f"{name}: {info.get('error')}" for name, info in answer.items() if isinstance(info, dict)
              and info.get("error")]
    times = {name: info.get("s") for name, info in answer.items() if isinstance(info, dict) and "s" in info}
    if failed:
        return finding(False, "cannot import " + "; ".join(failed), seconds=times)
    return finding(True, ", ".join(f"{n} {answer[n].get('version')} in {s} s" for n, s in times.items()), seconds=times)


def probe_container(runtime: str | None) -> dict[str, Any]:
    """Whether the profile's container runtime (else any known one, for information) is on this node's PATH."""
    if runtime:
        found = shutil.which(runtime)
        return finding(found is not None, f"{runtime}: {found}" if found else f"{runtime} is not on the node's PATH",
                       runtime=runtime, path=found)
    present = [name for name in CONTAINER_RUNTIMES if shutil.which(name)]
    return finding(None, f"no container in the profile; on the node: {', '.join(present) or 'none'}", found=present)


def wait_for_stop_signal(wait_s: float, time_left: Callable[[], float | None],
                         signals: Sequence[int] = STOP_SIGNALS, step_s: float = 0.5) -> dict[str, Any]:
    """Wait at most ``wait_s`` seconds for a stop signal; say which came and how long before the job's end."""
    got: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, _frame: got.append(signum)) for signum in signals}
    try:
        deadline = time.monotonic() + max(0.0, wait_s)
        while not got and time.monotonic() < deadline:
            time.sleep(min(step_s, max(0.0, deadline - time.monotonic())))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if not got:
        return finding(False, f"no stop signal within {round(wait_s)} s", waited_s=round(wait_s))
    left = time_left()
    name = signal.Signals(got[0]).name
    when = f"{round(left)} s before the time limit" if left is not None else "(the time limit is not known)"
    return finding(True, f"{name} reached the python process {when}", signal=name,
                   before_limit_s=None if left is None else round(left))


# ---------------------------------------------------------------- the check job


def read_findings(path: Path | str) -> dict[str, Any] | None:
    """Return the findings a check job wrote (None when it wrote none), read by the one bounded reader."""
    text = read_record_text(path, "cluster check findings", MAX_FINDINGS_BYTES)
    if text is None:
        return None
    data = parse_json_text(text, path, "cluster check findings")
    if not isinstance(data, dict) or not isinstance(data.get("findings"), dict):
        raise RecordError("the cluster check findings are not what a check job writes", where=str(path))
    return data


def _write(path: Path, record: dict[str, Any]) -> None:
    write_text_atomic(path, dumps_json(record, indent=1) + "\n")


@job_entry
def run_site_check(findings_file: str, request: dict[str, Any]) -> None:
    """The check job: probe this node, write the findings, wait for the stop signal, then ask to be requeued.

    ``request``: ``partition``, ``gpus`` and ``cpus`` asked, the profile's ``setup`` lines, ``container`` runtime,
    ``python``, ``scratch_mb`` (size of the write test), ``signal_wait_s`` (0: do not wait for the signal) and
    ``requeue`` (ask to be requeued once the signal came). A requeued attempt only notes it came back."""
    path = Path(findings_file)
    env = job_env.current()
    if env.restarts > 0:  # the requeued attempt: the job came back
        record = read_findings(path) or {"version": FINDINGS_VERSION, "findings": {}}
        record["findings"]["requeue"] = finding(True, f"requeued, and came back (attempt {env.restarts + 1})",
                                                came_back=True)
        record["done"] = True
        _write(path, record)
        return
    record: dict[str, Any] = {"version": FINDINGS_VERSION, "partition": request.get("partition"),
                              "node": env.node_name() or socket.gethostname(), "job_id": env.job_id,
                              "started": time.time(), "done": False, "findings": {}}
    found = record["findings"]
    probes: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("gpus", lambda: probe_gpus(int(request.get("gpus") or 0))),
        ("cpu_binding", lambda: probe_cpu_binding(request.get("cpus"))),
        ("scratch", lambda: probe_scratch(test_mb=int(request.get("scratch_mb") or 64))),
        ("shm", probe_shm),
        ("setup", lambda: probe_setup(list(request.get("setup") or []))),
        ("imports", lambda: probe_imports(request.get("python"))),
        ("container", lambda: probe_container(request.get("container"))),
    ]
    for name, probe in probes:
        try:
            found[name] = probe()
        except Exception as exc:  # a probe's own failure is a finding, not the end of the check
            found[name] = finding(False, f"the probe failed: {type(exc).__name__}: {str(exc)[:200]}")
        _write(path, record)
    for name, answer in env.site_probes().items():
        found[name] = answer
    wait_s = float(request.get("signal_wait_s") or 0)
    if wait_s <= 0:
        found["stop_signal"] = finding(None, "not waited for (the check was asked not to)")
        record["done"] = True
        _write(path, record)
        return
    found["stop_signal"] = finding(False, "the job ended before a stop signal reached it")
    _write(path, record)
    end = env.ask_end_time()  # the environment's word (SLURM >= 23.02), else one scheduler call (22.05 has none)

    def time_left() -> float | None:
        return None if end is None else max(0.0, end - time.time())

    left = time_left()
    found["stop_signal"] = wait_for_stop_signal(min(wait_s, left) if left is not None else wait_s, time_left)
    if found["stop_signal"]["ok"] and request.get("requeue"):
        # the scheduler may stop this process as it requeues the job, before it hears the answer: the requeued
        # attempt then says it came back (the login side waits for it)
        found["requeue"] = finding(None, "asked the scheduler to requeue the job; no answer before it was stopped")
        _write(path, record)
        job = env.requeue()
        found["requeue"] = (finding(True, f"the scheduler accepted requeueing job {job}", accepted=True) if job
                            else finding(False, "the scheduler refused to requeue the job", accepted=False))
        if job:  # not done yet: the requeued attempt says it came back, so the job's last record is one that ran
            _write(path, record)  # (the accounting finding reads it: a requeued attempt cancelled unrun has no usage)
            return
    record["done"] = True
    _write(path, record)
