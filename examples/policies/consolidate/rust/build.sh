#!/usr/bin/env bash
# Build the Rust consolidate policy: examples/policies/consolidate/rust/build.sh [OUT]
# (default: ./consolidate.wasm). Needs the wasm32-wasip2 target: rustup target add wasm32-wasip2
exec "$(dirname "${BASH_SOURCE[0]}")/../../build-rust.sh" consolidate "$@"
