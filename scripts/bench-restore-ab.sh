#!/usr/bin/env bash
# Before and after for a restart at scale: host/state
# BenchmarkScaleRestored of BASE (a git ref, default main) and of the work
# tree, ROUNDS (5) interleaved rounds (base, new, base, new, ...), each a
# process of its own restoring the same snapshot file SNAPSHOT (the format
# is the same on both sides). Without SNAPSHOT, BASE's BenchmarkScale
# writes one at VOLUMES (1000000) volumes first. Prints a markdown table:
# per measure, each side's median over rounds [min-max] and the median of
# the per-round ratio base/new [min-max]. HARNESS=1 builds BASE with the
# work tree's benchmark file (host/state/scale_bench_test.go), so a base
# older than a measure (the RSS after a burst of writes) reports it too.
# Run it under the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-restore-ab.sh main
set -euo pipefail
cd "$(dirname "$0")/.."
volumes=${VOLUMES:-1000000}
source scripts/ab-lib.sh
ab_start 5 "$@"
if [ "${HARNESS:-0}" = 1 ]; then
  cp host/state/scale_bench_test.go "$tmp/src/host/state/"
fi
(cd "$tmp/src" && go test -c -o "$tmp/base.test" ./host/state/)
go test -c -o "$tmp/new.test" ./host/state/
snap=${SNAPSHOT:-}
if [ -z "$snap" ]; then
  snap=$tmp/state.snap
  (cd host/state && VOLHOST_SCALE_VOLUMES=$volumes VOLHOST_SCALE_SNAPSHOT=$snap \
    "$tmp/base.test" -test.run '^$' -test.bench '^BenchmarkScale$' -test.benchtime 1x -test.timeout 60m >/dev/null)
fi
for r in $(seq "$rounds"); do
  for side in base new; do
    echo '{}' >"$tmp/$side-$r.json"
    (cd host/state && VOLHOST_SCALE_SNAPSHOT=$snap VOLHOST_SCALE_JSON="$tmp/$side-$r.json" \
      "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkScaleRestored$' -test.benchtime 1x -test.timeout 30m -test.v) >"$tmp/$side-$r.log"
    # The restore time is in the log line both sides write.
    sed -n 's/.*restored in a fresh process in \([0-9.]*\) s.*/\1/p' "$tmp/$side-$r.log" | head -1 >"$tmp/$side-$r.restore"
  done
done
# One line per side, round and key: "side round key value".
for f in "$tmp"/*-*.json; do
  name=$(basename "$f" .json)
  side=${name%-*} round=${name#*-}
  tr -d '{}' <"$f" | tr ',' '\n' | tr -d '"' | awk -F: -v side="$side" -v round="$round" 'NF == 2 { print side, round, $1, $2 }'
  echo "$side $round restore-s $(cat "$tmp/$name.restore")"
done >"$tmp/all.txt"
echo "BenchmarkScaleRestored on one snapshot file ($(du -m "$snap" | cut -f1) MiB), $rounds interleaved rounds; base = $base ($(git rev-parse --short "$base")$([ "${HARNESS:-0}" = 1 ] && echo ", with the work tree's benchmark file")), new = work tree."
echo
echo "| measure | base median [min-max] | new median [min-max] | base/new median [min-max] |"
echo "| --- | ---: | ---: | ---: |"
for key in restore-s heap-restored-MiB rss-restored-MiB rss-burst-MiB heap-burst-MiB; do
  awk -v key="$key" '
    function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
    $3 == key { v[$1, $2] = $4; rounds[$2] = 1 }
    END {
      nb = nn = nr = 0
      for (r in rounds) {
        if ((("base", r) in v)) b[++nb] = v["base", r]
        if ((("new", r) in v)) n[++nn] = v["new", r]
        if ((("base", r) in v) && (("new", r) in v) && v["new", r] > 0) q[++nr] = v["base", r] / v["new", r]
      }
      if (nn == 0) exit
      mn = med(n, nn)
      if (nb == 0) { printf "| %s | - | %.4g [%.4g-%.4g] | - |\n", key, mn, n[1], n[nn]; exit }
      mb = med(b, nb); mq = med(q, nr)
      printf "| %s | %.4g [%.4g-%.4g] | %.4g [%.4g-%.4g] | %.2f [%.2f-%.2f] |\n", key, mb, b[1], b[nb], mn, n[1], n[nn], mq, q[1], q[nr]
    }' "$tmp/all.txt"
done
