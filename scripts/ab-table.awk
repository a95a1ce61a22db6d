# One markdown table row of an interleaved A/B (scripts/bench-*-ab.sh):
# input lines "side round measure value" (side base or new); for the
# measure `key`, each side's median over rounds [min-max] and the median of
# the per-round ratio new/base [min-max]. num and rat are the printf
# formats of the values and of the ratio.
#
#	awk -v key=cpu-us/claim -v num=%.4g -v rat=%.2f -f scripts/ab-table.awk all.txt
function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
$3 == key { v[$1, $2] = $4; rounds[$2] = 1 }
END {
  nb = nn = nq = 0
  for (r in rounds) {
    if ((("base", r) in v)) b[++nb] = v["base", r]
    if ((("new", r) in v)) n[++nn] = v["new", r]
    if ((("base", r) in v) && (("new", r) in v) && v["base", r] > 0) q[++nq] = v["new", r] / v["base", r]
  }
  if (nb == 0 || nn == 0) exit
  mb = med(b, nb); mn = med(n, nn); mq = med(q, nq)
  f = "| %s | " num " [" num "-" num "] | " num " [" num "-" num "] | " rat " [" rat "-" rat "] |\n"
  printf f, key, mb, b[1], b[nb], mn, n[1], n[nn], mq, q[1], q[nq]
}
