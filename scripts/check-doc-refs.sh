#!/usr/bin/env bash
# Fails when a user document cites something a reader of the repository
# cannot look up: a tracker number ("issue 12", "issue 10 defect 5"), a pain
# number of the team's private notes ("ANCHORS pain 2"), a past work period
# ("session 13", "wave 2") or the private design notes ('DESIGN "Release"').
# Say what the reference stood for instead ("the double-attach fix"), or link
# the public bug ("hashicorp/nomad#12346"). Run by `make lint` and .ci/run.
#
# docs/benchmarks-history.md is left out: it is the historical log, moved
# verbatim, and its header says its issue numbers are the tracker's history.
#
# Usage: scripts/check-doc-refs.sh [FILE...]   (default: every user document)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- README.md RATIONALE.md RELIABILITY.md \
    SECURITY.md BENCHMARKS.md abi/ABI.md abi/guest-as/README.md 'docs/*.md' \
    'examples/**/README.md' Makefile | grep -vx 'docs/benchmarks-history.md')
fi

# One extended regular expression, case-insensitive: "issue 12" and
# "issue\n17" (a reference broken over two lines ends a line with "issue"),
# but not "issue #2466" or "hashicorp/nomad#2466" (public bugs, linkable).
pattern='\bissues? [0-9]|\bissues?$|ANCHORS|\bpains? [0-9]|\bsessions? [0-9]|\bwaves? [0-9]|DESIGN "'

if out=$(grep -nHiE -- "$pattern" "${files[@]}"); then
  {
    echo "$out"
    echo "check-doc-refs: the lines above cite an issue number, a session, a wave, a pain"
    echo "number or the private design notes; say what the reference stood for, or link"
    echo "the public bug (e.g. hashicorp/nomad#12346)."
  } >&2
  exit 1
fi
