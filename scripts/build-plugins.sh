#!/usr/bin/env bash
# Builds every example module under examples/plugins/*/ that has a main.go
# into OUT/NAME.wasm and copies its manifest to OUT/NAME.hcl.
set -euo pipefail
out=${1:-examples/plugins/build}
mkdir -p "$out"
for dir in examples/plugins/*/; do
  name=$(basename "$dir")
  [ "$name" = build ] && continue
  [ -f "$dir/main.go" ] || continue
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$out/$name.wasm" "./$dir"
  [ -f "$dir/$name.hcl" ] && cp "$dir/$name.hcl" "$out/$name.hcl"
done
echo "modules built in $out: $(ls "$out" | grep -c '\.wasm$')"
