#!/usr/bin/env bash
# make bench: the Go benchmarks of every package (both modules with
# benchmarks outside test/peers too) and the end-to-end release benchmarks
# against the GCE PD driver (test/peers/cmd/releasebench). Rewrites the
# sections of BENCHMARKS.md it owns (between <!-- begin NAME --> and
# <!-- end NAME --> markers, appended when missing) and leaves every other
# section as it is; writes BENCHMARKS-release.png. Raw outputs go to bin/bench/.
#
# Environment: BENCHTIME (default 200ms) for micro-benchmarks; CLAIMS (1000)
# NODES (10), ROUNDS (3) and LATENCY (25ms, added to each ControllerUnpublish)
# for the end-to-end runs; SKIP_GO=1 or SKIP_E2E=1 to run a part.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=$root/bin/bench
mkdir -p "$out"
benchtime=${BENCHTIME:-200ms}
claims=${CLAIMS:-1000}
nodes=${NODES:-10}
rounds=${ROUNDS:-3}
latency=${LATENCY:-25ms}
started=$(date -u +%Y-%m-%dT%H:%MZ)
t0=$(date +%s)

# Benchmarks whose one op is a whole scenario (with untimed setup) run a
# fixed number of times; the rest for $benchtime.
benchtime_of() {
  case "$1" in
    BenchmarkStepUp) echo 1x ;;
    BenchmarkFailover) echo 3x ;;
    BenchmarkClaimTransitions) echo 2000x ;;
    BenchmarkAgentRelease) echo 2x ;;
    BenchmarkGuestCostCold) echo 300x ;;
    *) echo "$benchtime" ;;
  esac
}

# run_benchmarks DIR PKG: every Benchmark of PKG (run from DIR), grouped by
# benchtime, appended raw to go-bench.txt.
run_benchmarks() {
  local dir=$1 pkg=$2 names bt group
  names=$(cd "$dir" && go test -list '^Benchmark' "$pkg" 2>/dev/null | grep '^Benchmark' || true)
  [ -n "$names" ] || return 0
  for bt in $(for n in $names; do benchtime_of "$n"; done | sort -u); do
    group=$(for n in $names; do if [ "$(benchtime_of "$n")" = "$bt" ]; then echo "$n"; fi; done | paste -sd'|')
    echo "== (cd $dir && go test -run '^\$' -bench '^($group)\$' -benchmem -benchtime $bt $pkg)" | tee -a "$out/go-bench.txt"
    (cd "$dir" && go test -run '^$' -bench "^($group)\$" -benchmem -benchtime "$bt" -timeout 15m "$pkg" 2>&1) |
      tee -a "$out/go-bench.txt" | grep -E '^(Benchmark|ok|FAIL|---)' || true
  done
}

if [ "${SKIP_GO:-}" != 1 ]; then
  : >"$out/go-bench.txt"
  # Every package of the product module with a Benchmark function, then the
  # separate modules that have benchmarks (test/peers has none of its own).
  for pkg in $(grep -rl --include='*_test.go' '^func Benchmark' . | grep -v '^./test/' | xargs -n1 dirname | sort -u); do
    run_benchmarks . "$pkg"
  done
  for mod in test/extism; do
    if [ -f "$mod/go.mod" ]; then run_benchmarks "$mod" ./...; fi
  done
fi
t1=$(date +%s)

if [ "${SKIP_E2E:-}" != 1 ]; then
  (cd test/peers && go run ./cmd/releasebench -claims "$claims" -nodes "$nodes" -rounds "$rounds" -controller-latency "$latency" \
    -plugin-build "$root/examples/plugins/build" -out "$out")
  cp "$out/release.png" BENCHMARKS-release.png
fi
t2=$(date +%s)

# replace_section NAME TITLE FILE: put FILE's text between NAME's markers in
# BENCHMARKS.md, or append a new "## TITLE" section holding it.
replace_section() {
  local name=$1 title=$2 file=$3 md=BENCHMARKS.md
  [ -f "$md" ] || printf '# Benchmarks\n\nEach section gives the command that reproduces it.\n' >"$md"
  if grep -q "^<!-- begin $name -->\$" "$md"; then
    awk -v name="$name" -v file="$file" '
      $0 == "<!-- begin " name " -->" { print; while ((getline line < file) > 0) print line; skip = 1; next }
      $0 == "<!-- end " name " -->" { skip = 0 }
      !skip { print }
    ' "$md" >"$md.tmp" && mv "$md.tmp" "$md"
  else
    { printf '\n## %s\n\n<!-- begin %s -->\n' "$title" "$name"; cat "$file"; printf '<!-- end %s -->\n' "$name"; } >>"$md"
  fi
}

cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ //' || echo unknown)
{
  echo "Produced by \`make bench\` (scripts/bench.sh), started $started, $((t2 - t0)) s in all"
  echo "(Go benchmarks $((t1 - t0)) s, end-to-end $((t2 - t1)) s). The machine is shared and noisy:"
  echo "compare ratios measured in the same run, not absolute numbers across runs."
  echo
  echo "| | |"
  echo "| --- | --- |"
  echo "| machine | $(uname -sm), $(nproc) CPUs, $cpu |"
  echo "| Go | $(go version | cut -d' ' -f3-) |"
  echo "| load average at start | $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) |"
  echo "| command | \`make bench\` (BENCHTIME=$benchtime CLAIMS=$claims NODES=$nodes ROUNDS=$rounds LATENCY=$latency) |"
} >"$out/machine.md"
replace_section machine "Machine and command (make bench)" "$out/machine.md"

if [ -f "$out/release.md" ] && [ "${SKIP_E2E:-}" != 1 ]; then
  {
    echo '```sh'
    echo "make build plugins"
    echo "cd test/peers && go run ./cmd/releasebench -claims $claims -nodes $nodes -rounds $rounds -controller-latency $latency -plugin-build ../../examples/plugins/build -out ../../bin/bench"
    echo '```'
    echo
    cat "$out/release.md"
    echo
    echo "![release latency percentiles and throughput by scenario](BENCHMARKS-release.png)"
  } >"$out/release-section.md"
  replace_section e2e-release "End-to-end release against the GCE PD driver" "$out/release-section.md"
fi

if [ -s "$out/go-bench.txt" ] && [ "${SKIP_GO:-}" != 1 ]; then
  {
    echo "100,000 registered volumes, 10,000 of them with a claim to release: leader"
    echo "step-up until every releasable volume is assessed (released, against a CSI"
    echo "fake), with goroutines and watcher heap measured once idle again:"
    echo
    echo '```sh'
    echo "go test -run '^\$' -bench '^BenchmarkStepUp\$' -benchmem -benchtime 1x ./watcher"
    echo '```'
    echo
    echo "| variant | step-up to all assessed (s) | goroutines while idle | watcher heap (MB) | tracked volumes |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    grep '^BenchmarkStepUp/' "$out/go-bench.txt" | awk '{
      name = $1; sub(/^BenchmarkStepUp\//, "", name); sub(/-[0-9]+$/, "", name)
      secs = ""; g = ""; h = ""; tr = ""
      for (i = 3; i < NF; i++) {
        if ($(i+1) == "ns/op") secs = sprintf("%.2f", $i / 1e9)
        if ($(i+1) == "goroutines-idle") g = $i
        if ($(i+1) == "watcher-heap-MB") h = $i
        if ($(i+1) == "tracked-volumes") tr = $i
      }
      printf "| %s | %s | %s | %s | %s |\n", name, secs, g, h, tr
    }'
  } >"$out/stepup.md"
  replace_section stepup "Leader step-up with 100,000 volumes" "$out/stepup.md"

  {
    echo "Every package's benchmarks, raw (\`ns/op\` and the custom metrics each"
    echo "benchmark reports); each block starts with the command that produced it."
    echo
    echo '```'
    grep -E '^(==|Benchmark|ok|FAIL|goos|goarch|pkg|cpu)' "$out/go-bench.txt" | grep -vE '^(goos|goarch|cpu)'
    echo '```'
  } >"$out/go-section.md"
  replace_section go-raw "Go benchmarks of every package (raw)" "$out/go-section.md"
fi
echo "bench: BENCHMARKS.md updated ($((t2 - t0)) s)"
