#!/usr/bin/env bash
# Build the Python cost_budget policy: examples/policies/cost_budget/python/build.sh [OUT]
# (default: ./cost_budget.wasm). Needs componentize-py: pip install componentize-py==0.25.1
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/cost_budget.wasm}")"
if ! command -v componentize-py >/dev/null; then
  echo "python: toolchain missing: componentize-py (pip install componentize-py==0.25.1)" >&2
  exit 3
fi
# The CPython interpreter, app.py and scaling.py, pre-initialised into one component.
# --stub-wasi: the component imports no WASI (weir grants none); a WASI call would trap instead.
cd "$here"
export PYTHONDONTWRITEBYTECODE=1
componentize-py -d ../../../../wit/0.2.0 -w policy componentize app -o "$out" --stub-wasi >/dev/null
echo "python: built $out ($(stat -c %s "$out") bytes)"
