"""apply_cpu_budget in real processes: torch's thread pools, the variables children inherit, user settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hpc_runner.resources.cpus import CpuBudget
from hpc_runner.resources.threads import THREAD_VARIABLES, set_thread_variables

MASK = len(os.sched_getaffinity(0))

# Pin to one CPU, apply the budget, start a child, then apply a second budget in the same process
# (an in-process local sweep does that) and report what torch and the child saw.
SCRIPT = """
import json, os, subprocess, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from hpc_runner.resources.cpus import set_explicit_cpus
from hpc_runner.resources.threads import THREAD_VARIABLES, use_cpu_budget
first = use_cpu_budget()
import torch
seen = {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads()}
child = subprocess.run([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
                       capture_output=True, text=True, check=True)
seen["child"] = {k: v for k, v in json.loads(child.stdout).items() if k in THREAD_VARIABLES}
os.sched_setaffinity(0, set(range(os.cpu_count())) & {0, 1})
set_explicit_cpus(2)
second = use_cpu_budget()
print(json.dumps({"first": first, "seen": seen, "second": second}))
"""


def _clean_env(**extra: str) -> dict[str, str]:
    drop = ("SLURM_", "HPCR_", "TORCHELASTIC")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in THREAD_VARIABLES}
    return {**env, **extra}


@pytest.fixture(scope="module")
def pinned() -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=_clean_env())
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_process_pinned_to_one_cpu_runs_one_torch_thread(pinned):
    assert pinned["first"]["count"] == 1 and pinned["first"]["source"] == "affinity"
    assert pinned["seen"] == {"torch": 1, "interop": 1, "child": pinned["seen"]["child"]}
    assert pinned["first"]["torch_threads"] == 1 and pinned["first"]["interop_threads"] == 1


def test_the_thread_variables_reach_a_child_process(pinned):
    assert pinned["seen"]["child"] == {name: "1" for name in THREAD_VARIABLES}
    assert pinned["first"]["variables"] == {name: "1" for name in THREAD_VARIABLES}
    assert "user_set" not in pinned["first"]


@pytest.mark.skipif(MASK < 2, reason="needs an affinity mask of 2 CPUs or more")
def test_a_second_budget_in_the_same_process_changes_our_variables_but_not_interop(pinned):
    second = pinned["second"]
    assert (second["count"], second["source"]) == (2, "--cpus")
    assert second["variables"] == {name: "2" for name in THREAD_VARIABLES}  # ours to change, not the user's
    assert second["torch_threads"] == 2 and second["interop_threads"] == 1
    assert "once per process" in second["note"]


def test_variables_the_user_set_are_kept_and_named():
    env = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "1"}
    values, user_set = set_thread_variables(CpuBudget(2, "affinity", "test"), env)
    assert user_set == ["OMP_NUM_THREADS", "MKL_NUM_THREADS"]
    assert values["OMP_NUM_THREADS"] == "3" and values["MKL_NUM_THREADS"] == "1"
    assert values["OPENBLAS_NUM_THREADS"] == "2" == env["OPENBLAS_NUM_THREADS"]


@pytest.mark.skipif(MASK < 2, reason="needs an affinity mask of 2 CPUs or more")
def test_a_smaller_omp_num_threads_from_the_user_limits_torch_below_the_budget():
    code = ("import json; from hpc_runner.resources.threads import use_cpu_budget; import torch;"
            "r = use_cpu_budget(); print(json.dumps([r['count'], r['torch_threads'], r['user_set']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_clean_env(OMP_NUM_THREADS="1", HPCR_CPUS="2"), check=True)
    assert json.loads(out.stdout) == [2, 1, ["OMP_NUM_THREADS"]]
