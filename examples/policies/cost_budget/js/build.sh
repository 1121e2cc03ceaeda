#!/usr/bin/env bash
# Build the JavaScript cost_budget policy: examples/policies/cost_budget/js/build.sh [OUT]
# (default: ./cost_budget.wasm). Needs Node.js and npm (Debian: apt-get install nodejs npm);
# componentize-qjs comes from npm, pinned in package-lock.json.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/cost_budget.wasm}")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "js: toolchain missing: node and npm (apt-get install nodejs npm)" >&2
  exit 3
fi
cd "$here"
if [ ! -x node_modules/.bin/componentize-qjs ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
# --sync: the plain (not async) component ABI weir's host calls; --stub-wasi: no WASI imports
# (weir grants none), a WASI call would trap instead.
node_modules/.bin/componentize-qjs --wit ../../../../wit/0.2.0 --world policy --js cost_budget.js \
  --sync --stub-wasi -o "$out" >/dev/null
echo "js: built $out ($(stat -c %s "$out") bytes)"
