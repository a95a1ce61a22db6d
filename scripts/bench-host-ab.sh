#!/usr/bin/env bash
# Before and after for the host's side of a module call:
# test/extism BenchmarkHostSide of BASE (a git ref, default main) and of
# the work tree on the same Go guest module (WASM, default the work tree's
# default policy, built here), ROUNDS (7) interleaved rounds (base, new,
# base, new, ...), each side's round a process of its own with
# -test.benchtime CALLS (20000) calls. The base tree gets this tree's
# hostside_test.go, so both run the same benchmark code. Prints each
# side's median over rounds [min-max] and the median of the per-round
# ratio new/base [min-max], for the p50 and the mean. HOST_CTX=cancel
# makes the calls on a cancellable context, as the watcher's are (the
# default is context.Background()). Run it under the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-host-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${CALLS:-20000}
source scripts/ab-lib.sh
ab_start 7 "$@"
cp test/extism/hostside_test.go "$tmp/src/test/extism/"
wasm=${WASM:-$tmp/default-policy.wasm}
if [ -z "${WASM:-}" ]; then
  GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o "$wasm" ./examples/plugins/default-policy
fi
(cd "$tmp/src/test/extism" && go test -c -o "$tmp/base.test" .)
(cd test/extism && go test -c -o "$tmp/new.test" .)
for r in $(seq "$rounds"); do
  for side in base new; do
    (cd test/extism && VOLHOST_HOST_CTX="${HOST_CTX:-}" VOLHOST_HOST_WASM="$wasm" "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkHostSide$' -test.benchtime "${calls}x") >"$tmp/$side-$r.log"
    grep '^BenchmarkHostSide' "$tmp/$side-$r.log" | tr '\t' '\n' | awk -v side="$side" -v r="$r" \
      'NF == 2 && ($2 == "p50-ns" || $2 == "mean-ns") { print side, r, $2, $1 }' >>"$tmp/all.txt"
  done
done
echo "BenchmarkHostSide (test/extism), $rounds interleaved rounds of one process per side, $calls calls each, caller context ${HOST_CTX:-background}; the same module ($(basename "$wasm")) for both; $(ab_sides)."
echo
ab_table_head
for key in p50-ns mean-ns; do
  awk -v key="$key" -v num=%.0f -v rat=%.3f -f scripts/ab-table.awk "$tmp/all.txt"
done
