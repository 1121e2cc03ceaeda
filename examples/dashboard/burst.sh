#!/usr/bin/env bash
# The dashboard screenshot in docs/operators.md: two tiers (onprem, 8 tasks; cloud, 16), three bursts of 80
# two-second tasks ten seconds apart, the environment `big` registered. Prints the dashboard's
# URL; open it in a browser. Stop with Ctrl-C (everything started here stops with it).
# Needs `cargo build --bins` first.
set -euo pipefail
bin="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/target/debug"
bin="${WEIR_BIN:-$bin}"
dir="$(mktemp -d)"
cd "$dir"
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
"$bin/scheduler" --listen quic://127.0.0.1:0 --access-file access.json --dashboard 127.0.0.1:0 \
  --policy waterfall_v2 --policy-content $'1, fast\n2, slow' --scale-down-delay 5 > scheduler.log 2>&1 &
until grep -q "dashboard on" scheduler.log 2>/dev/null; do sleep 0.1; done
grep "dashboard on" scheduler.log
"$bin/worker-manager" --access-file access.json --id onprem --worker-type fast \
  --max-task-concurrency 8 > onprem.log 2>&1 &
"$bin/worker-manager" --access-file access.json --id cloud --worker-type slow \
  --max-task-concurrency 16 > cloud.log 2>&1 &
sleep 3
"$bin/weir" --access-file access.json env register big mem_gt --config threshold=1 > /dev/null
for _ in 1 2 3; do
  "$bin/weir" --access-file access.json submit --count 80 -- sleep 2 > /dev/null
  sleep 10
done
wait
