#!/usr/bin/env bash
# A real Grid Engine (Debian's Son of Grid Engine 8.1.9) on this machine, for hpc-runner's tests and CI.
#
# Usage: scripts/local-sge.sh start | stop | status | env
#
#   start   install gridengine-master, gridengine-exec and gridengine-client if missing (debconf preseeded:
#           master = this host, cell = default, configured by the package), then start sge_qmaster and
#           sge_execd (apt does not start them), write the global configuration, the exec host, the
#           parallel environment `smp` and the queue `all.q` (qconf -M.../-A... of files, never an editor),
#           and wait until a trivial `qsub -sync y` job runs. Idempotent: daemons already running (per pid
#           file) are kept, and an object is rewritten only when it differs.
#   stop    delete every job, stop sge_execd and sge_qmaster (qconf -ke/-km, then the pid files).
#   status  the daemons, `qstat -f`, and whether qacct answers; exit 1 if the cluster does not answer.
#   env     print the lines that point clients at this cluster:
#               eval "$(scripts/local-sge.sh env)"    # or: . /tmp/hpcr-sge/env.sh
#
# What the cluster offers:
#   host         this machine, one exec host under its own name (`hostname`). Where the name resolves to
#                127.0.0.1 and 127.0.0.1's first name is `localhost` (a container's /etc/hosts), Grid Engine
#                would see its clients as "localhost" and refuse them ("client IP resolved to host name
#                localhost. This is not identical to clients host name"): the line `HOST localhost` in
#                $SGE_ROOT/default/common/host_aliases makes both names the same host.
#   queue        all.q on this host: LOCAL_SGE_SLOTS (default 2) slots, shell /bin/bash, pe_list smp,
#                rerun FALSE (a job asks for `-r y`), notify 00:00:10 (SIGUSR1/SIGUSR2 10 s before
#                SIGSTOP/SIGKILL for jobs submitted with -notify).
#   pe           smp: allocation_rule $pe_slots (every slot on one host), for `-pe smp N`.
#   memory       h_vmem is a consumable with the host's memory as its capacity, so `-l h_vmem=1G` is both
#                booked and enforced: sge_execd polls each job's virtual memory (every second here) and
#                SIGKILLs a job past it (qacct: failed 37, exit_status 137), besides setting it as the
#                job's address-space limit. A job that asks for none gets LOCAL_SGE_DEFAULT_VMEM (default:
#                the host's memory / LOCAL_SGE_SLOTS) and is limited to it: a consumable's default is also
#                its limit, so a default of 0 would kill every job at once.
#   accounting   qacct reads $SGE_ROOT/default/common/accounting; accounting_flush_time=00:00:00 writes a
#                record as soon as a job ends (the default buffers 15 s).
#   limits       max_u_jobs (LOCAL_SGE_MAX_U_JOBS, default 0 = none), max_aj_tasks (LOCAL_SGE_MAX_AJ_TASKS,
#                default 75000), max_aj_instances (LOCAL_SGE_MAX_AJ_INSTANCES, default 2000): the global
#                configuration's, applied on every start.
#   root         min_uid 0 and min_gid 0, so root may run jobs (the tests run as root).
#   login shells login_shells none: Grid Engine's default (bash,sh,ksh,csh,tcsh) starts every job script as a
#                login shell ("-bash"), which runs this machine's ~/.profile: here pyenv's rehash, which waits up
#                to 60 s on a lock a killed job left behind, made every job take 61 s.
#   speed        the scheduler runs every 2 s (schedule_interval 0:0:2) and on every submit and job end
#                (flush_submit_sec/flush_finish_sec 1), so a job starts within about 1-3 s.
#   requeue      a job that exits 99 (submitted with -r y) is put back (qstat: Rq) but "cannot run on host
#                ... until clean up of a previous run has finished": until sge_execd's next load report.
#                load_report_time 00:00:05 (default 40 s) makes that wait at most ~5 s.
#
# Environment:
#   LOCAL_SGE_DIR              this script's own files (default /tmp/hpcr-sge): the qconf files it writes,
#                              log/apt.log, env.sh. Grid Engine's own state stays where Debian puts it:
#                              /var/lib/gridengine (SGE_ROOT) and /var/spool/gridengine.
#   LOCAL_SGE_SLOTS            slots of the queue (default 2)
#   LOCAL_SGE_MAX_U_JOBS, LOCAL_SGE_MAX_AJ_TASKS, LOCAL_SGE_MAX_AJ_INSTANCES   see limits above
#   LOCAL_SGE_START_TIMEOUT    seconds to wait for the first job to run (default 60)
#
# Needs root (the daemons, apt, jobs as any user) and Debian 12 or similar. No systemd needed. Only one local
# cluster at a time: start refuses while scripts/local-slurm.sh's SLURM is running. Ports: sge_qmaster 6444,
# sge_execd 6445 (/etc/services).
set -Eeuo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${LOCAL_SGE_DIR:-/tmp/hpcr-sge}
SLOTS=${LOCAL_SGE_SLOTS:-2}
MAX_U_JOBS=${LOCAL_SGE_MAX_U_JOBS:-0}
MAX_AJ_TASKS=${LOCAL_SGE_MAX_AJ_TASKS:-75000}
MAX_AJ_INSTANCES=${LOCAL_SGE_MAX_AJ_INSTANCES:-2000}
TIMEOUT=${LOCAL_SGE_START_TIMEOUT:-60}
PKGS=(gridengine-master gridengine-exec gridengine-client)
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
COMMON=$SGE_ROOT/$SGE_CELL/common
SPOOL=/var/spool/gridengine
QMASTER_PID=$SPOOL/qmaster/qmaster.pid

log() { echo "local-sge: $*" >&2; }
usage_error() { log "ERROR: $*"; exit 2; }
# The daemons' messages files are the only way to see why a start failed.
show_logs() {
  local f
  for f in "$@" "$SPOOL/qmaster/messages" "$SPOOL"/execd/*/messages; do
    [[ -f $f ]] || continue
    echo "===== $f (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
}
die() {
  log "ERROR: $1"
  shift
  show_logs "$@"
  log "daemons that did start keep running; scripts/local-sge.sh stop stops them"
  exit 1
}
# wait_until SECONDS CMD...: poll CMD every 0.5 s until it succeeds or SECONDS have passed.
wait_until() {
  local end=$((SECONDS + $1))
  shift
  while ((SECONDS < end)); do
    "$@" && return 0
    sleep 0.5
  done
  return 1
}
host() { hostname; }
# sge_execd spools under the name it resolves itself to (localhost where this host's address is named so)
execd_pid_file() {
  local f
  for f in "$SPOOL"/execd/*/execd.pid; do
    alive "$f" sge_execd && { echo "$f"; return 0; }
  done
  echo "$SPOOL/execd/$(host)/execd.pid"
}
# flat: a qconf listing with its continuation lines joined, one "key value" line each, words single-spaced
flat() { sed -e ':a' -e '/\\$/N; s/\\\n[[:space:]]*/ /; ta' | tr -s ' \t' '  ' | sed 's/ $//'; }
# alive PIDFILE WORD: the pid file names a live process whose command line mentions WORD.
alive() {
  local p
  p=$(cat "$1" 2>/dev/null) || return 1
  [[ -n $p ]] && grep -qa "$2" "/proc/$p/cmdline" 2>/dev/null
}
running() {
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null) && [[ -n $s && ${s:0:1} != Z ]]
}
qmaster_answers() { qconf -sh >/dev/null 2>&1; }
check_count() {  # check_count NAME VALUE LOW HIGH
  [[ $2 =~ ^[0-9]+$ ]] && (($2 >= $3 && $2 <= $4)) || usage_error "$1 must be an integer in $3..$4, got '$2'"
}

install_packages() {
  dpkg -s "${PKGS[@]}" >/dev/null 2>&1 && return 0
  log "installing ${PKGS[*]} (log: $DIR/log/apt.log)"
  local pkg h
  h=$(host)
  # The packages ask for the master's host and the cell and whether to configure the cell themselves.
  for pkg in gridengine-common gridengine-master gridengine-client gridengine-exec; do
    printf '%s shared/%s %s %s\n' "$pkg" gridenginemaster string "$h" "$pkg" gridenginecell string default \
      "$pkg" gridengineconfig boolean true
  done | debconf-set-selections
  # Lists may be stale or absent on a fresh CI image, so always update first.
  { apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PKGS[@]}"; } \
    >"$DIR/log/apt.log" 2>&1 || die "apt-get install failed" "$DIR/log/apt.log"
  [[ -f $COMMON/bootstrap ]] || die "the packages did not configure the cell ($COMMON/bootstrap missing)" "$DIR/log/apt.log"
}

# ensure_names: act_qmaster names this host, and where this host resolves to an address whose first name is
# localhost, host_aliases makes localhost this host (read by sge_qmaster when it starts). True if changed.
ensure_names() {
  local h addr first changed=1
  h=$(host)
  if [[ $(cat "$COMMON/act_qmaster" 2>/dev/null) != "$h" ]]; then
    echo "$h" >"$COMMON/act_qmaster"
    changed=0
  fi
  addr=$(getent hosts "$h" | awk '{print $1; exit}')
  first=$(getent hosts "${addr:-127.0.0.1}" | awk '{print $2; exit}')
  if [[ $first == localhost && $h != localhost ]] && ! grep -qx "$h localhost" "$COMMON/host_aliases" 2>/dev/null; then
    echo "$h localhost" >>"$COMMON/host_aliases"
    log "host_aliases: $h localhost ($h resolves to $addr, whose name is localhost)"
    changed=0
  fi
  return $changed
}

start_qmaster() {
  if ! alive "$QMASTER_PID" sge_qmaster; then
    /usr/sbin/sge_qmaster || die "sge_qmaster failed to start"
  fi
  wait_until 30 qmaster_answers || die "sge_qmaster does not answer qconf within 30 s"
}
stop_pid() {  # stop_pid PIDFILE WORD NAME: SIGTERM, 10 s, SIGKILL
  local p k
  alive "$1" "$2" || return 0
  p=$(cat "$1")
  kill -TERM "$p" 2>/dev/null || true
  for ((k = 0; k < 100; k++)); do
    running "$p" || break
    sleep 0.1
  done
  if running "$p"; then
    log "$3 ($p) ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$p" 2>/dev/null || true
  fi
  rm -f "$1"
  log "stopped $3 ($p)"
}

# apply KIND NAME FILE: add the object from FILE, or modify it when it exists and differs (qconf -A./-M.).
apply() {
  local kind=$1 name=$2 file=$3 show add mod out
  case $kind in
    exechost) show=(-se "$name") add=-Ae mod=-Me ;;
    pe) show=(-sp "$name") add=-Ap mod=-Mp ;;
    queue) show=(-sq "$name") add=-Aq mod=-Mq ;;
  esac
  if out=$(qconf "${show[@]}" 2>/dev/null); then
    # compare the attributes the file sets, as qconf prints them
    if diff -q <(flat <"$file" | sort) <(flat <<<"$out" | grep -Ff <(awk '{print $1" "}' "$file") | sort) >/dev/null; then
      return 0
    fi
    qconf "$mod" "$file" >/dev/null || die "qconf $mod $file refused"
  else
    qconf "$add" "$file" >/dev/null || die "qconf $add $file refused"
  fi
  log "$kind $name written ($file)"
}

write_config() {
  local h mem mem_m
  h=$(host)
  mem_m=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
  mem=${mem_m}M
  # global configuration: the current one with our values in place; qconf -Mconf reads a file named global
  mkdir -p "$DIR/conf"
  qconf -sconf global | grep -v '^#' | flat >"$DIR/conf/global.now" || die "qconf -sconf global failed"
  awk -v u="$MAX_U_JOBS" -v t="$MAX_AJ_TASKS" -v i="$MAX_AJ_INSTANCES" '
    BEGIN { set["min_uid"] = 0; set["min_gid"] = 0; set["max_u_jobs"] = u; set["max_aj_tasks"] = t
            set["max_aj_instances"] = i; set["load_report_time"] = "00:00:05"
            set["login_shells"] = "none"
            set["reporting_params"] = "accounting=true reporting=false flush_time=00:00:15 joblog=false " \
                                      "sharelog=00:00:00 accounting_flush_time=00:00:00" }
    $1 in set { print $1, set[$1]; next } { print }' "$DIR/conf/global.now" >"$DIR/conf/global"
  if ! cmp -s "$DIR/conf/global.now" "$DIR/conf/global"; then
    qconf -Mconf "$DIR/conf/global" >/dev/null || die "qconf -Mconf $DIR/conf/global refused"
    log "global configuration written ($DIR/conf/global)"
  fi
  # scheduler: run often, and on every submission and job end
  qconf -ssconf >"$DIR/conf/sched.now" || die "qconf -ssconf failed"
  sed -e "s/^schedule_interval .*/schedule_interval                 0:0:2/" \
    -e "s/^flush_submit_sec .*/flush_submit_sec                  1/" \
    -e "s/^flush_finish_sec .*/flush_finish_sec                  1/" \
    "$DIR/conf/sched.now" >"$DIR/conf/sched"
  if ! cmp -s "$DIR/conf/sched.now" "$DIR/conf/sched"; then
    qconf -Msconf "$DIR/conf/sched" >/dev/null || die "qconf -Msconf $DIR/conf/sched refused"
    log "scheduler configuration written ($DIR/conf/sched)"
  fi
  qconf -sc >"$DIR/conf/complex.now" || die "qconf -sc failed"
  # h_vmem a consumable; its default is what a job that asks for none is given AND limited to: 0 would kill
  # every such job at once ("exceeds job hard limit h_vmem ... limit: 0.00000")
  local vmem=${LOCAL_SGE_DEFAULT_VMEM:-$((mem_m / SLOTS))M}
  awk -v d="$vmem" '$1 == "h_vmem" {$6 = "YES"; $7 = d} {print}' "$DIR/conf/complex.now" >"$DIR/conf/complex"
  if ! diff -q <(tr -s ' ' <"$DIR/conf/complex.now") <(tr -s ' ' <"$DIR/conf/complex") >/dev/null; then
    qconf -Mc "$DIR/conf/complex" >/dev/null || die "qconf -Mc $DIR/conf/complex refused"
    log "h_vmem is a consumable"
  fi
  cat >"$DIR/conf/exechost" <<EOF
hostname $h
load_scaling NONE
complex_values h_vmem=$mem
user_lists NONE
xuser_lists NONE
projects NONE
xprojects NONE
usage_scaling NONE
report_variables NONE
EOF
  apply exechost "$h" "$DIR/conf/exechost"
  cat >"$DIR/conf/pe" <<'EOF'
pe_name smp
slots 999
user_lists NONE
xuser_lists NONE
start_proc_args NONE
stop_proc_args NONE
allocation_rule $pe_slots
control_slaves FALSE
job_is_first_task TRUE
urgency_slots min
accounting_summary FALSE
qsort_args NONE
EOF
  apply pe smp "$DIR/conf/pe"
  {
    printf '%s\n' "qname all.q" "hostlist $h" "seq_no 0" "load_thresholds NONE" "suspend_thresholds NONE" \
      "nsuspend 1" "suspend_interval 00:05:00" "priority 0" "min_cpu_interval 00:05:00" "processors UNDEFINED" \
      "qtype BATCH INTERACTIVE" "ckpt_list NONE" "pe_list smp" "rerun FALSE" "slots $SLOTS" "tmpdir /tmp" \
      "shell /bin/bash" "prolog NONE" "epilog NONE" "shell_start_mode posix_compliant" "starter_method NONE" \
      "suspend_method NONE" "resume_method NONE" "terminate_method NONE" "notify 00:00:10" "owner_list NONE" \
      "user_lists NONE" "xuser_lists NONE" "subordinate_list NONE" "complex_values NONE" "projects NONE" \
      "xprojects NONE" "calendar NONE" "initial_state default"
    local lim
    for lim in rt cpu fsize data stack core rss vmem; do printf 's_%s INFINITY\nh_%s INFINITY\n' "$lim" "$lim"; done
  } >"$DIR/conf/queue"
  apply queue all.q "$DIR/conf/queue"
  # this host submits jobs (qsub) besides running them
  grep -qx "$h" <(qconf -ss 2>/dev/null) || { qconf -as "$h" >/dev/null 2>&1 || die "qconf -as $h refused"; }
}

start_execd() {
  if ! alive "$(execd_pid_file)" sge_execd; then
    /usr/sbin/sge_execd || die "sge_execd failed to start"
  fi
}
# a trivial job runs to its end (the queue is usable): qsub -sync y waits for it
job_runs() {
  timeout 30 qsub -sync y -b y -N hpcr-probe -o /dev/null -e /dev/null -now n /bin/true >/dev/null 2>&1
}
slurm_running() {
  [[ -x $HERE/local-slurm.sh ]] || return 1
  # grep reads it all (no -q): an early exit would SIGPIPE the writer and, under pipefail, read as "not running"
  timeout 30 "$HERE/local-slurm.sh" status 2>/dev/null | grep -E '^slurmctld +running' >/dev/null
}
close_inherited_fds() {  # the daemons would keep every open fd of this shell (a flock'd lock) for life
  local fd
  for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    ((fd > 2 && fd < 255)) || continue
    eval "exec $fd>&-" 2>/dev/null || true
  done
}

cmd_start() {
  close_inherited_fds
  [[ $(id -u) == 0 ]] || usage_error "must run as root (the daemons, apt, min_uid 0)"
  [[ $DIR != *[[:space:]]* ]] || usage_error "LOCAL_SGE_DIR must not contain spaces: '$DIR'"
  check_count LOCAL_SGE_SLOTS "$SLOTS" 1 4096
  check_count LOCAL_SGE_MAX_U_JOBS "$MAX_U_JOBS" 0 100000000
  check_count LOCAL_SGE_MAX_AJ_TASKS "$MAX_AJ_TASKS" 0 100000000
  check_count LOCAL_SGE_MAX_AJ_INSTANCES "$MAX_AJ_INSTANCES" 0 100000000
  check_count LOCAL_SGE_START_TIMEOUT "$TIMEOUT" 1 3600
  if slurm_running; then
    usage_error "the local SLURM is running (scripts/local-slurm.sh status): one local cluster at a time; stop it first"
  fi
  local t0=$SECONDS
  mkdir -p "$DIR/log" "$DIR/conf"
  trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR
  install_packages
  if ensure_names && alive "$QMASTER_PID" sge_qmaster; then
    log "host names changed: restarting sge_qmaster"
    stop_pid "$QMASTER_PID" sge_qmaster sge_qmaster
  fi
  start_qmaster
  write_config
  start_execd
  printf 'export SGE_ROOT=%q SGE_CELL=%q\n' "$SGE_ROOT" "$SGE_CELL" >"$DIR/env.sh"
  wait_until "$TIMEOUT" job_runs || die "no trivial job ran within ${TIMEOUT}s: $(qstat -f 2>&1 | tail -n 5 | tr '\n' ' ')"
  trap - ERR
  log "queue all.q on $(host) ($SLOTS slots) usable after $((SECONDS - t0))s; clients: . $DIR/env.sh"
}

no_sge_daemons() { ! pgrep -x sge_qmaster >/dev/null && ! pgrep -x sge_execd >/dev/null; }

cmd_stop() {
  if alive "$QMASTER_PID" sge_qmaster; then
    qdel -u '*' >/dev/null 2>&1 || true
    wait_until 20 queue_empty || log "jobs still listed after 20 s: $(qstat -u '*' 2>&1 | sed -n 3,5p | tr '\n' ' ')"
    qconf -ke "$(host)" >/dev/null 2>&1 || true
  fi
  local f
  f=$(execd_pid_file)
  wait_until 10 not_alive "$f" sge_execd || stop_pid "$f" sge_execd sge_execd
  if alive "$QMASTER_PID" sge_qmaster; then
    qconf -km >/dev/null 2>&1 || true
    wait_until 10 not_alive "$QMASTER_PID" sge_qmaster || stop_pid "$QMASTER_PID" sge_qmaster sge_qmaster
  fi
  # a daemon's pid file can go before the process does: "stopped" means no sge_* process is left (the next
  # scripts/local-slurm.sh start checks for them)
  wait_until 10 no_sge_daemons || log "an sge daemon is still running after 10 s: $(pgrep -a 'sge_(qmaster|execd)' | sed -n 1,2p | tr '\n' ' ')"
  log "stopped"
}
not_alive() { ! alive "$@"; }
queue_empty() { [[ -z $(qstat -u '*' 2>/dev/null) ]]; }

cmd_status() {
  local ok=0 f
  f=$(execd_pid_file)
  if alive "$QMASTER_PID" sge_qmaster; then echo "sge_qmaster  running (pid $(cat "$QMASTER_PID"))"; else echo "sge_qmaster  not running"; fi
  if alive "$f" sge_execd; then echo "sge_execd    running (pid $(cat "$f"))"; else echo "sge_execd    not running"; fi
  echo "SGE_ROOT=$SGE_ROOT SGE_CELL=$SGE_CELL"
  if ! timeout 20 qstat -f 2>&1; then
    echo "qstat: does not answer"
    ok=1
  fi
  if [[ -f $COMMON/accounting ]] && timeout 20 qacct -j '*' >/dev/null 2>&1; then
    echo "qacct: answers"
  else
    echo "qacct: no accounting file yet or no answer"
  fi
  return "$ok"
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) printf 'export SGE_ROOT=%q SGE_CELL=%q\n' "$SGE_ROOT" "$SGE_CELL" ;;
  -h | --help | help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *)
    echo "usage: $0 start | stop | status | env" >&2
    exit 2
    ;;
esac
