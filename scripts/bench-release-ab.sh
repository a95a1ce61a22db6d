#!/usr/bin/env bash
# Before and after for the whole-host release CPU per claim:
# host/agent BenchmarkAgentReleaseNative of BASE (a git ref, default
# main) and of the work tree, ROUNDS (5) interleaved rounds (base, new,
# base, new, ...), each side's round a process of its own with
# -test.benchtime 3x (3 timed batches of 1,000 claims; the process reports
# their median). Prints a markdown table: per measure, each side's median
# over rounds [min-max] and the median of the per-round ratio new/base
# [min-max]. PROFILE=DIR also keeps each process's CPU profiles of the
# timed parts (DIR/base-R.0 ... and DIR/new-R.0 ..., with the test
# binaries DIR/base.test and DIR/new.test for go tool pprof). Run it under
# the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-release-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab-lib.sh
ab_start 5 "$@"
bin=${PROFILE:-$tmp}
mkdir -p "$bin"
(cd "$tmp/src" && go test -c -o "$bin/base.test" ./host/agent/)
go test -c -o "$bin/new.test" ./host/agent/
for r in $(seq "$rounds"); do
  for side in base new; do
    prof=()
    if [ -n "${PROFILE:-}" ]; then prof=(env "VOLHOST_RELEASE_CPUPROFILE=$PROFILE/$side-$r"); fi
    (cd host/agent && "${prof[@]}" "$bin/$side.test" -test.run '^$' -test.bench '^BenchmarkAgentReleaseNative$' -test.benchtime 3x) >"$tmp/$side-$r.log"
    # "value unit" pairs of the benchmark line, the median ones only.
    grep '^BenchmarkAgentReleaseNative' "$tmp/$side-$r.log" | tr '\t' '\n' | awk -v side="$side" -v r="$r" \
      'NF == 2 && $2 !~ /^(min|max)-/ && $2 != "ns/op" { print side, r, $2, $1 }' >>"$tmp/all.txt"
  done
done
echo "BenchmarkAgentReleaseNative, $rounds interleaved rounds of one process per side (-test.benchtime 3x); $(ab_sides)."
echo
ab_table_head
for key in cpu-us/claim host-share-cpu-us/claim floor-cpu-us/claim alloc-B/claim allocs/claim raft-entries/claim claims/s; do
  awk -v key="$key" -v num=%.4g -v rat=%.2f -f scripts/ab-table.awk "$tmp/all.txt"
done
