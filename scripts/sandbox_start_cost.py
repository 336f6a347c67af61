"""The start cost of `run --safe`'s sandbox (docs/security.md): the same tiny run of the example three ways,
interleaved, and the sandbox's own parts alone.

    .venv/bin/python scripts/sandbox_start_cost.py [REPEATS]     # default 5; needs bwrap

`plain` is `run`, `allow-list` is `run --safe` as it was before the sandbox (the allow-list only: the run
told it is already inside), `sandbox` is `run --safe`. The parts: the parent's work before bwrap starts
(Python, hpc-runner's CLI, loading the config, proving bwrap), and bwrap around a command that does nothing.
Wall seconds; medians and minima (a shared machine makes single runs noisy).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "bundles" / "synthetic_seg"


def _timed(cmd: list[str], **kw) -> float:
    t = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, **kw)
    if done.returncode != 0:
        sys.exit(f"{cmd[:6]}... exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return time.perf_counter() - t


def main(repeats: int) -> None:
    from hpc_runner.data.synthetic import ensure_synthetic_volumes

    work = Path(tempfile.mkdtemp(prefix="hpcr-sandbox-cost-"))
    ensure_synthetic_volumes(work / "data", num_train=2, num_val=1, size=16, noise_max=0.5, seed=0)
    tiny = ["--num_train", "2", "--num_val", "1", "--image_size", "16", "--max_epochs", "1", "--val_interval", "1",
            "--dataset_dir", str(work / "data")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ways = {
        "plain": ([], {}),
        "allow-list": (["--safe"], {"HPCR_SANDBOXED": "1"}),
        "sandbox": (["--safe"], {}),
    }
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(repeats):
        for name, (flags, extra) in ways.items():
            out = work / f"{name}-{i}"
            cmd = [sys.executable, "-m", "hpc_runner", "run", *flags, "--bundle", str(BUNDLE), *tiny,
                   "--output_dir", str(out)]
            times[name].append(_timed(cmd, cwd=work, env={**env, **extra}))
    for name, values in times.items():
        print(f"{name:>10}: median {statistics.median(values):.2f} s, min {min(values):.2f} s ({repeats} runs)")

    import hpc_runner.engine.sandbox as sandbox
    from hpc_runner.cli import main as cli

    seen: list[list[str]] = []
    sandbox.run_sandboxed = lambda argv: seen.append(list(argv)) or 0  # type: ignore[assignment]
    run_dir = work / "parts"
    cli(["run", "--safe", "--bundle", str(BUNDLE), *tiny, "--output_dir", str(run_dir)])
    run_dir.mkdir()  # the parent removed it again: the run it made nothing
    argv = seen[0][: seen[0].index("--") + 1]
    parent = [sys.executable, "-c", "import sys, hpc_runner.engine.sandbox as s; s.run_sandboxed = lambda a: 0; "
              f"from hpc_runner.cli import main; sys.exit(main({['run', '--safe', '--bundle', str(BUNDLE), *tiny]!r}))"]
    parts = {
        "parent before bwrap": _timed_median(parent, repeats * 2, cwd=work, env=env),
        "bwrap + /bin/true": _timed_median([*argv, "/bin/true"], repeats * 2),
        "/bin/true alone": _timed_median(["/bin/true"], repeats * 2),
    }
    for name, value in parts.items():
        print(f"{name:>20}: median {value:.3f} s")


def _timed_median(cmd: list[str], n: int, **kw) -> float:
    return statistics.median(_timed(cmd, **kw) for _ in range(n))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
