#!/usr/bin/env bash
# Before and after for the API's JSON: host/api BenchmarkWriteJSONEvents
# (a page of 1,000 events through WriteJSON) of BASE (a git ref, default
# main, built with the work tree's benchmark file) and of the work tree,
# ROUNDS (5) interleaved rounds (base, new, base, new, ...), one process
# per round and side, N (500) pages each. Prints a markdown table: per
# measure, each side's median over rounds [min-max] and the median of the
# per-round ratio new/base [min-max]. Run it under the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-json-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
pages=${N:-500}
source scripts/ab-lib.sh
ab_start 5 "$@"
cp host/api/writejson_bench_test.go "$tmp/src/host/api/"
(cd "$tmp/src" && go test -c -o "$tmp/base.test" ./host/api/)
go test -c -o "$tmp/new.test" ./host/api/
for r in $(seq "$rounds"); do
  for side in base new; do
    # The benchmark line: name, N, then value-unit pairs (ns/op, MB/s,
    # B/op, allocs/op).
    (cd host/api && "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkWriteJSONEvents$' -test.benchtime "${pages}x") |
      awk -v side="$side" -v round="$r" '/^BenchmarkWriteJSONEvents/ { for (i = 3; i < NF; i += 2) print side, round, $(i + 1), $i }'
  done
done >"$tmp/all.txt"
echo "BenchmarkWriteJSONEvents, a page of 1,000 events, $pages pages a round, $rounds interleaved rounds; $(ab_sides)."
echo
ab_table_head
for key in ns/op B/op allocs/op; do
  awk -v key="$key" -v num=%.4g -v rat=%.2f -f scripts/ab-table.awk "$tmp/all.txt"
done
