#!/usr/bin/env bash
# Build every condition example and measure it: build time, component size, first load (compile,
# empty cache) and second load (from the disk cache) in a worker, via `worker --check`.
# Then the whole round trip of `weir env register --wait` for each, against a scheduler and one
# worker on loopback with empty compile caches: the first registration, and a second one (another
# name, same component). Prints Markdown tables (docs/conditions.md, BENCHMARKS.md).
#   examples/conditions/measure.sh [BIN_DIR]   (default: target/release)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="$(realpath "${1:-$here/../../target/release}")"
worker="$bin/worker"
tmp="$(mktemp -d)"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT

load_ms() { # component cache-dir -> the "loaded in N ms" figure of one `worker --check`
  WEIR_CACHE_DIR="$2" "$worker" --check --cpus 8 --env-plugin "cpu_ge=$1,min=4" \
    | sed -n 's/^  loaded in \([0-9.]*\) ms.*/\1/p'
}

echo "| language | size | build | first load (compile) | second load (disk cache) |"
echo "|---|---:|---:|---:|---:|"
for language in rust c python js wat; do
  out="$tmp/$language.wasm"
  "$here/$language/build.sh" "$out" >/dev/null  # once untimed: fetches packages, warms caches
  [ "$language" = rust ] && touch "$here/rust/src/lib.rs"  # so cargo rebuilds the crate
  start=$(date +%s.%N)
  "$here/$language/build.sh" "$out" >/dev/null
  build=$(awk -v start="$start" -v end="$(date +%s.%N)" 'BEGIN { print end - start }')
  cache="$tmp/cache-$language"
  first=$(load_ms "$out" "$cache")
  second=$(load_ms "$out" "$cache")
  printf '| %s | %s KB | %.1f s | %s ms | %s ms |\n' "$language" \
    "$(( $(stat -c %s "$out") / 1024 ))" "$build" "$first" "$second"
done

now() { date +%s.%N; }
since() { awk -v start="$1" -v end="$(now)" 'BEGIN { printf "%.0f", (end - start) * 1000 }'; }

# A scheduler and one worker, each with its own empty compile cache (as on two machines).
WEIR_CACHE_DIR="$tmp/scheduler-cache" "$bin/scheduler" --listen quic://127.0.0.1:0 \
  --access-file "$tmp/access.json" > "$tmp/scheduler.out" 2>/dev/null &
pids+=($!)
until grep -q "listening" "$tmp/scheduler.out" 2>/dev/null; do sleep 0.05; done
WEIR_CACHE_DIR="$tmp/worker-cache" "$worker" --access-file "$tmp/access.json" --cpus 8 2>/dev/null &
pids+=($!)
weir=("$bin/weir" --access-file "$tmp/access.json")
until [ "$("${weir[@]}" --output json status | grep -o '"slots"' | wc -l)" -ge 1 ]; do sleep 0.05; done

echo
echo "| language | first registration | second registration |"
echo "|---|---:|---:|"
for language in rust c python js wat; do
  out="$tmp/$language.wasm"
  start=$(now)
  "${weir[@]}" --output quiet env register "first-$language" "$out" --config min=4 --wait
  first=$(since "$start")
  start=$(now)
  "${weir[@]}" --output quiet env register "second-$language" "$out" --config min=2 --wait
  second=$(since "$start")
  printf '| %s | %s ms | %s ms |\n' "$language" "$first" "$second"
done
