#!/usr/bin/env bash
# Build every condition example and measure it: build time, component size, first load (compile,
# empty cache) and second load (from the disk cache) in a worker, via `worker --check`.
# Prints a Markdown table (README.md "Write a condition in your language", BENCHMARKS.md).
#   examples/conditions/measure.sh [WORKER]   (default: target/release/worker)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
worker="$(realpath "${1:-$here/../../target/release/worker}")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

load_ms() { # component cache-dir -> the "loaded in N ms" figure of one `worker --check`
  WEIR_CACHE_DIR="$2" "$worker" --check --cpus 8 --env-plugin "cpu_ge=$1,min=4" \
    | sed -n 's/^  loaded in \([0-9.]*\) ms.*/\1/p'
}

echo "| language | size | build | first load (compile) | second load (disk cache) |"
echo "|---|---:|---:|---:|---:|"
for language in rust c python js wat; do
  out="$tmp/$language.wasm"
  "$here/$language/build.sh" "$out" >/dev/null  # once untimed: fetches packages, warms caches
  start=$(date +%s.%N)
  "$here/$language/build.sh" "$out" >/dev/null
  build=$(awk -v start="$start" -v end="$(date +%s.%N)" 'BEGIN { print end - start }')
  cache="$tmp/cache-$language"
  first=$(load_ms "$out" "$cache")
  second=$(load_ms "$out" "$cache")
  printf '| %s | %s KB | %.1f s | %s ms | %s ms |\n' "$language" \
    "$(( $(stat -c %s "$out") / 1024 ))" "$build" "$first" "$second"
done
