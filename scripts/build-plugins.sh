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
#
# KINDS="go as" (the default) says which guests to build: `make run` builds
# the Go ones first and the AssemblyScript ones (npm ci and a compile of
# about 25 s each) behind the running agent. JOBS (default: the CPU count)
# modules build at once: one go build or asc links or compiles mostly on
# one core. A module lands as its manifest, then its .wasm, each renamed
# into place, so an agent watching OUT never loads half a module.
# A failed build (or npm) fails the script, after the others finish.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-examples/plugins/build}
src=${2:-examples/plugins}
kinds=${KINDS:-go as}
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
mkdir -p "$out"
# elapsed START: seconds since START (a date +%s.%N stamp), without bc.
elapsed() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
# place_manifest DIR NAME: DIR/NAME.hcl to OUT/NAME.hcl by rename, or a warning.
place_manifest() {
  if [ -f "$1/$2.hcl" ]; then
    # Unchanged: not rewritten (a watching agent would reload for nothing).
    cmp -s "$1/$2.hcl" "$out/$2.hcl" && return 0
    cp "$1/$2.hcl" "$out/.$2.hcl.tmp"
    mv "$out/.$2.hcl.tmp" "$out/$2.hcl"
  else
    echo "warning: $1 has no manifest $2.hcl" >&2
  fi
}
# land DIR NAME TMP: the manifest, then the built TMP as OUT/NAME.wasm.
land() {
  place_manifest "$1" "$2"
  mv "$3" "$out/$2.wasm"
}
pids=()
# run_job CMD...: runs a build in the background, at most $jobs at once.
run_job() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  "$@" &
  pids+=($!)
}
# wait_jobs: waits for every build; fails if any failed.
wait_jobs() {
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  pids=()
  return "$failed"
}
total_start=$(date +%s.%N)
built=0

build_go() { # DIR NAME
  local start wasm tmp
  start=$(date +%s.%N)
  wasm="$out/$2.wasm"
  tmp="$out/.$2.wasm.tmp"
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$tmp" "./$1"
  land "$1" "$2" "$tmp"
  printf '%-20s %9d bytes  %5ss\n' "$2.wasm" "$(wc -c <"$wasm")" "$(elapsed "$start")"
}
variants() { # DIR NAME: each variant is the module's bytes under its own manifest
  local v vname
  for v in "$1"/variants/*.hcl; do
    [ -f "$v" ] || continue
    vname=$(basename "$v" .hcl)
    cp "$out/$2.wasm" "$out/.$vname.wasm.tmp"
    cp "$v" "$out/.$vname.hcl.tmp"
    mv "$out/.$vname.hcl.tmp" "$out/$vname.hcl"
    mv "$out/.$vname.wasm.tmp" "$out/$vname.wasm"
  done
}

if [[ " $kinds " == *" go "* ]]; then
  go_dirs=()
  for dir in "$src"/*/; do
    dir=${dir%/}
    name=$(basename "$dir")
    [ "$name" = build ] && continue
    [ -f "$dir/main.go" ] || continue
    go_dirs+=("$dir")
    wasm="$out/$name.wasm"
    newer=$(find "$dir" abi go.mod go.sum -name '*.go' -newer "$wasm" -o -name 'go.*' -newer "$wasm" 2>/dev/null | head -1 || true)
    if [ "${FORCE:-}" = 1 ] || [ ! -f "$wasm" ] || [ -n "$newer" ]; then
      run_job build_go "$dir" "$name"
      built=$((built + 1))
    else
      place_manifest "$dir" "$name"
    fi
  done
  wait_jobs
  for dir in ${go_dirs[@]+"${go_dirs[@]}"}; do variants "$dir" "$(basename "$dir")"; done
fi

sdk=abi/guest-as
build_as() { # DIR NAME
  local start wasm tmp
  start=$(date +%s.%N)
  wasm="$out/$2.wasm"
  tmp="$out/.$2.wasm.tmp"
  "$sdk/node_modules/.bin/asc" "$1/assembly/index.ts" --config "$sdk/asconfig.json" -o "$tmp"
  land "$1" "$2" "$tmp"
  printf '%-20s %9d bytes  %5ss\n' "$2.wasm" "$(wc -c <"$wasm")" "$(elapsed "$start")"
}
if [[ " $kinds " == *" as "* ]]; then
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
          start=$(date +%s.%N)
          echo "npm ci in $sdk" >&2
          (cd "$sdk" && npm ci --no-audit --no-fund >&2)
          touch "$sdk/node_modules"
          echo "npm ci done ($(elapsed "$start")s)" >&2
        fi
        asc_ready=1
      fi
      run_job build_as "$dir" "$name"
      built=$((built + 1))
    else
      place_manifest "$dir" "$name"
    fi
  done
  wait_jobs
fi
printf 'modules in %s: %d (%d built, %ss)\n' "$out" "$(ls "$out" | grep -c '\.wasm$')" "$built" "$(elapsed "$total_start")"
