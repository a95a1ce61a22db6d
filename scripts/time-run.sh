#!/usr/bin/env bash
# Times `make run` from the moment it starts: until the agent's API answers,
# until every Go example module serves, and until the AssemblyScript ones
# serve too; then stops it. What the README's "cold make run" figure comes
# from.
#
# Usage: scripts/time-run.sh [DIR]   (DIR: a checkout, default this one)
# Cold: run it in a fresh clone (no bin/, no examples/plugins/build, no
# abi/guest-as/node_modules) with COLD=1, which also gives it an empty
# wazero compilation cache and npm cache (npm ci downloads).
# PORT (default 4848) is the API's port.
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")/.." && pwd)}
port=${PORT:-4848}
addr=http://127.0.0.1:$port
cd "$dir"
if [ "${COLD:-}" = 1 ]; then
  tmp=$(mktemp -d)
  export VOLHOST_WAZERO_CACHE=$tmp/wazero npm_config_cache=$tmp/npm
  trap 'rm -rf "$tmp"' EXIT
fi
log=$(mktemp)
start=$(date +%s.%N)
since() { awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }
set -m
make run RUN_ARGS="-http-addr 127.0.0.1:$port" >"$log" 2>&1 &
pid=$!
set +m
stop() { kill -INT -- -"$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
trap 'stop; rm -f "$log"' EXIT
# serving NAMES...: every named module serves.
serving() {
  local mods
  mods=$(curl -fsS -m 5 "$addr/v1/modules" 2>/dev/null | tr -d ' \n') || return 1
  for n in "$@"; do
    echo "$mods" | grep -q "\"name\":\"$n\",[^}]*\"state\":\"serving\"" || return 1
  done
}
step() { # WHAT CMD...: waits (polling, 10 minutes at most) until CMD succeeds
  local what=$1
  shift
  for _ in $(seq 1 6000); do
    if "$@"; then
      printf '%-40s %6ss\n' "$what" "$(since)"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { echo "make run exited:"; cat "$log"; exit 1; }
    sleep 0.1
  done
  echo "timed out: $what"; tail -50 "$log"; exit 1
}
step "volhost and the Go examples built" grep -q "^run: modules built" "$log"
step "API answering" curl -fsS -m 5 -o /dev/null "$addr/v1/status/leader" 2>/dev/null
step "Go example modules serving" serving default-policy gcepd-adapter grace-policy
step "AssemblyScript examples serving" serving as-default-policy as-gcepd-adapter
grep -E "^run:|modules in|npm ci done|modules loaded|load_time" "$log" | sed 's/^/  /'
