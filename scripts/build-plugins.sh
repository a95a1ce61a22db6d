#!/usr/bin/env bash
# Builds every example module under examples/plugins/*/ that has a main.go
# into OUT/NAME.wasm (GOOS=wasip1 c-shared Go guest) and copies its manifest
# NAME/NAME.hcl to OUT/NAME.hcl. A module folder may also hold
# variants/VARIANT.hcl: each becomes OUT/VARIANT.wasm (the same bytes, so the
# host's compilation cache compiles them once) + OUT/VARIANT.hcl, which is how
# one faulty module serves several fault modes chosen by config.
#
# Usage: scripts/build-plugins.sh [OUT [SRC]]   (run from the repository root)
# SRC defaults to examples/plugins (the working examples, what `make run`
# loads); `make test-modules` passes plugins/pluginstest/modules, the
# deliberately faulty modules only tests load.
# Skips a module whose .wasm is newer than every .go file of the module, the
# abi packages, go.mod and go.sum; FORCE=1 rebuilds everything.
#
# Folders with assembly/index.ts instead are AssemblyScript guests
# (abi/guest-as): built with the SDK's pinned compiler and options
# (abi/guest-as/asconfig.json) into OUT/NAME.wasm, after `npm ci` in
# abi/guest-as when its node_modules is missing or older than its
# package-lock.json. They are skipped when the .wasm is newer than every
# .ts file of the module and the SDK, asconfig.json and package-lock.json.
# npm or compiler failures stop the script (set -e).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-examples/plugins/build}
src=${2:-examples/plugins}
mkdir -p "$out"
export GOOS=wasip1 GOARCH=wasm
# elapsed START: seconds since START (a date +%s.%N stamp), without bc.
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
# copy_manifest DIR NAME: DIR/NAME.hcl to OUT/NAME.hcl, or a warning.
copy_manifest() {
  if [ -f "$1/$2.hcl" ]; then
    cp "$1/$2.hcl" "$out/$2.hcl"
  else
    echo "warning: $1 has no manifest $2.hcl" >&2
  fi
}
total_start=$(date +%s.%N)
built=0
for dir in "$src"/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  [ "$name" = build ] && continue
  [ -f "$dir/main.go" ] || continue
  wasm="$out/$name.wasm"
  newer=$(find "$dir" abi go.mod go.sum -name '*.go' -newer "$wasm" -o -name 'go.*' -newer "$wasm" 2>/dev/null | head -1 || true)
  if [ "${FORCE:-}" = 1 ] || [ ! -f "$wasm" ] || [ -n "$newer" ]; then
    start=$(date +%s.%N)
    go build -buildmode=c-shared -trimpath -o "$wasm" "./$dir"
    built=$((built + 1))
    printf '%-20s %9d bytes  %5ss\n' "$name.wasm" "$(wc -c <"$wasm")" "$(elapsed "$start")"
  fi
  copy_manifest "$dir" "$name"
  for v in "$dir"/variants/*.hcl; do
    [ -f "$v" ] || continue
    vname=$(basename "$v" .hcl)
    cp "$wasm" "$out/$vname.wasm"
    cp "$v" "$out/$vname.hcl"
  done
done
sdk=abi/guest-as
asc_ready=
for dir in "$src"/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  [ -f "$dir/assembly/index.ts" ] || continue
  wasm="$out/$name.wasm"
  newer=$(find "$dir/assembly" "$sdk/assembly" "$sdk/asconfig.json" "$sdk/package-lock.json" -newer "$wasm" \( -name '*.ts' -o -name '*.json' \) 2>/dev/null | head -1 || true)
  if [ "${FORCE:-}" = 1 ] || [ ! -f "$wasm" ] || [ -n "$newer" ]; then
    if [ -z "$asc_ready" ]; then
      if [ ! -d "$sdk/node_modules" ] || [ "$sdk/package-lock.json" -nt "$sdk/node_modules" ]; then
        command -v npm >/dev/null || { echo "build-plugins: npm not found (needed for $dir)" >&2; exit 1; }
        echo "npm ci in $sdk" >&2
        (cd "$sdk" && npm ci --no-audit --no-fund >&2)
        touch "$sdk/node_modules"
      fi
      asc_ready=1
    fi
    start=$(date +%s.%N)
    # GOOS and GOARCH above are for go build only.
    env -u GOOS -u GOARCH "$sdk/node_modules/.bin/asc" "$dir/assembly/index.ts" --config "$sdk/asconfig.json" -o "$wasm.tmp"
    mv "$wasm.tmp" "$wasm"
    built=$((built + 1))
    printf '%-20s %9d bytes  %5ss\n' "$name.wasm" "$(wc -c <"$wasm")" "$(elapsed "$start")"
  fi
  copy_manifest "$dir" "$name"
done
printf 'modules in %s: %d (%d built, %ss)\n' "$out" "$(ls "$out" | grep -c '\.wasm$')" "$built" "$(elapsed "$total_start")"
