#!/usr/bin/env bash
# `make run`: a single-node dev agent over the example modules, answering
# as soon as it can (bin/volhost is built first, by make).
#
# 1. The Go example modules build, in parallel (seconds each; what the
#    walk-through's volumes are served by).
# 2. The agent starts over OUT: it listens at once and compiles the modules
#    after (`volhost module list`: loading, then serving; the leader releases
#    nothing until they are loaded).
# 3. Behind it, the AssemblyScript ports build into OUT (npm ci the first
#    time, then about 25 s of compile each; log in bin/as-build.log); the
#    agent loads each as it lands. They select nothing the Go examples serve
#    (as-default-policy is no default, as-gcepd-adapter serves plugin
#    gcepd-as), so their arrival changes what serves no volume. Without npm
#    they are skipped, and the log says so.
#
# Usage: scripts/run-dev.sh OUT [agent flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-examples/plugins/build}
shift || true
start=$(date +%s.%N)
KINDS=go bash scripts/build-plugins.sh "$out"
mkdir -p bin
log=bin/as-build.log
# Its own process group, so that stopping the agent stops it and all its
# children (npm, asc).
set -m
{
  if KINDS=as bash scripts/build-plugins.sh "$out" >"$log" 2>&1; then
    echo "run: AssemblyScript examples ready in $out ($(tail -1 "$log"))" >&2
  else
    echo "run: AssemblyScript examples not built (the Go ones serve): see $log" >&2
  fi
} &
as_pid=$!
set +m
trap 'kill -- -"$as_pid" 2>/dev/null || true' EXIT
echo "run: modules built in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')s; AssemblyScript examples building behind the agent (log: $log)" >&2
./bin/volhost agent -dev -module-dir "$out" "$@"
