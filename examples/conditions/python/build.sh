#!/usr/bin/env bash
# Build the Python condition: examples/conditions/python/build.sh [OUT]   (default: ./cpu_ge.wasm)
# Needs componentize-py: pip install componentize-py==0.25.1
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$(realpath -m "${1:-$here/cpu_ge.wasm}")"
if ! command -v componentize-py >/dev/null; then
  echo "python: toolchain missing: componentize-py (pip install componentize-py==0.25.1)" >&2
  exit 3
fi
# The CPython interpreter and app.py, pre-initialised into one component. --stub-wasi: the
# component imports no WASI (weir grants none); a WASI call would trap instead.
cd "$here"
export PYTHONDONTWRITEBYTECODE=1
componentize-py -d ../../../wit -w environment componentize app -o "$out" --stub-wasi >/dev/null
echo "python: built $out ($(stat -c %s "$out") bytes)"
