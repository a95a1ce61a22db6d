#!/usr/bin/env bash
# Before and after for the memory of a state built through the FSM:
# host/cluster BenchmarkScaleHeap of BASE (a git ref, default main, built
# with the work tree's benchmark file) and of the work tree, ROUNDS (5)
# interleaved rounds (base, new, base, new, ...), one process per round and
# side, at VOLUMES (200000) volumes and a tenth as many claims. Prints a
# markdown table: per measure, each side's median over rounds [min-max]
# and the median of the per-round ratio new/base [min-max]. Run it under
# the shared lock:
#
#	flock /tmp/volhost-heavy.lock nice -n 15 bash scripts/bench-heap-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
volumes=${VOLUMES:-200000}
source scripts/ab-lib.sh
ab_start 5 "$@"
cp host/cluster/scale_heap_bench_test.go "$tmp/src/host/cluster/"
(cd "$tmp/src" && go test -c -o "$tmp/base.test" ./host/cluster/)
go test -c -o "$tmp/new.test" ./host/cluster/
for r in $(seq "$rounds"); do
  for side in base new; do
    # The benchmark line: name, 1, ns/op, then value-unit pairs.
    (cd host/cluster && VOLHOST_SCALE_VOLUMES=$volumes \
      "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkScaleHeap$' -test.benchtime 1x -test.timeout 60m) |
      awk -v side="$side" -v round="$r" '/^BenchmarkScaleHeap/ { for (i = 5; i < NF; i += 2) print side, round, $(i + 1), $i }'
  done
done >"$tmp/all.txt"
echo "BenchmarkScaleHeap at $volumes volumes, $((volumes / 10)) claims, $rounds interleaved rounds; $(ab_sides)."
echo
ab_table_head
for key in live-MiB B/volume B/claim objects/volume objects/claim heap-inuse-MiB rss-MiB peak-rss-MiB build-s gc-cpu-s; do
  awk -v key="$key" -v num=%.4g -v rat=%.2f -f scripts/ab-table.awk "$tmp/all.txt"
done
