#!/usr/bin/env bash
# Build the weir Python package into a virtualenv and run its tests against real processes.
# The scheduler and worker executables come from $CARGO_TARGET_DIR/debug (build them first:
# `cargo build --bins`). Needs Python 3.9+ with venv and pip (PyPI for maturin, cloudpickle,
# pytest). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="${CARGO_TARGET_DIR:-$here/../target}"
venv="${WEIR_VENV:-$HOME/.cache/weir/venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.5,<2' 'cloudpickle>=2' 'pytest>=7'
# maturin builds with cargo into the same target directory as the rest of weir.
(cd "$here" && CARGO_TARGET_DIR="$target" VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
  maturin develop -q)
cd "$here"
PATH="$target/debug:$venv/bin:$PATH" "$venv/bin/python" -m pytest -q tests "$@"
