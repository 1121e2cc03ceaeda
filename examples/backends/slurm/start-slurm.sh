#!/bin/sh
# A single-node Slurm for trying the Slurm backend and for CI (tests/slurm.rs): munged, slurmctld
# and slurmd started as root without systemd, state, logs and config under $SLURM_DIR. About 2 s.
#
#   apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
#   SLURM_CPUS=16 examples/backends/slurm/start-slurm.sh   # then: export SLURM_CONF=$SLURM_DIR/slurm.conf
#   examples/backends/slurm/stop-slurm.sh
#
# What each of these settings avoids (each one cost a failed start once):
# - munged refuses a socket directory that is group- or other-writable, and a key readable by
#   others: the directory is 0755 and the key 0400.
# - slurmd only serves the node whose NodeName is its short host name (`hostname -s`).
# - The node's size is what `slurmd -C` reports; a size larger than the machine drains the node,
#   unless SlurmdParameters=config_overrides (used for SLURM_CPUS, to run more jobs at once).
# - proctrack/pgid needs no cgroup setup (inside containers there often is none); jobs are
#   tracked by process group, and scancel signals that group.
# - batch_sched_delay=0 starts a job as soon as it is submitted, not at the next scheduling pass.
set -eu
D=${SLURM_DIR:-/tmp/weir-slurm}
HOST=$(hostname -s)
export SLURM_CONF="$D/slurm.conf"

# Already up (started earlier with the same directory): nothing to do.
if [ -f "$D/run/slurmctld.bgpid" ] && kill -0 "$(cat "$D/run/slurmctld.bgpid")" 2>/dev/null \
   && [ "$(sinfo -h -n "$HOST" -o %t 2>/dev/null)" = idle ]; then
  echo "slurm already up: export SLURM_CONF=$SLURM_CONF"
  exit 0
fi

mkdir -p "$D/munge" "$D/state" "$D/spool/slurmd-$HOST" "$D/log" "$D/run"
chmod 755 "$D/munge"
[ -f "$D/munge/munge.key" ] || dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$D/munge/munge.key"
munged --key-file="$D/munge/munge.key" --socket="$D/munge/munge.socket" \
  --pid-file="$D/run/munged.pid" --log-file="$D/log/munged.log" --seed-file="$D/munge/munged.seed" \
  </dev/null >/dev/null 2>&1

# `slurmd -C` prints "NodeName=HOST CPUs=.. Boards=.. ... RealMemory=.."; keep all but the name.
NODE=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
OVERRIDES=
if [ -n "${SLURM_CPUS:-}" ]; then
  NODE="CPUs=$SLURM_CPUS $(echo "$NODE" | grep -o 'RealMemory=[0-9]*')"
  OVERRIDES=SlurmdParameters=config_overrides
fi

cat >"$SLURM_CONF" <<CONF
ClusterName=weir
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$D/munge/munge.socket
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/slurmd-%n
SlurmctldPidFile=$D/run/slurmctld.pid
SlurmdPidFile=$D/run/slurmd.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=batch_sched_delay=0
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
ReturnToService=2
KillWait=5
MinJobAge=300
MailProg=/bin/true
$OVERRIDES
NodeName=$HOST NodeAddr=127.0.0.1 $NODE State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
# Clients that are not given SLURM_CONF read /etc/slurm/slurm.conf (an operator's own file is
# left alone; a link from an earlier start is replaced).
if [ -d /etc/slurm ] && { [ -L /etc/slurm/slurm.conf ] || [ ! -e /etc/slurm/slurm.conf ]; }; then
  ln -sfn "$SLURM_CONF" /etc/slurm/slurm.conf
fi

# The daemons hold none of this script's descriptors: a caller reading its output sees the end.
slurmctld -D -i </dev/null >"$D/log/slurmctld.out" 2>&1 &
echo $! >"$D/run/slurmctld.bgpid"
slurmd -D </dev/null >"$D/log/slurmd.out" 2>&1 &
echo $! >"$D/run/slurmd.bgpid"

i=0
until [ "$(sinfo -h -n "$HOST" -o %t 2>/dev/null)" = idle ]; do
  i=$((i + 1))
  for daemon in slurmctld slurmd; do
    if ! kill -0 "$(cat "$D/run/$daemon.bgpid")" 2>/dev/null; then
      echo "$daemon exited at start:" >&2
      tail -n 5 "$D/log/$daemon.out" >&2
      exit 1
    fi
  done
  if [ $i -gt 120 ]; then
    echo "the node did not come up within 60 s; see $D/log" >&2
    sinfo -R >&2 || true
    exit 1
  fi
  sleep 0.5
done
echo "slurm up: export SLURM_CONF=$SLURM_CONF"
