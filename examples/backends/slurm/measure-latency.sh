#!/bin/sh
# Measure the Slurm backend's latency from a burst to registered workers: ROUNDS times, start a
# scheduler and a `--backend slurm` manager, submit one task into the empty cluster and wait for
# it. From their JSON logs (one clock): when the manager ran `sbatch` ("unit submitted") and when
# the scheduler registered the job's worker ("worker joined").
#
#   examples/backends/slurm/measure-latency.sh target/release 5
#
# Needs a running Slurm (start-slurm.sh) and SLURM_CONF; prints one line per round.
set -eu
BIN=$(cd "${1:?usage: measure-latency.sh BIN_DIR [ROUNDS]}" && pwd)
ROUNDS=${2:-5}
DIR=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$DIR"' EXIT
export WEIR_ACCESS_FILE="$DIR/access.json"
i=0
while [ $i -lt "$ROUNDS" ]; do
  i=$((i + 1))
  rm -f "$WEIR_ACCESS_FILE"
  RUST_LOG=weir=info "$BIN/scheduler" --listen quic://127.0.0.1:0 --policy waterfall_v2 \
    --policy-content '1, hpc' --scaling-interval 0.2 --log-format json >"$DIR/scheduler.log" 2>&1 &
  scheduler=$!
  until [ -s "$WEIR_ACCESS_FILE" ]; do sleep 0.05; done
  RUST_LOG=weir=info "$BIN/worker-manager" --backend slurm --id "lat$$x$i" --worker-type hpc \
    --max-task-concurrency 1 --heartbeat-interval 0.2 --log-format json >"$DIR/manager.log" 2>&1 &
  manager=$!
  start=$(date +%s.%N)
  "$BIN/weir" submit --wait -- true >/dev/null 2>&1
  end=$(date +%s.%N)
  kill "$manager"; wait "$manager" 2>/dev/null || true
  kill "$scheduler"; wait "$scheduler" 2>/dev/null || true
  # The next round starts on an idle node: the job cancelled at the manager's stop is gone.
  while [ -n "$(squeue -h --name="weir-lat$$x$i")" ]; do sleep 0.1; done
  registered=$(python3 - "$DIR/manager.log" "$DIR/scheduler.log" <<'PY'
import json, sys
from datetime import datetime
def events(path, message):
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("fields", {}).get("message") == message:
            yield datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")), e["fields"]
submitted = next(events(sys.argv[1], "unit submitted"), None)
joined = next(events(sys.argv[2], "worker joined"), None)
print("?" if not (submitted and joined) else f"{(joined[0] - submitted[0]).total_seconds():.3f} s")
PY
)
  echo "round $i: sbatch -> registered $registered; submit -> done $(awk "BEGIN { printf \"%.3f\", $end - $start }") s"
done
