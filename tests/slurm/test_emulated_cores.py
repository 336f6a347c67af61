"""The local cluster's emulated nodes on their own cores (scripts/local-slurm.sh, "Own cores").

task/affinity binds every batch script to its job's CPUs, and each emulated node is this same machine: unless
each node maps its CPUs onto the real cores differently, every node's first 1-CPU job is bound to real CPU 0
while the others idle (a 2-at-a-time sweep on two nodes ran each point 2.27x slower than alone). One 1-CPU job
on each of two nodes, running at the same time, must be bound to different real cores: their allowed CPU sets
(batch script and srun step) do not overlap, and each runs on a CPU of its own set.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

# Each job says where it may run and where it runs (field 39 of /proc/self/stat: the CPU it last ran on), in
# the batch script and in an srun step, after waiting until both jobs run (a ready file per node).
PROBE = r"""#!/bin/bash
here=$(hostname)
touch "$1/$here.ready"
for _ in $(seq 600); do [ "$(ls "$1"/*.ready | wc -l)" -ge 2 ] && break; sleep 0.1; done
where() {
  echo "$1 $here allowed=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)" \
    "on=$(awk '{print $39}' /proc/self/stat)"
}
where batch
srun --ntasks=1 bash -c "$(declare -f where); here=$here; where step"
sleep 2
"""
LINE = re.compile(r"^(batch|step) (\S+) allowed=(\S+) on=(\d+)$")


def _cpus(text: str) -> set[int]:
    """A Cpus_allowed_list ("0-1,4") as a set of CPU ids."""
    out: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def _node_cores(slurm_cluster, node: str) -> int:
    """How many cores node `node` declares (every emulated node declares all of this machine's)."""
    text = slurm_cluster.run("scontrol", "show", "node", node).stdout
    fields = dict(re.findall(r"(\w+)=(\S+)", text))
    return int(fields["Sockets"]) * int(fields["CoresPerSocket"])


def test_one_job_on_each_of_two_nodes_runs_on_its_own_real_core(slurm_cluster, tmp_path: Path) -> None:
    part = slurm_cluster.default_partition
    listed = slurm_cluster.run("sinfo", "-h", "-N", "-p", part, "-o", "%N %T")
    nodes = sorted({ln.split()[0] for ln in listed.stdout.splitlines()
                    if ln.split()[-1] in ("idle", "mixed", "allocated", "completing")})
    if len(nodes) < 2:
        pytest.skip(f"the cluster has fewer than 2 usable nodes in {part}: {listed.stdout.strip()}")
    nodes = nodes[:2]
    if _node_cores(slurm_cluster, nodes[0]) < 2:
        pytest.skip("this machine has one core: two emulated nodes cannot each have their own")
    # A job left running on a node holds its first CPU, and the next job there gets another one.
    deadline = time.monotonic() + 60
    while (busy := slurm_cluster.run("squeue", "-h", "-w", ",".join(nodes), "-o", "%i %N %T").stdout.strip()):
        assert time.monotonic() < deadline, f"nodes {nodes} still run other jobs after 60 s:\n{busy}"
        time.sleep(1)
    probe = tmp_path / "probe.sh"
    probe.write_text(PROBE)
    ids = []
    for node in nodes:
        sent = slurm_cluster.run("sbatch", "--parsable", f"--nodelist={node}", "--ntasks=1", "--cpus-per-task=1",
                                 "--time=5", f"--partition={part}", f"--output={tmp_path}/{node}.out",
                                 str(probe), str(tmp_path))
        assert sent.returncode == 0, sent.stderr
        ids.append(sent.stdout.strip().split(";")[0])
    slurm_cluster.wait_for_jobs(ids, timeout=120)
    seen: dict[tuple[str, str], tuple[set[int], int]] = {}
    for node in nodes:
        out = (tmp_path / f"{node}.out").read_text()
        for ln in out.splitlines():
            if m := LINE.match(ln.strip()):
                seen[(m[1], node)] = (_cpus(m[3]), int(m[4]))
        assert {("batch", node), ("step", node)} <= seen.keys(), f"{node}.out:\n{out}"
    report = "\n".join(f"{kind} on {node}: allowed {sorted(cpus)}, ran on CPU {on}"
                       for (kind, node), (cpus, on) in sorted(seen.items()))
    for (kind, node), (cpus, on) in seen.items():
        assert on in cpus, f"{kind} on {node} ran outside its allowed CPUs:\n{report}"
    for kind in ("batch", "step"):
        (a, on_a), (b, on_b) = seen[(kind, nodes[0])], seen[(kind, nodes[1])]
        assert not a & b, f"two emulated nodes' jobs share real CPUs {sorted(a & b)} ({kind}):\n{report}"
        assert on_a != on_b, f"two emulated nodes' jobs ran on the same real CPU {on_a} ({kind}):\n{report}"
