#!/usr/bin/env bash
# Before and after for the state store at scale:
# host/state BenchmarkScale of BASE (a git ref, default main) and of the
# work tree, ROUNDS (5) interleaved rounds (base, new, base, new, ...), one
# process per round and side, at VOLUMES (100000). Prints a markdown table:
# per measure, the median over rounds of each side's figure (min-max) and
# of the per-round ratio base/new. Run it under the shared lock:
#
#	flock /tmp/volhost-heavy.lock bash scripts/bench-scale-ab.sh c006493
set -euo pipefail
cd "$(dirname "$0")/.."
volumes=${VOLUMES:-100000}
source scripts/ab-lib.sh
ab_start 5 "$@"
(cd "$tmp/src" && go test -c -o "$tmp/base.test" ./host/state/)
go test -c -o "$tmp/new.test" ./host/state/
for r in $(seq "$rounds"); do
  for side in base new; do
    (cd host/state && VOLHOST_SCALE_VOLUMES=$volumes VOLHOST_SCALE_JSON="$tmp/$side-$r.json" \
      "$tmp/$side.test" -test.run '^$' -test.bench '^BenchmarkScale$' -test.benchtime 1x -test.timeout 30m >/dev/null)
  done
done
# One line per side, round and key: "side round key value".
for f in "$tmp"/*-*.json; do
  name=$(basename "$f" .json)
  tr -d '{}' <"$f" | tr ',' '\n' | tr -d '"' | awk -F: -v side="${name%-*}" -v round="${name#*-}" '{ print side, round, $1, $2 }'
done >"$tmp/all.txt"
echo "BenchmarkScale at $volumes volumes, $rounds interleaved rounds; base = $base ($(git rev-parse --short "$base")), new = work tree."
echo
echo "| measure | base median [min-max] | new median [min-max] | base/new median [min-max] |"
echo "| --- | ---: | ---: | ---: |"
for key in build-s heap-MiB rss-MiB save-s restore-s releasable-ms; do
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
      if (nb == 0 || nn == 0) exit
      mb = med(b, nb); mn = med(n, nn); mq = med(q, nr)
      printf "| %s | %.3g [%.3g-%.3g] | %.3g [%.3g-%.3g] | %.2f [%.2f-%.2f] |\n", key, mb, b[1], b[nb], mn, n[1], n[nn], mq, q[1], q[nr]
    }' "$tmp/all.txt"
done
