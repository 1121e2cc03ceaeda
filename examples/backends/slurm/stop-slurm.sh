#!/bin/sh
# Stop what start-slurm.sh started, by the process ids it kept; SLURM_WIPE=1 also removes
# $SLURM_DIR (state, logs, config).
D=${SLURM_DIR:-/tmp/weir-slurm}
export SLURM_CONF="$D/slurm.conf"
# Jobs first, while slurmd is there to kill their processes.
scancel --user="$(id -un)" 2>/dev/null && sleep 1
for f in slurmd.bgpid slurmctld.bgpid munged.pid; do
  pid=$(cat "$D/run/$f" 2>/dev/null) || continue
  if kill "$pid" 2>/dev/null; then
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -f "$D/run/$f"
done
if [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" = "$SLURM_CONF" ]; then
  rm -f /etc/slurm/slurm.conf
fi
if [ "${SLURM_WIPE:-0}" = 1 ]; then rm -rf "$D"; fi
true
