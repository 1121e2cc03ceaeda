#!/usr/bin/env bash
# Build the Rust cost_budget policy: examples/policies/cost_budget/rust/build.sh [OUT]
# (default: ./cost_budget.wasm). Needs the wasm32-wasip2 target: rustup target add wasm32-wasip2
exec "$(dirname "${BASH_SOURCE[0]}")/../../build-rust.sh" cost_budget "$@"
