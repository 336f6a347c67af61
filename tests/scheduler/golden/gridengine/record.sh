#!/usr/bin/env bash
# Record the golden files of this folder from a real Grid Engine (scripts/local-sge.sh start; Debian's 8.1.9).
# Usage: tests/scheduler/golden/gridengine/record.sh   (as root; takes about a minute; rewrites the files here)
set -euo pipefail
OUT=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$OUT/../../../.." && pwd)
eval "$("$ROOT/scripts/local-sge.sh" env)"
W=$(mktemp -d /tmp/hpcr-sge-golden.XXXX)
cd "$W"
sub() { qsub -terse -cwd -o "$W" -e "$W" "$@"; }
printf '#!/bin/bash\nsleep "${1:-2}"\n' >sleep.sh
printf '#!/bin/bash\nexit 3\n' >exit3.sh
# two processes, each under the address-space limit, together over h_vmem: sge_execd kills the job
printf '#!/bin/bash\nfor i in 1 2; do python3 -c "b = bytearray(200 << 20); import time; time.sleep(30)" & done; wait\n' >vmem.sh
printf '#!/bin/bash\n[[ ${RESTARTED:-0} == 1 ]] && exit 0\n[[ -f %s/requeued ]] && exit 0\ntouch %s/requeued\nexit 99\n' "$W" "$W" >requeue.sh

sub -t 1-4 -tc 2 -N golden-array sleep.sh 1 | tee "$OUT/qsub_terse_array.txt"
array=$(cut -d. -f1 "$OUT/qsub_terse_array.txt")
fail=$(sub -N golden-exit3 exit3.sh)
rt=$(sub -N golden-h_rt -l h_rt=0:0:3 sleep.sh 60)
vm=$(sub -N golden-h_vmem -l h_vmem=300M vmem.sh)
rq=$(sub -N golden-requeue -r y requeue.sh)
held=$(sub -N golden-held -h sleep.sh 1)
dep=$(sub -N golden-dependent -hold_jid "$held" sleep.sh 1)
eqw=$(qsub -terse -cwd -N golden-eqw -o /nonexistent/out -e /nonexistent/err sleep.sh 1)
pe=$(sub -N golden-pe -pe smp 2 -l h_rt=0:10:0,h_vmem=1G -P NONE sleep.sh 20 2>/dev/null || sub -N golden-pe -pe smp 2 -l h_rt=0:10:0,h_vmem=1G sleep.sh 20)
sleep 3
qstat -xml -g d -u '*' >"$OUT/qstat_mixed.xml"
qstat -xml -j "$dep" >"$OUT/qstat_j_dependent.xml" || true
sleep 30
qstat -xml -g d -u '*' >"$OUT/qstat_late.xml"
cancel=$(sub -N golden-cancel sleep.sh 60)
sleep 4
qdel "$cancel" >"$OUT/qdel.txt" 2>&1 || true
qdel "$held" "$dep" "$eqw" >/dev/null 2>&1 || true
sleep 4
for pair in array:$array exit3:$fail h_rt:$rt h_vmem:$vm requeue:$rq cancelled:$cancel pe:$pe; do
  qacct -j "${pair#*:}" >"$OUT/qacct_${pair%%:*}.txt" 2>&1 || true
done
qacct -j 999999 >"$OUT/qacct_unknown.txt" 2>&1 || true
qconf -sconf global >"$OUT/qconf_sconf_global.txt"
qconf -sq all.q >"$OUT/qconf_sq.txt"
# a submit limit: max_u_jobs=1 with one job queued refuses the next
qconf -sconf global | sed 's/^max_u_jobs .*/max_u_jobs 1/' >"$W/global"
qconf -Mconf "$W/global" >/dev/null
one=$(sub -h sleep.sh 1)
qsub -terse -cwd -o "$W" -e "$W" sleep.sh 1 >"$OUT/qsub_refused_max_u_jobs.txt" 2>&1 || true
qdel "$one" >/dev/null 2>&1 || true
"$ROOT/scripts/local-sge.sh" start >/dev/null 2>&1   # puts the global configuration back
sed -i "s#$W#/tmp/hpcr-sge-golden#g" "$OUT"/*.txt "$OUT"/*.xml
rm -rf "$W"
echo "recorded into $OUT"
