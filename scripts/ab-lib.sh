# Shared by the before/after scripts (scripts/bench-*-ab.sh), which source
# it from the repository root.

# ab_start DEFAULT_ROUNDS [REF]: what every before/after script starts
# with: base is REF (default main), rounds is $ROUNDS or DEFAULT_ROUNDS,
# and base's tree is checked out (ab_checkout).
ab_start() {
  rounds=${ROUNDS:-$1}
  base=${2:-main}
  ab_checkout "$base"
}

# ab_sides: "base = REF (commit), new = work tree (commit[, modified])",
# for a script's heading.
ab_sides() {
  echo "base = $base ($(git rev-parse --short "$base")), new = work tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ', modified'))"
}

# ab_checkout REF: the tree of git ref REF extracted into $tmp/src, with
# $tmp a new temporary directory removed when the script exits. The work
# tree's internal/testutil replaces REF's: a benchmark file a script copies
# into the older tree may use helpers REF lacks, and testutil only grows.
ab_checkout() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/src"
  git archive "$1" | tar -x -C "$tmp/src"
  cp internal/testutil/*.go "$tmp/src/internal/testutil/"
}

# ab_table_head: the header of the markdown table whose rows
# scripts/ab-table.awk prints.
ab_table_head() {
  echo "| measure | base median [min-max] | new median [min-max] | new/base per round, median [min-max] |"
  echo "| --- | ---: | ---: | ---: |"
}
