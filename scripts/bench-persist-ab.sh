#!/usr/bin/env bash
# Before and after for the snapshot stream's encoding and decoding:
# host/state BenchmarkPersist (a raft snapshot's save, to io.Discard) and
# BenchmarkRestore (a restore into a new store) of BASE (a git ref,
# default main) and of the work tree, ROUNDS (5) interleaved rounds (base,
# new, base, new, ...), one process per round, side and benchmark, N (3)
# operations each, on one snapshot file SNAPSHOT of the same format on
# both sides (written by BASE at VOLUMES (200000) volumes when absent).
# Prints a markdown table: per measure, each side's median over rounds
# [min-max] and the median of the per-round ratio new/base [min-max].
# cpu-s/op is the process's CPU per operation, every goroutine's. Run it
# under the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-persist-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
ops=${N:-3}
volumes=${VOLUMES:-200000}
source scripts/ab-lib.sh
ab_start 5 "$@"
(cd "$tmp/src" && go test -c -o "$tmp/base.test" ./host/state/)
go test -c -o "$tmp/new.test" ./host/state/
snap=${SNAPSHOT:-$tmp/state.snap}
if [ ! -s "$snap" ]; then
  (cd host/state && VOLHOST_SCALE_VOLUMES=$volumes VOLHOST_PERSIST_SNAPSHOT=$snap \
    "$tmp/base.test" -test.run '^$' -test.bench '^BenchmarkPersist$' -test.benchtime 1x -test.timeout 60m >/dev/null)
fi
for r in $(seq "$rounds"); do
  for bench in Persist Restore; do
    for side in base new; do
      # The benchmark line: name, N, then value-unit pairs (ns/op, MB/s,
      # cpu-s/op, B/op, allocs/op).
      (cd host/state && VOLHOST_PERSIST_SNAPSHOT=$snap "$tmp/$side.test" -test.run '^$' \
        -test.bench "^Benchmark$bench\$" -test.benchtime "${ops}x" -test.timeout 60m) |
        awk -v side="$side" -v round="$r" -v bench="$bench" \
          '$1 ~ "^Benchmark" bench { for (i = 3; i < NF; i += 2) print side, round, bench "-" $(i + 1), $i }'
    done
  done
done >"$tmp/all.txt"
echo "BenchmarkPersist and BenchmarkRestore on one snapshot file ($(du -m "$snap" | cut -f1) MiB), $ops operations a process, $rounds interleaved rounds; $(ab_sides)."
echo
ab_table_head
for bench in Persist Restore; do
  for key in cpu-s/op ns/op B/op allocs/op; do
    awk -v key="$bench-$key" -v num=%.4g -v rat=%.2f -f scripts/ab-table.awk "$tmp/all.txt"
  done
done
