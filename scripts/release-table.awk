# The BenchmarkAgentReleaseNative line of `go test -bench` output as a
# markdown table (make bench-quick): per measure, the median over the
# timed batches [min-max]. Fails when there is no such line.
#
#	go test -run '^$' -bench '^BenchmarkAgentReleaseNative$' -benchtime 3x ./host/agent/ | awk -f scripts/release-table.awk
/^BenchmarkAgentReleaseNative/ {
  found = 1
  batches = $2
  for (i = 3; i < NF; i++) v[$(i + 1)] = $i
}
END {
  if (!found) { print "no BenchmarkAgentReleaseNative result" > "/dev/stderr"; exit 1 }
  print "Whole-host release, `BenchmarkAgentReleaseNative` (one agent, " batches " timed batches of 1,000 claims): median [min-max] of the batches; target 150 cpu-us/claim. floor-cpu-us/claim is the release's external work alone (the node steps with their rmdirs, the driver's gRPC server, ControllerUnpublish), timed after each batch: the whole host cannot go below it; host-share is the rest."
  print ""
  print "| measure | median [min-max] |"
  print "| --- | ---: |"
  n = split("cpu-us/claim floor-cpu-us/claim host-share-cpu-us/claim floor-share claims/s raft-entries/claim alloc-B/claim allocs/claim", keys, " ")
  for (k = 1; k <= n; k++) {
    key = keys[k]
    f = v[key] >= 1000 ? "%.0f" : "%.3g"
    printf "| %s | " f " [" f "-" f "] |\n", key, v[key], v["min-" key], v["max-" key]
  }
}
