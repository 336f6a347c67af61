#!/usr/bin/env bash
# A real multi-node SLURM cluster emulated on this machine (loopback), for hpc-runner's tests and CI.
#
# Usage: scripts/local-slurm.sh start | stop [--clean] | status | env
#
#   start   install the Debian packages if missing, write the configs and /etc/hosts lines, start
#           munged -> mariadbd -> slurmdbd -> slurmctld -> one slurmd per node and wait until every
#           node is idle. Idempotent: daemons already running (per pid file) are kept; a changed
#           slurm.conf is applied with `scontrol reconfigure`, or, when the set of nodes changed
#           (LOCAL_SLURM_NODES), by restarting slurmctld and the slurmds (queued jobs are kept).
#           A cold start cancels the jobs slurmctld recovers from a cluster that died without `stop`.
#           Refuses while scripts/local-sge.sh's Grid Engine runs (one local cluster at a time).
#   stop    cancel this cluster's jobs and stop the daemons it started (pid files only).
#           --clean also wipes config, state, database and logs: the next start is cold.
#   status  daemons, sinfo, and whether sacct answers; exit 1 if the cluster does not answer.
#   env     print the line that points clients at this cluster:
#               eval "$(scripts/local-slurm.sh env)"    # or: . /tmp/hpcr-slurm/env.sh
#
# What the cluster offers:
#   nodes        LOCAL_SLURM_NODES (default 2) emulated nodes, <host>1..<host>N (`hostname -s`
#                plus the index: vm1, vm2), each its own slurmd (`slurmd -N NAME`, Debian's build
#                has multiple-slurmd support) with its own Port (6821, 6822, ...), spool dir, pid
#                file and log (log/slurmd-NAME.log), its own address 127.0.1.I (NodeAddr, and a
#                line in /etc/hosts), and its own host name: each slurmd runs in a UTS namespace
#                (`unshare --uts`) named after its node, so a job's `hostname` is its node's name
#                and gloo binds to that node's address. Every node declares this machine's cores
#                (CPUs=2 on a 2-core machine) and all of its memory: overcommitted N times, so a one-node
#                job can still have 2 tasks. A job without --mem gets its CPUs' share (DefMemPerCPU).
#   partitions   small (default) and gpu, both over every node (JADE-like naming).
#   fake GPUs    2 gres "gpu" per node backed by character devices, so --gres=gpu:1 sets
#                CUDA_VISIBLE_DEVICES=0 and --gres=gpu:3 is refused. No real GPU behind them.
#   placement    CR_LLN: a job goes to the least loaded node, so consecutive jobs spread.
#   memory       a job's --mem (default: its CPUs' share of the node) is its limit. With a
#                writable cgroup v1 memory controller (gVisor, most VMs) task/cgroup enforces it:
#                the kernel kills the step and sacct says OUT_OF_MEMORY. Without one,
#                JobAcctGatherParams=OverMemoryKill polls RSS every second and kills the step;
#                22.05 then records FAILED, the job log "Exceeded job memory limit".
#   binding      task/affinity with TaskPluginParam=None: a step is bound to its own CPUs when asked
#                (srun --cpu-bind=cores, SLURM_CPU_BIND=cores), so the srun that gets fewer CPUs than
#                its job shows it (tests/slurm/test_cpu_binding.py). Unasked, the batch script is still
#                bound to its job's CPUs on the node (task/affinity always does that) and steps inherit it.
#   own cores    node I's abstract CPU 0 is real core (I-1) mod cores, its CPU 1 the next core: each
#                slurmd reads this machine's hwloc topology with the CPU ids rotated by I-1 cores
#                (HWLOC_XMLFILE=etc/hwloc-NAME.xml; see "Own cores" below), so two nodes' first 1-CPU
#                jobs run on different cores (tests/slurm/test_emulated_cores.py), not both on CPU 0.
#   node failure SlurmdTimeout=30: a node whose slurmd died is DOWN (its jobs NODE_FAIL) ~30-40 s later.
#   arrays       MaxArraySize=$LOCAL_SLURM_MAX_ARRAY_SIZE (default 1001, common on real
#                clusters): array indices must be < MaxArraySize, so --array=0-1000 is
#                accepted and --array=0-1001 refused. Sweep code must split larger sweeps
#                into several arrays; tests can start a cluster with a small limit to check it.
#   sacct        real accounting (slurmdbd + a private MariaDB on 127.0.0.1:13306).
#   requeue      JobRequeue=1; a requeued job restarts about 12 s later (cred_expire=10);
#                finished jobs stay in `squeue -t all`/scontrol for MinJobAge=300 s;
#                KillWait=5 s between SIGTERM and SIGKILL.
#   speed        jobs start ~0.1-0.4 s after sbatch; a freed slot is refilled within ~1 s.
#   limits       AccountingStorageEnforce=associations,limits,qos: a job needs an association,
#                and QOS/association limits are enforced at submission. start creates (idempotently,
#                sacctmgr -i) the account `hpcr` with associations for root and for $SUDO_USER
#                (if set), each allowed the QOS `normal` (default) and `hpcr-limited`. hpcr-limited
#                has no limit until a test sets one, e.g.
#                  sacctmgr -i modify qos hpcr-limited set MaxSubmitJobsPerUser=50
#                  sbatch --qos=hpcr-limited ...     # the 51st queued job is refused:
#                  # "Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)"
#                Reset with MaxSubmitJobsPerUser=-1. MaxSubmitJobs counts every array task
#                (pending or running) as one job; see docs/local-slurm.md.
#
# Environment:
#   LOCAL_SLURM_DIR             everything lives here (default /tmp/hpcr-slurm):
#                               etc/ configs, log/ daemon logs, run/ pids+sockets,
#                               state/, mysql/, dev/ fake GPUs, jobs/ scratch, env.sh
#   LOCAL_SLURM_NODES           how many nodes (default 2, at most 64)
#   LOCAL_SLURM_MEMORY          how a job's memory is limited: cgroup (task/cgroup, cgroup v1),
#                               poll (OverMemoryKill) or auto (default: cgroup when this machine
#                               has a writable cgroup v1 memory controller, else poll)
#   LOCAL_SLURM_MAX_ARRAY_SIZE  MaxArraySize (default 1001)
#   LOCAL_SLURM_START_TIMEOUT   seconds to wait for the nodes to become idle (default 90)
#
# Needs root (slurmd runs jobs as any user, mknod for the fake GPUs, /etc/hosts, SlurmUser=root)
# and Debian 12 or similar (SLURM 22.05). No systemd or cgroups needed. Daemons listen on
# ports 6817 (slurmctld), 6819 (slurmdbd) and 6821.. (one per slurmd) on all interfaces (22.05
# cannot bind loopback only; traffic is munge-authenticated) and MariaDB on 127.0.0.1:13306.
set -Eeuo pipefail

DIR=${LOCAL_SLURM_DIR:-/tmp/hpcr-slurm}
MAX_ARRAY=${LOCAL_SLURM_MAX_ARRAY_SIZE:-1001}
TIMEOUT=${LOCAL_SLURM_START_TIMEOUT:-90}
NODES=${LOCAL_SLURM_NODES:-2}
MEMORY=${LOCAL_SLURM_MEMORY:-auto}
PKGS=(munge slurmctld slurmd slurm-client slurmdbd mariadb-server)
DAEMONS=(munged mariadbd slurmdbd slurmctld)   # start order, then one slurmd per node; stop is the reverse
DB_PORT=13306
NODE_NET=127.0.1      # node I listens on 127.0.1.I: a rank that dials the wrong node fails
NODE_PORT0=6820       # node I's slurmd listens on NODE_PORT0 + I (6819 is slurmdbd's)
HOSTS_MARK="# hpcr-local-slurm node"   # ends each /etc/hosts line this script owns
export SLURM_CONF=$DIR/etc/slurm.conf

log() { echo "local-slurm: $*" >&2; }

# The daemon logs are the only way to see why a start failed, so show all of them
# (plus apt's or mariadb-install-db's when that step is the one that failed).
show_logs() {
  local f
  for f in "$@" "${DAEMONS[@]/#/$DIR/log/}" "$DIR"/log/slurmd-*.log; do
    f=${f%.log}.log
    [[ -f $f ]] || continue
    echo "===== $f (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
}
# usage_error MSG: bad input, no daemon involved.
usage_error() { log "ERROR: $*"; exit 2; }
# die MSG [EXTRA_LOG...]: a step failed; show the logs that say why.
die() {
  log "ERROR: $1"
  shift
  show_logs "$@"
  log "daemons that did start keep running; scripts/local-slurm.sh stop stops them"
  exit 1
}

# alive NAME [WORD]: $DIR/run/NAME.pid names a live process whose command line mentions WORD
# (default NAME; a node's slurmd-vm1.pid is a `slurmd -N vm1`). Checking the command line guards
# against a stale pid file whose pid was reused.
alive() {
  local p
  p=$(cat "$DIR/run/$1.pid" 2>/dev/null) || return 1
  [[ -n $p ]] && grep -qa "${2:-$1}" "/proc/$p/cmdline" 2>/dev/null
}
# running PID: exists and is not a zombie (PID 1 in a container may reap late).
running() {
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null) && [[ -n $s && ${s:0:1} != Z ]]
}
port_free() { [[ -z $(ss -Hltn "sport = :$1") ]]; }
# wait_until SECONDS CMD...: poll CMD every 0.2 s.
wait_until() {
  local n=$(($1 * 5)) i
  shift
  for ((i = 0; i < n; i++)); do
    "$@" && return 0
    sleep 0.2
  done
  return 1
}
# node_names: vm1 vm2 ... on a machine named vm (a name ending in a digit gets an "n": ci-3n1).
# No `... | head` under pipefail in this script: head exits after its lines, and the writer's next write dies of
# SIGPIPE, which fails the pipeline at random (a CI start once failed so at `node_names | head -n 1`).
node_name() {  # node_name I: the name of emulated node I
  local host
  host=$(hostname -s)
  [[ $host == *[0-9] ]] && host+=n
  echo "$host$1"
}
node_names() {
  local i
  for ((i = 1; i <= NODES; i++)); do node_name "$i"; done
}
node_addr() { echo "$NODE_NET.$1"; }        # node_addr I
node_port() { echo $((NODE_PORT0 + $1)); }  # node_port I
node_list() { node_names | paste -sd, -; }
# node_states: "vm1 idle" per node; usable = idle/mixed/allocated/completing (a trailing *, not
# responding, drain or down is not).
node_states() { sinfo -h -N -n "$(node_list)" -o '%N %T' 2>/dev/null | sort -u; }
nodes_usable() {
  local states
  states=$(node_states)
  [[ $(grep -cE ' (idle|mixed|allocated|completing)$' <<<"$states" || true) -eq $NODES ]]
}
db_answers() { mariadb-admin --socket="$DIR/run/mysqld.sock" ping >/dev/null 2>&1; }
dbd_listening() { ! port_free 6819; }

install_packages() {
  dpkg -s "${PKGS[@]}" >/dev/null 2>&1 && return 0
  log "installing ${PKGS[*]} (log: $DIR/log/apt.log)"
  # Lists may be stale or absent on a fresh CI image, so always update first.
  { apt-get update -q &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PKGS[@]}"; } \
    >"$DIR/log/apt.log" 2>&1 || die "apt-get install failed" "$DIR/log/apt.log"
}

# install_if_changed TMP DEST: move TMP over DEST unless identical; true if DEST changed.
install_if_changed() {
  if [[ -f $2 ]] && cmp -s "$1" "$2"; then
    rm -f "$1"
    return 1
  fi
  mv -f "$1" "$2"
}

write_configs() {
  local node cpus ncpu mem names task_plugin acct_params
  node=$(hostname -s)
  # task/affinity binds a step's tasks to CPUs when asked (--cpu-bind, SLURM_CPU_BIND): as on real
  # clusters, a step that srun gives fewer CPUs than the job then sees fewer. TaskPluginParam=None below:
  # no step binding of its own unless asked. The batch script is bound to its job's CPUs anyway; each node
  # maps them onto other real cores (node_topology below), so two nodes' first jobs do not share a core.
  if [[ $MEMORY_LIMITS == cgroup ]]; then
    task_plugin=task/affinity,task/cgroup acct_params="# JobAcctGatherParams: none (the cgroup limits memory)"
  else
    task_plugin=task/affinity acct_params=JobAcctGatherParams=OverMemoryKill
  fi
  mapfile -t names < <(node_names)
  # slurmd -C reports this machine's real layout; declaring more than exists drains the node. Every
  # emulated node is this machine and declares all of its cores and memory: overcommitted N times,
  # so that a job with 2 tasks on one node still fits, as on the single-node cluster.
  cpus=$(slurmd -C | sed -n '1s/.*\(CPUs=.*ThreadsPerCore=[0-9]*\).*/\1/p') || die "slurmd -C failed"
  [[ -n $cpus ]] || die "slurmd -C printed no CPUs=...ThreadsPerCore= on its first line"
  ncpu=$(sed -n 's/^CPUs=\([0-9]*\).*/\1/p' <<<"$cpus")
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  mem=$((mem > 2048 ? mem - 1024 : mem))   # leave room for the daemons themselves

  [[ -s $DIR/etc/munge.key ]] || {
    dd if=/dev/urandom of="$DIR/etc/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/etc/munge.key"
  }
  # gres File= must be a character device (a count alone or a plain file drains the node);
  # c 1 3 is /dev/null's device number, so nothing can be harmed through it.
  local i n
  for n in "${names[@]}"; do
    for i in 0 1; do
      [[ -c $DIR/dev/$n-gpu$i ]] || mknod "$DIR/dev/$n-gpu$i" c 1 3 || die "mknod $DIR/dev/$n-gpu$i failed"
    done
  done

  cat >"$SLURM_CONF.new" <<EOF
# Written by scripts/local-slurm.sh; edits are overwritten on the next start.
ClusterName=hpcr-local
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (default 120 s); 5 is the minimum.
AuthInfo=socket=$DIR/run/munge.socket,cred_expire=10
SlurmctldPort=6817
StateSaveLocation=$DIR/state/ctld
# Several slurmd on one machine (slurmd -N NAME): %n is the node's name; each has its own Port below.
SlurmdSpoolDir=$DIR/state/d-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
MailProg=/bin/true
# Track processes by parentage (no systemd needed). Memory: see MEMORY_LIMITS below.
ProctrackType=proctrack/linuxproc
TaskPlugin=$task_plugin
TaskPluginParam=None
MpiDefault=none
SelectType=select/cons_tres
# Memory is a consumable resource, so a job's --mem is its limit (OverMemoryKill below); a job
# without --mem gets its CPUs' share of the node's memory (DefMemPerCPU), so CPUs, not memory,
# decide how many jobs share a node. CR_LLN: each job goes to the least loaded node, so a sweep's
# tasks spread over the nodes.
SelectTypeParameters=CR_Core_Memory,CR_LLN
DefMemPerCPU=$((mem / ncpu))
# Start jobs within about a second of submission or of a slot freeing up: the main
# scheduler runs on every event (submit, job end) without throttling, and its full pass
# runs every second instead of every 60 s, which is what starts a requeued job once its
# begin time has passed.
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1,sched_interval=1,sched_min_interval=0,batch_sched_delay=0
# sacct needs slurmdbd (22.05 has no file-based accounting). Connections to slurmdbd
# ignore AuthInfo; the munge socket must be given as AccountingStoragePass.
JobAcctGatherType=jobacct_gather/linux
# MEMORY_LIMITS=$MEMORY_LIMITS. cgroup: task/cgroup puts each step in a memory cgroup (v1, no
# systemd) limited to its job's memory; the kernel kills what exceeds it and sacct says
# OUT_OF_MEMORY. poll (no writable memory cgroup): the step is killed by polling, its processes' RSS
# sampled every second (OverMemoryKill); sacct then says FAILED (22.05 marks only cgroup OOM kills
# OUT_OF_MEMORY) and the job log "Exceeded job memory limit".
$acct_params
JobAcctGatherFrequency=task=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=6819
AccountingStoragePass=$DIR/run/munge.socket
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none
# Jobs need an association and QOS/association limits (MaxSubmitJobs...) are enforced at submit:
# the governor's tests set them with sacctmgr (ensure_accounts below creates what they need).
AccountingStorageEnforce=associations,limits,qos
# 1001 is common on real clusters; sweeps larger than this must be split into several arrays.
MaxArraySize=$MAX_ARRAY
MaxJobCount=$((MAX_ARRAY * 10 > 100000 ? MAX_ARRAY * 10 : 100000))
# Preemption/requeue tests: requeue allowed, finished jobs visible to squeue/scontrol for
# 5 minutes, and a short grace period between SIGTERM and SIGKILL.
JobRequeue=1
MinJobAge=300
KillWait=5
ReturnToService=2
# A node whose slurmd stops answering is DOWN (its jobs NODE_FAIL) after 30 s, not 300.
SlurmdTimeout=30
InactiveLimit=0
GresTypes=gpu
EOF
  : >"$DIR/etc/gres.conf.new"
  for ((i = 1; i <= NODES; i++)); do
    n=${names[i - 1]}
    echo "NodeName=$n NodeHostname=$n NodeAddr=$(node_addr "$i") Port=$(node_port "$i") $cpus RealMemory=$mem Gres=gpu:2 State=UNKNOWN" >>"$SLURM_CONF.new"
    echo "NodeName=$n Name=gpu File=$DIR/dev/$n-gpu[0-1]" >>"$DIR/etc/gres.conf.new"
  done
  # cgroup v1 (the v2 plugin of 22.05 wants systemd); memory only: no core or device binding.
  # Each slurmd makes its own hierarchy (memory/slurm_vm1, ...: a multiple-slurmd build).
  cat >"$DIR/etc/cgroup.conf.new" <<EOF
CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
ConstrainCores=no
ConstrainDevices=no
EOF
  cat >>"$SLURM_CONF.new" <<EOF
PartitionName=small Nodes=$(node_list) Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$(node_list) MaxTime=INFINITE State=UP
EOF

  cat >"$DIR/etc/slurmdbd.conf.new" <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/run/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
LogFile=$DIR/log/slurmdbd.log
PidFile=$DIR/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DIR/etc/slurmdbd.conf.new"   # slurmdbd refuses a world-readable config

  # A private server on its own port and socket, so a system MariaDB/MySQL is untouched.
  cat >"$DIR/etc/my.cnf.new" <<EOF
[mysqld]
datadir=$DIR/mysql
socket=$DIR/run/mysqld.sock
pid-file=$DIR/run/mariadbd.pid
log-error=$DIR/log/mariadbd.log
bind-address=127.0.0.1
port=$DB_PORT
user=root
skip-name-resolve
innodb_buffer_pool_size=256M
innodb_lock_wait_timeout=900
innodb_flush_log_at_trx_commit=2
EOF
  printf 'export SLURM_CONF=%q\n' "$SLURM_CONF" >"$DIR/env.sh"

  local changed=0 f before after
  before=$(restart_lines)
  for f in "$SLURM_CONF" "$DIR/etc/gres.conf" "$DIR/etc/cgroup.conf" "$DIR/etc/slurmdbd.conf" "$DIR/etc/my.cnf"; do
    install_if_changed "$f.new" "$f" && changed=1
  done
  after=$(restart_lines)
  ((changed)) && alive slurmctld || return 0
  # Daemons kept running from an earlier start read the old files. SLURM 22.05 cannot add or remove
  # nodes, or change SelectType*, with a reconfigure: then slurmctld and the slurmds are restarted
  # instead (start_daemons starts them again; the queue survives in StateSaveLocation).
  if [[ $before != "$after" ]]; then
    log "the nodes, SelectType, TaskPlugin or cgroup.conf changed (now $NODES node(s): $(node_list)); restarting slurmctld and the slurmds"
    stop_slurmds
    stop_daemon slurmctld
  else
    log "configuration changed; scontrol reconfigure"
    scontrol reconfigure || die "scontrol reconfigure failed"
  fi
}

# restart_lines: the lines of slurm.conf that `scontrol reconfigure` cannot apply.
restart_lines() {
  grep -E '^(NodeName|SelectType|GresTypes|TaskPlugin|ProctrackType|JobAcctGather)' "$SLURM_CONF" 2>/dev/null || true
  cat "$DIR/etc/cgroup.conf" 2>/dev/null || true
}

# memory_cgroup: whether a cgroup v1 memory controller is mounted and this root may make groups in it
# (gVisor and most VMs: yes; a Docker container with a read-only /sys/fs/cgroup: no).
memory_cgroup() {
  local probe=/sys/fs/cgroup/memory/hpcr-probe.$$
  [[ -f /sys/fs/cgroup/memory/memory.limit_in_bytes ]] && mkdir "$probe" 2>/dev/null && rmdir "$probe"
}

# ensure_hosts: one /etc/hosts line per node (127.0.1.I NAME), so a node's name resolves to its own
# address everywhere. The lines this script writes end with HOSTS_MARK and are replaced as a block;
# the file is rewritten in place (Docker bind-mounts it: it cannot be renamed over), only when the
# block changed. Without a writable /etc/hosts the cluster still works (NodeAddr is an address).
ensure_hosts() {
  local want have rest i names
  mapfile -t names < <(node_names)
  want=$(for ((i = 1; i <= NODES; i++)); do echo "$(node_addr "$i") ${names[i - 1]} $HOSTS_MARK"; done)
  have=$(grep -F -- "$HOSTS_MARK" /etc/hosts 2>/dev/null || true)
  [[ $have == "$want" ]] && return 0
  rest=$(grep -vF -- "$HOSTS_MARK" /etc/hosts 2>/dev/null || true)
  if { [[ -z $rest ]] || printf '%s\n' "$rest"; } >/etc/hosts 2>/dev/null && printf '%s\n' "$want" >>/etc/hosts; then
    log "/etc/hosts: $NODES node line(s) ($(node_addr 1) ${names[0]} ...)"
  else
    log "WARNING: cannot write /etc/hosts; the node names do not resolve (NodeAddr still works)"
  fi
}

# in_own_uts: whether a slurmd can get a host name of its own (unshare --uts needs CAP_SYS_ADMIN).
in_own_uts() { unshare --uts true 2>/dev/null; }

# Own cores. task/affinity binds every batch script to its job's CPUs on the node, whatever
# TaskPluginParam says, and slurmd turns the job's abstract CPU numbers (0, 1, ... in core order) into
# this machine's CPU ids through hwloc's topology. Every node is this machine, so every node's first 1-CPU
# job ran on CPU 0 while CPU 1 idled (a sweep two points at a time on 2 nodes: each 2.27x slower than alone).
# Node I therefore reads a topology of its own (HWLOC_XMLFILE): this machine's, with the PUs' CPU ids
# rotated by (I-1) cores, so node I's abstract CPU 0 is real core (I-1) mod cores (round robin when
# there are more nodes than cores) and its abstract CPU 1 the next core. slurmd and slurmstepd read
# it (slurmstepd inherits slurmd's environment; the job's tasks do not). hwloc keeps the objects in
# cpuset order, so the XML's cpusets stay real and only the os_index it reports moves; that is the
# CPU id slurmd binds to. The real topology is the one node 1's slurmd (not rotated) writes to its spool.

# node_topology I NAME: write $DIR/etc/hwloc-NAME.xml, this machine's topology with the PUs' os_index
# rotated by ((I-1) mod cores) cores, and set TOPO to its path; TOPO is empty when nothing moves.
node_topology() {
  local real out=$DIR/etc/hwloc-$2.xml
  TOPO=
  real=$DIR/state/d-$(node_name 1)/hwloc_topo_whole.xml
  wait_until 10 test -s "$real" || die "node 1's slurmd wrote no topology ($real)"
  awk -v node="$1" '
    { line[NR] = $0 }
    /<object type="Core"/ { cores++ }
    /<object type="PU"/ { match($0, /os_index="[0-9]+"/); id[pus++] = substr($0, RSTART + 10, RLENGTH - 11) }
    END {
      if (pus == 0) exit 1
      if (cores == 0) cores = pus
      shift = ((node - 1) % cores) * int(pus / cores)
      if (shift == 0) exit 3
      for (i = 1; i <= NR; i++) {
        if (line[i] ~ /<object type="PU"/) sub(/os_index="[0-9]+"/, "os_index=\"" id[(j++ + shift) % pus] "\"", line[i])
        print line[i]
      }
    }' "$real" >"$out.new" || {
    local rc=$?
    rm -f "$out.new" "$out"
    ((rc == 3)) && return 0
    die "cannot read the PUs of $real"
  }
  mv -f "$out.new" "$out"
  TOPO=$out
}

# slurmd_topology NAME: the HWLOC_XMLFILE that node NAME's running slurmd was started with (empty: none).
slurmd_topology() {
  tr '\0' '\n' <"/proc/$(cat "$DIR/run/slurmd-$1.pid")/environ" 2>/dev/null | sed -n 's/^HWLOC_XMLFILE=//p'
}

# start_slurmd NAME PORT TOPOLOGY: one node's slurmd, in a UTS namespace named after the node when
# possible, so the jobs on it see `hostname` = NAME (which resolves to the node's own address), reading
# TOPOLOGY (node_topology; empty: this machine's). A slurmd already running with another topology (one
# started by an older version of this script) is restarted; its jobs keep running.
start_slurmd() {
  local n=$1 port=$2 topo=$3 env=()
  if alive "slurmd-$n" slurmd; then
    [[ $(slurmd_topology "$n") == "$topo" ]] && return 0
    log "node $n: its slurmd reads another CPU topology than ${topo:-the real one}; restarting it"
    stop_daemon "slurmd-$n" slurmd
  fi
  port_free "$port" || die "port $port (node $n) is busy and not our slurmd (a system slurmd?)"
  mkdir -p "$DIR/state/d-$n"
  # HWLOC_THISSYSTEM: the XML describes this machine, so hwloc may bind with it.
  [[ -n $topo ]] && env=(HWLOC_XMLFILE="$topo" HWLOC_THISSYSTEM=1)
  if ((OWN_UTS)); then
    unshare --uts env "${env[@]}" sh -c 'hostname "$1" && exec slurmd -N "$1"' sh "$n" ||
      die "slurmd -N $n failed to start"
  else
    env "${env[@]}" slurmd -N "$n" || die "slurmd -N $n failed to start"
  fi
}

# stop_daemon NAME [WORD]: SIGTERM, 10 s, then SIGKILL; removes the pid file.
stop_daemon() {
  local p k
  alive "$1" "${2:-$1}" || return 0
  p=$(cat "$DIR/run/$1.pid")
  kill -TERM "$p" 2>/dev/null || true
  for ((k = 0; k < 100; k++)); do
    running "$p" || break
    sleep 0.1
  done
  if running "$p"; then
    log "$1 ($p) ignored SIGTERM for 10 s; sending SIGKILL"
    kill -KILL "$p" 2>/dev/null || true
  fi
  rm -f "$DIR/run/$1.pid"
  log "stopped $1 ($p)"
}

# stop_slurmds: every slurmd this script started, by pid file (the nodes of an earlier start with
# another LOCAL_SLURM_NODES too, and the single-node cluster's run/slurmd.pid).
stop_slurmds() {
  local f name
  for f in "$DIR"/run/slurmd.pid "$DIR"/run/slurmd-*.pid; do
    [[ -f $f ]] || continue
    name=${f##*/}
    stop_daemon "${name%.pid}" slurmd
  done
}

start_daemons() {
  if ! alive munged; then
    munged --key-file="$DIR/etc/munge.key" --socket="$DIR/run/munge.socket" \
      --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
      --seed-file="$DIR/state/munged.seed" || die "munged failed to start"
  fi

  if ! alive mariadbd; then
    port_free "$DB_PORT" || die "port $DB_PORT is busy and not ours (see: ss -ltnp 'sport = :$DB_PORT')"
    if [[ ! -d $DIR/mysql/mysql ]]; then
      mariadb-install-db --defaults-file="$DIR/etc/my.cnf" --auth-root-authentication-method=normal \
        --skip-test-db >"$DIR/log/mariadb-install.log" 2>&1 ||
        die "mariadb-install-db failed" "$DIR/log/mariadb-install.log"
    fi
    # mariadbd does not daemonize itself; setsid detaches it from this shell's session.
    setsid mariadbd --defaults-file="$DIR/etc/my.cnf" </dev/null >/dev/null 2>&1 &
  fi
  wait_until 30 db_answers || die "mariadbd did not answer within 30 s"
  mariadb --socket="$DIR/run/mysqld.sock" -u root -e \
    "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
     GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || die "cannot create the slurm db user"

  if ! alive slurmdbd; then
    port_free 6819 || die "port 6819 is busy and not our slurmdbd (a system slurmdbd?)"
    # slurmdbd finds slurmdbd.conf next to $SLURM_CONF.
    slurmdbd || die "slurmdbd failed to start"
  fi
  # slurmctld registers the cluster with slurmdbd at start-up, so it must be listening first.
  wait_until 30 dbd_listening || die "slurmdbd not listening on 6819 within 30 s"
  ensure_accounts

  if ! alive slurmctld; then
    port_free 6817 || die "port 6817 is busy and not our slurmctld (a system slurmctld?)"
    slurmctld || die "slurmctld failed to start"
  fi
  local i names
  mapfile -t names < <(node_names)
  # node 1 first: it reads this machine's topology and writes it for node_topology
  for ((i = 1; i <= NODES; i++)); do
    TOPO=
    ((i == 1)) || node_topology "$i" "${names[i - 1]}"
    start_slurmd "${names[i - 1]}" "$(node_port "$i")" "$TOPO"
  done
}

# ensure_accounts: the account, users and QOS the tests need; idempotent (runs on every start).
# With AccountingStorageEnforce=associations a user without an association cannot submit at all.
ensure_accounts() {
  local cluster=hpcr-local users=(root) u have
  [[ -n ${SUDO_USER:-} && $SUDO_USER != root ]] && id "$SUDO_USER" >/dev/null 2>&1 && users+=("$SUDO_USER")
  wait_until 30 dbd_answers || die "slurmdbd does not answer sacctmgr within 30 s"
  # On a cold start slurmctld has not registered the cluster yet; accounts need it to exist.
  have=$(sacctmgr -nP show cluster format=Cluster)
  grep -qx "$cluster" <<<"$have" || sacctmgr -i add cluster "$cluster" >/dev/null
  # Read each list whole before matching (grep -q on a pipe could SIGPIPE sacctmgr under pipefail).
  have=$(sacctmgr -nP show qos format=Name)
  grep -qx hpcr-limited <<<"$have" || sacctmgr -i add qos hpcr-limited >/dev/null
  have=$(sacctmgr -nP show account format=Account)
  grep -qx hpcr <<<"$have" ||
    sacctmgr -i add account hpcr cluster="$cluster" Description="hpc-runner tests" Organization=hpcr >/dev/null
  for u in "${users[@]}"; do
    have=$(sacctmgr -nP show assoc where user="$u" account=hpcr format=User)
    grep -qx "$u" <<<"$have" || sacctmgr -i add user "$u" account=hpcr cluster="$cluster" >/dev/null
    # "Nothing modified" exits 1 on a second start; that is fine.
    sacctmgr -i modify user where name="$u" cluster="$cluster" set DefaultAccount=hpcr >/dev/null || true
    sacctmgr -i modify user where name="$u" account=hpcr cluster="$cluster" \
      set qos=normal,hpcr-limited DefaultQOS=normal >/dev/null || true
  done
}
dbd_answers() { sacctmgr -nP show cluster format=Cluster >/dev/null 2>&1; }
# slurmctld caches associations and QOS. It loads them when it starts (so start creates them
# before starting slurmctld) and later hears of changes from slurmdbd only once it has
# registered: a QOS added in the second after slurmctld started was lost ("qos 5 not found").
accounts_known() {
  local out
  out=$(scontrol show assoc_mgr users=root accounts=hpcr flags=assoc,qos 2>/dev/null) &&
    grep -q "Account=hpcr UserName=root" <<<"$out" && grep -q "^QOS=hpcr-limited(" <<<"$out"
}

# The daemons inherit every open fd of this shell and keep it for life: run as
# `flock LOCK scripts/local-slurm.sh start`, munged/mariadbd/slurmdbd held LOCK until they
# stopped. Close everything above stderr (255 is bash's handle on this script) before starting them.
close_inherited_fds() {
  local fd
  for fd in /proc/$$/fd/*; do
    fd=${fd##*/}
    ((fd > 2 && fd < 255)) || continue
    eval "exec $fd>&-" 2>/dev/null || true
  done
}

cmd_start() {
  close_inherited_fds
  [[ $(id -u) == 0 ]] || usage_error "must run as root (slurmd, mknod, SlurmUser=root)"
  [[ $DIR != *[[:space:]]* ]] || usage_error "LOCAL_SLURM_DIR must not contain spaces: '$DIR'"
  if ! [[ $MAX_ARRAY =~ ^[0-9]+$ ]] || ((MAX_ARRAY < 1 || MAX_ARRAY > 4000001)); then
    usage_error "LOCAL_SLURM_MAX_ARRAY_SIZE must be an integer in 1..4000001, got '$MAX_ARRAY'"
  fi
  if ! [[ $NODES =~ ^[0-9]+$ ]] || ((NODES < 1 || NODES > 64)); then
    usage_error "LOCAL_SLURM_NODES must be an integer in 1..64, got '$NODES'"
  fi
  # one local cluster at a time: scripts/local-sge.sh's Grid Engine would share this machine's 2 CPUs
  if pgrep -x sge_qmaster >/dev/null || pgrep -x sge_execd >/dev/null; then
    usage_error "the local Grid Engine is running (scripts/local-sge.sh status): one local cluster at a time;" \
      "stop it first: scripts/local-sge.sh stop"
  fi
  local t0=$SECONDS
  mkdir -p "$DIR"/{etc,run,log,state/ctld,dev,jobs}
  chmod 700 "$DIR/etc"
  # Any unexpected failure from here on must still show the daemon logs.
  trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR
  install_packages
  OWN_UTS=0
  in_own_uts && OWN_UTS=1
  case $MEMORY in
    cgroup | poll) MEMORY_LIMITS=$MEMORY ;;
    auto) MEMORY_LIMITS=poll && memory_cgroup && MEMORY_LIMITS=cgroup ;;
    *) usage_error "LOCAL_SLURM_MEMORY must be auto, cgroup or poll, got '$MEMORY'" ;;
  esac
  ((OWN_UTS)) || log "unshare --uts is not allowed here: every node's jobs see this machine's host name"
  ensure_hosts
  write_configs
  local warm=0
  alive slurmctld && warm=1
  start_daemons
  wait_until 30 accounts_known ||
    die "slurmctld does not know account hpcr or QOS hpcr-limited (scontrol show assoc_mgr); restart it"
  wait_until "$TIMEOUT" nodes_usable ||
    die "not every node is usable after ${TIMEOUT}s: $(node_states | tr '\n' ' '); $(scontrol show node "$(node_list)" 2>&1 | grep -o 'Reason=.*' | sort -u | tr '\n' ' ' || true)"
  ((warm)) || cancel_recovered_jobs
  trap - ERR
  log "$NODES node(s) $(node_states | awk '{printf "%s%s=%s", (NR > 1 ? "," : ""), $1, $2}') after $((SECONDS - t0))s (MaxArraySize=$MAX_ARRAY); clients: . $DIR/env.sh"
}

# A cold start after the daemons died without `stop` (a killed session, a reboot) recovers the old
# queue from StateSaveLocation, and those jobs would run before anything new: CI once waited 7 min
# behind 72 jobs of an interrupted test run. Nobody is waiting for them; cancel them.
cancel_recovered_jobs() {
  local n
  n=$(squeue -h -o %A 2>/dev/null | wc -l) || return 0
  ((n > 0)) || return 0
  log "cancelling $n job(s) recovered from the last run (stopped without 'stop')"
  # One pass is not enough: an array task split off or requeued after the listing escapes it (CI once
  # waited 90 s on such a task, started 10 s after the cancel). Cancel by user until nothing is left.
  wait_until "$TIMEOUT" cancel_until_empty ||
    die "jobs recovered from the last run still queued after ${TIMEOUT}s: $(squeue -h -o '%i %T' | sed -n 1,5p | tr '\n' ' ')"
}

cancel_all_jobs() {
  scancel --user="$(id -un)" 2>/dev/null || true
  squeue -h -o %A 2>/dev/null | xargs -r scancel 2>/dev/null || true
}
# Polled every 0.2 s by wait_until: re-cancel at most once a second, so late arrivals are caught.
cancel_until_empty() {
  queue_empty && return 0
  ((SECONDS != ${_last_cancel:--1})) && { _last_cancel=$SECONDS; cancel_all_jobs; }
  return 1
}
queue_empty() { [[ -z $(squeue -h 2>/dev/null) ]]; }

cmd_stop() {
  local i
  # Cancel first, so no slurmstepd or job process outlives the daemons.
  if alive slurmctld; then
    wait_until 20 cancel_until_empty || true
  fi
  stop_slurmds
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    stop_daemon "${DAEMONS[i]}"
  done
  if [[ ${1:-} == --clean ]]; then
    # Only what start creates, never the directory's other contents.
    rm -rf "${DIR:?}"/{etc,run,log,state,mysql,dev,jobs} "$DIR/env.sh"
    rmdir "$DIR" 2>/dev/null || true
    log "state wiped ($DIR)"
  fi
}

cmd_status() {
  local d ok=0
  local names=() f
  for f in "$DIR"/run/slurmd-*.pid; do
    [[ -f $f ]] && f=${f##*/} && names+=("${f%.pid}")
  done
  for d in "${DAEMONS[@]}" "${names[@]}"; do
    if alive "$d" "${d%%-*}"; then
      printf '%-12s running (pid %s)\n' "$d" "$(cat "$DIR/run/$d.pid")"
    else
      printf '%-12s not running\n' "$d"
    fi
  done
  echo "SLURM_CONF=$SLURM_CONF"
  # scontrol ping answers at once; sinfo would retry a dead controller for about 9 s.
  if ! scontrol ping >/dev/null 2>&1; then
    echo "slurmctld: does not answer (scontrol ping)"
    ok=1
  elif ! timeout 20 sinfo; then
    echo "sinfo: does not answer"
    ok=1
  fi
  local err
  if err=$(timeout 20 sacct -n -X -S now-1hours -o JobID 2>&1 >/dev/null) && [[ -z $err ]]; then
    echo "sacct: answers"
  else
    echo "sacct: does not answer: ${err:-timed out}"
    ok=1
  fi
  return "$ok"
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop "${2:-}" ;;
  status) cmd_status ;;
  env) printf 'export SLURM_CONF=%q\n' "$SLURM_CONF" ;;
  -h | --help | help) sed -n '2,/^set -E/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *)
    echo "usage: $0 start | stop [--clean] | status | env" >&2
    exit 2
    ;;
esac
