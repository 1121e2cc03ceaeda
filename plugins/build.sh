#!/usr/bin/env bash
# Rebuild every plugin component from source and copy it where the host expects it:
#   bundled plugins -> plugins/<name>.wasm       (waterfall_v1, waterfall_v2, mem_gt)
#   test fixtures   -> plugins/fixtures/<name>.wasm
#   (plugins/fixtures/frozen/*.wasm are never rebuilt: their hashes are checked)
# The outputs are committed. `plugins/build.sh --check` rebuilds and fails if any committed
# component differs from what the source builds (CI runs this).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

bundled=(waterfall_v1 waterfall_v2 mem_gt square)
fixtures=(hostile_policy hostile_condition hostile_task empty_policy)

check=false
case "${1:-}" in
  --check) check=true ;;
  "") ;;
  *) echo "usage: plugins/build.sh [--check]" >&2; exit 2 ;;
esac

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  echo "plugins/build.sh: the wasm32-wasip2 target is missing; run: rustup target add wasm32-wasip2" >&2
  exit 1
fi

# Same bytes on every machine: no absolute paths of this checkout or of the cargo home leak
# into the components.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
export RUSTFLAGS="--remap-path-prefix=$here=/weir/plugins --remap-path-prefix=$cargo_home=/cargo"
export CARGO_TARGET_DIR="${WEIR_PLUGINS_TARGET_DIR:-$here/target}"
cargo build --locked --quiet --release --target wasm32-wasip2 --workspace

out="$CARGO_TARGET_DIR/wasm32-wasip2/release"
status=0
place() { # name destination
  if $check; then
    if ! cmp -s "$out/$1.wasm" "$2"; then
      echo "plugins/build.sh: $2 is not what plugins/ source builds; run plugins/build.sh and commit" >&2
      status=1
    fi
  else
    cp "$out/$1.wasm" "$2"
  fi
}
for name in "${bundled[@]}"; do place "$name" "$here/$name.wasm"; done
# Frozen components (fixtures/frozen/README.md) are never rebuilt: only their bytes are checked.
if ! (cd "$here/fixtures/frozen" && sha256sum --check --quiet SHA256SUMS); then
  echo "plugins/build.sh: a frozen component in plugins/fixtures/frozen changed; restore it from git" >&2
  status=1
fi
# Published WIT versions are never edited either.
if ! (cd "$here/../wit" && sha256sum --check --quiet SHA256SUMS); then
  echo "plugins/build.sh: a published WIT file in wit/ changed (wit/SHA256SUMS); a new version goes beside it" >&2
  status=1
fi
mkdir -p "$here/fixtures"
for name in "${fixtures[@]}"; do place "$name" "$here/fixtures/$name.wasm"; done
if [ $status -eq 0 ]; then
  if $check; then echo "plugins: all components match their source"; else echo "plugins: built ${bundled[*]} ${fixtures[*]}"; fi
fi
exit $status
