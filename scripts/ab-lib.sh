# Shared by the before/after scripts (scripts/bench-*-ab.sh), which source
# it from the repository root.

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
