#!/usr/bin/env bash
# Before and after for where a module instance's linear memory lives
# (outside the Go heap on Linux): plugins BenchmarkInstanceChurn (a Go guest's pool
# of 4 at memory_pages 256, replaced every 50 calls: Go heap, RSS, cost per
# call) and BenchmarkInstantiate (one instance's set-up: time, bytes
# allocated) of BASE (a git ref, default main) and of the work tree, ROUNDS
# (5) interleaved rounds (base, new, base, new, ...), each side's round a
# process of its own per benchmark. The base tree gets this tree's
# churn_bench_test.go, so both run the same benchmark code. Prints each
# side's median over rounds [min-max] and the median of the per-round ratio
# new/base [min-max]. Needs the example modules built (make plugins). Run
# it under the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-memory-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ab-lib.sh
ab_start 5 "$@"
cp plugins/churn_bench_test.go "$tmp/src/plugins/"
# Both binaries run in this tree's plugins folder, on its built modules.
(cd "$tmp/src" && go test -c -o "$tmp/base.test" ./plugins/)
go test -c -o "$tmp/new.test" ./plugins/
for r in $(seq "$rounds"); do
  for side in base new; do
    (cd plugins && "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkInstanceChurn$' -test.benchtime 4000x) >"$tmp/$side-churn-$r.log"
    (cd plugins && "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkInstantiate$' -test.benchtime 100x -test.benchmem) >"$tmp/$side-inst-$r.log"
    cat "$tmp/$side-churn-$r.log" "$tmp/$side-inst-$r.log" | grep -E '^Benchmark(InstanceChurn|Instantiate)' | while read -r name rest; do
      bench=${name%%-*}
      echo "$rest" | tr '\t' '\n' | awk -v side="$side" -v r="$r" -v b="${bench#Benchmark}" \
        'NF == 2 { print side, r, b "." $2, $1 }'
    done >>"$tmp/all.txt"
  done
done
echo "BenchmarkInstanceChurn (-benchtime 4000x) and BenchmarkInstantiate (-benchtime 100x), plugins, $rounds interleaved rounds of one process per side and benchmark; $(ab_sides)."
echo
ab_table_head
for key in InstanceChurn.ns/op InstanceChurn.heap-MiB InstanceChurn.rss-MiB Instantiate.ns/op Instantiate.B/op; do
  awk -v key="$key" -v num=%.4g -v rat=%.3f -f scripts/ab-table.awk "$tmp/all.txt"
done
