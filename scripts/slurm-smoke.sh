#!/usr/bin/env bash
# Smoke test of the cluster started by scripts/local-slurm.sh: the SLURM features the
# project relies on, each checked against the real daemons. Takes about 40 s.
#
# Usage: scripts/slurm-smoke.sh        (PYTHON=... picks a python with submitit; default .venv)
# Exit status: the number of failed checks (0 = all passed).
# SC2016: the --wrap scripts are single-quoted on purpose, their $VARS expand inside the job.
# SC2317: sacct_is/out_is are called through check "$@", which shellcheck cannot follow.
# shellcheck disable=SC2016,SC2317
set -uo pipefail   # no -e: a failed check is counted, not fatal

HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${LOCAL_SLURM_DIR:-/tmp/hpcr-slurm}
PY=${PYTHON:-$HERE/../.venv/bin/python}
# shellcheck source=/dev/null
. "$DIR/env.sh" || { echo "no $DIR/env.sh: start the cluster with scripts/local-slurm.sh start" >&2; exit 1; }
W=$DIR/jobs/smoke-$$
mkdir -p "$W" && cd "$W" || exit 1
passes=0 fails=0

check() {   # check NAME CMD...: run CMD, count and print the outcome
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; passes=$((passes + 1)); else echo "FAIL $name"; fails=$((fails + 1)); fi
}
# done_wait ID: poll until squeue no longer lists ID as pending/running/completing (60 s max).
done_wait() {
  local i
  for ((i = 0; i < 300; i++)); do
    squeue -h -j "$1" 2>/dev/null | grep -q . || return 0
    sleep 0.2
  done
  return 1
}
# sacct_is ID STATE [N]: sacct lags slurmctld by a few seconds and may list only some array
# tasks at first, so poll until it reports STATE for every record and at least N records.
sacct_is() {
  local i s n
  for ((i = 0; i < 60; i++)); do
    s=$(sacct -j "$1" -X -n -P -o State | sort -u)
    n=$(sacct -j "$1" -X -n -P -o JobID | wc -l)
    [[ $s == "$2" && $n -ge ${3:-1} ]] && return 0
    sleep 0.5
  done
  echo "  sacct says: $s ($n records)"
  return 1
}
out_is() { [[ "$(cat "$1" 2>/dev/null)" == "$2" ]] || { echo "  $1: '$(cat "$1" 2>&1)' != '$2'"; return 1; }; }

t0=$SECONDS
J=$(sbatch --parsable -o hi-%j.out --wrap 'echo hi'); done_wait "$J"
check "sbatch --wrap runs" out_is "hi-$J.out" hi
check "sacct reports COMPLETED" sacct_is "$J" COMPLETED

A=$(sbatch --parsable --array=0-19 -o arr-%A_%a.out --wrap 'echo $SLURM_ARRAY_TASK_ID'); done_wait "$A"
cat arr-"$A"_*.out 2>/dev/null | sort -n >arr-all.txt
check "array 0-19: every task ran once" out_is arr-all.txt "$(seq 0 19)"
check "sacct: 20 array tasks COMPLETED" sacct_is "$A" COMPLETED 20

J=$(sbatch --parsable --export=ALL,PARAM=100 -o exp-%j.out --wrap 'echo $PARAM'); done_wait "$J"
check "--export=ALL,PARAM=100 reaches the job" out_is "exp-$J.out" 100

J=$(sbatch --parsable -p gpu --gres=gpu:1 -o g1-%j.out --wrap 'echo $CUDA_VISIBLE_DEVICES'); done_wait "$J"
check "-p gpu --gres=gpu:1 -> CUDA_VISIBLE_DEVICES=0" out_is "g1-$J.out" 0
J=$(sbatch --parsable --gres=gpu:2 -o g2-%j.out --wrap 'echo $CUDA_VISIBLE_DEVICES'); done_wait "$J"
check "--gres=gpu:2 -> CUDA_VISIBLE_DEVICES=0,1" out_is "g2-$J.out" 0,1
check "--gres=gpu:3 refused" eval '! sbatch --gres=gpu:3 --wrap true 2>/dev/null'

J=$(sbatch --parsable -o /dev/null --wrap 'exit 3'); done_wait "$J"
check "sacct reports FAILED for exit 3" sacct_is "$J" FAILED

MAX=$(scontrol show config | sed -n 's/^MaxArraySize *= *//p')
check "MaxArraySize=$MAX: --array=0-$((MAX - 1)) accepted" eval "sbatch --test-only --array=0-$((MAX - 1)) --wrap true 2>/dev/null"
check "MaxArraySize=$MAX: --array=0-$MAX refused" eval "! sbatch --test-only --array=0-$MAX --wrap true 2>/dev/null"

J=$(sbatch --parsable --time=1 --signal=B:USR2@30 -o /dev/null --wrap 'sleep 300')
sleep 1
check "squeue shows RUNNING" eval "[[ \$(squeue -h -j $J -o %T) == RUNNING ]]"
check "--time=1 --signal=B:USR2@30 accepted" eval "scontrol show job $J | grep -q TimeLimit=00:01:00"
scancel "$J"; done_wait "$J"
check "scancel -> sacct CANCELLED by 0" sacct_is "$J" "CANCELLED by 0"
check "finished job still in squeue -t all (MinJobAge)" eval "squeue -h -t all -j $J -o %T | grep -q CANCELLED"

# Requeue (what preemption does): the job restarts with SLURM_RESTART_COUNT=1. The restart
# waits for cred_expire (10 s here, 120 s by default).
J=$(sbatch --parsable -o rq-%j.out --open-mode=append --wrap 'echo run ${SLURM_RESTART_COUNT:-0}; sleep 2')
sleep 1
tq=$SECONDS
scontrol requeue "$J"; sleep 1; done_wait "$J"
check "scontrol requeue -> reruns with SLURM_RESTART_COUNT=1 ($((SECONDS - tq)) s)" eval "grep -q '^run 1' rq-$J.out"

echo "== submitit ($PY)"
check "submitit: submit, map_array, gpu partition, failure, cancel" "$PY" - "$W/submitit/%j" <<'EOF'
import os, sys, time
import submitit

def sq(x):
    return x * x, os.environ.get("SLURM_ARRAY_TASK_ID")

def gpus():
    return os.environ.get("CUDA_VISIBLE_DEVICES")

def boom():
    raise ValueError("expected failure")

def state(job, want, timeout=30):
    end = time.time() + timeout   # sacct lags; force submitit to poll it again
    while not (s := job.watcher.get_state(job.job_id, mode="force")).startswith(want) and time.time() < end:
        time.sleep(1)
    return s

ex = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
ex.update_parameters(timeout_min=5, slurm_partition="small", cpus_per_task=1)
assert ex.submit(pow, 2, 5).result() == 32
jobs = ex.map_array(sq, range(5))
assert [j.result() for j in jobs] == [(i * i, str(i)) for i in range(5)]
print("  map_array states:", sorted({state(j, "COMPLETED") for j in jobs}))
gx = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
gx.update_parameters(timeout_min=5, slurm_partition="gpu", gpus_per_node=1)
assert gx.submit(gpus).result() == "0"
f = ex.submit(boom)
try:
    f.result()
    raise AssertionError("boom() did not fail")
except submitit.core.utils.FailedJobError:
    print("  failing job:", state(f, "FAILED"))
c = ex.submit(time.sleep, 300)
assert state(c, "RUNNING") == "RUNNING"
c.cancel()
print("  cancelled job:", state(c, "CANCELLED"))
EOF

echo "$passes passed, $fails failed in $((SECONDS - t0)) s (outputs in $W)"
exit "$fails"
