#!/bin/sh
# Measure the Slurm backend's latency from a burst to registered workers: ROUNDS times, start a
# scheduler and a `--backend slurm` manager, submit one task into the empty cluster and wait for
# it; the manager logs how long each job took from `sbatch` to its first registered worker.
#
#   examples/backends/slurm/measure-latency.sh target/release 5
#
# Needs a running Slurm (start-slurm.sh) and SLURM_CONF; prints one line per round.
set -eu
BIN=$(cd "${1:?usage: measure-latency.sh BIN_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-5}
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$DIR"' EXIT
export WEIR_ACCESS_FILE="$DIR/access.json"
i=0
while [ $i -lt "$ROUNDS" ]; do
  i=$((i + 1))
  rm -f "$WEIR_ACCESS_FILE"
  "$BIN/scheduler" --listen quic://127.0.0.1:0 --policy waterfall_v2 --policy-content '1, hpc' \
    --scaling-interval 0.2 >"$DIR/scheduler.out" 2>&1 &
  scheduler=$!
  until [ -s "$WEIR_ACCESS_FILE" ]; do sleep 0.05; done
  RUST_LOG=weir=info "$BIN/worker-manager" --backend slurm --id "lat$$x$i" --worker-type hpc \
    --max-task-concurrency 1 --heartbeat-interval 0.2 >"$DIR/manager.log" 2>&1 &
  manager=$!
  start=$(date +%s.%N)
  "$BIN/weir" submit --wait -- true >/dev/null
  end=$(date +%s.%N)
  kill "$manager"; wait "$manager" 2>/dev/null || true
  kill "$scheduler"; wait "$scheduler" 2>/dev/null || true
  registered=$(grep -o 'after=[0-9.]*[a-zµ]*' "$DIR/manager.log" | head -1 | cut -d= -f2)
  echo "round $i: sbatch -> registered ${registered:-?}; submit -> done $(awk "BEGIN { printf \"%.2f\", $end - $start }") s"
done
