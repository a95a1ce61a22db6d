#!/usr/bin/env bash
# Fails when a user document or the source cites something a reader of the
# repository cannot look up: a tracker number ("issue 12", "issue 10 defect
# 5"), a pain number of the team's private notes ("ANCHORS pain 2"), a past
# work period ("session 13", "wave 2") or the private design notes
# ('DESIGN "Release"'). Say what the reference stood for instead ("the
# double-attach fix"), or link the public bug ("hashicorp/nomad#12346").
# Run by `make lint` and .ci/run.
#
# Source files (Go, AssemblyScript, JavaScript, shell, HCL, proto, awk) are
# read whole, comments, strings and names alike: a test name such as
# TestIssue17Restore or a t.Log line citing "issue 16" is refused too, so
# the numbered forms glued to a word ("issue17", "defect_3") count there.
#
# docs/benchmarks-history.md is left out: it is the historical log, moved
# verbatim, and its header says its issue numbers are the tracker's history.
#
# Usage: scripts/check-doc-refs.sh [FILE...]   (default: every user document
# and every source file)
set -euo pipefail
cd "$(dirname "$0")/.."

docs_pathspec=(README.md RATIONALE.md RELIABILITY.md SECURITY.md BENCHMARKS.md
  abi/ABI.md abi/guest-as/README.md 'docs/*.md' 'examples/**/README.md' Makefile)
src_pathspec=('*.go' '*.ts' '*.js' '*.mjs' '*.sh' '*.proto' '*.awk' '*.hcl' '.ci/*')

docs=() srcs=()
if [ "$#" -gt 0 ]; then
  for f in "$@"; do
    case "$f" in
      *.md | Makefile) docs+=("$f") ;;
      *) srcs+=("$f") ;;
    esac
  done
else
  mapfile -t docs < <(git ls-files -- "${docs_pathspec[@]}" | grep -vx 'docs/benchmarks-history.md')
  # This script names the forms it refuses.
  mapfile -t srcs < <(git ls-files -- "${src_pathspec[@]}" | grep -vx 'scripts/check-doc-refs.sh')
fi

# One extended regular expression, case-insensitive: "issue 12" and
# "issue\n17" (a reference broken over two lines ends a line with "issue"),
# but not "issue #2466" or "hashicorp/nomad#2466" (public bugs, linkable).
pattern='\bissues? [0-9]|\bissues?$|ANCHORS|\bpains? [0-9]|\bsessions? [0-9]|\bwaves? [0-9]|DESIGN "|\bdefects? [0-9]'
# In source, also the forms glued to a name: TestIssue17X, skipIssue17,
# defect_3, session9.
src_pattern="$pattern"'|(issue|defect|pain|session|wave)_?[0-9]'

out=""
if [ "${#docs[@]}" -gt 0 ]; then
  out+=$(grep -nHiIE -- "$pattern" "${docs[@]}" || true)
fi
if [ "${#srcs[@]}" -gt 0 ]; then
  [ -n "$out" ] && out+=$'\n'
  out+=$(printf '%s\0' "${srcs[@]}" | xargs -0 grep -nHiIE -- "$src_pattern" || true)
fi
out=$(printf '%s' "$out" | sed '/^$/d')

if [ -n "$out" ]; then
  {
    echo "$out"
    echo "check-doc-refs: the lines above cite an issue number, a defect, a session, a wave,"
    echo "a pain number or the private design notes; say what the reference stood for, or"
    echo "link the public bug (e.g. hashicorp/nomad#12346). Test names and log lines too."
  } >&2
  exit 1
fi
