#!/usr/bin/env bash
# Build the consolidate policy: examples/policies/consolidate/rust/build.sh [OUT]
# (default: ./consolidate.wasm). Needs the wasm32-wasip2 target: rustup target add wasm32-wasip2
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/consolidate.wasm}")"
if ! command -v cargo >/dev/null || ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "rust: toolchain missing: the wasm32-wasip2 target (rustup target add wasm32-wasip2)" >&2
  exit 3
fi
# Its own target directory: a CARGO_TARGET_DIR inherited from the caller is for weir itself.
export CARGO_TARGET_DIR="${WEIR_EXAMPLES_TARGET_DIR:-$here/target}"
cargo build --manifest-path "$here/Cargo.toml" --locked --quiet --release --target wasm32-wasip2
cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/consolidate.wasm" "$out"
echo "rust: built $out ($(stat -c %s "$out") bytes)"
