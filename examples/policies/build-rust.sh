#!/usr/bin/env bash
# Build a Rust example policy (a crate on weir's policy SDK in examples/policies/NAME/rust):
#   examples/policies/build-rust.sh NAME [OUT]     (default OUT: that directory's NAME.wasm)
# Each example's rust/build.sh calls this. Needs the wasm32-wasip2 target: rustup target add wasm32-wasip2
set -euo pipefail
name="${1:?usage: build-rust.sh NAME [OUT]}"
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/$name/rust" && pwd)"
out="$(realpath -m "${2:-$dir/$name.wasm}")"
if ! command -v cargo >/dev/null || ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "rust: toolchain missing: the wasm32-wasip2 target (rustup target add wasm32-wasip2)" >&2
  exit 3
fi
# Its own target directory: a CARGO_TARGET_DIR inherited from the caller is for weir itself.
export CARGO_TARGET_DIR="${WEIR_EXAMPLES_TARGET_DIR:-$dir/target}"
cargo build --manifest-path "$dir/Cargo.toml" --locked --quiet --release --target wasm32-wasip2
cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/$name.wasm" "$out"
echo "rust: built $out ($(stat -c %s "$out") bytes)"
