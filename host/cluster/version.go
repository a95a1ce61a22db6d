package cluster

import (
	"slices"
	"strings"
)

// BuildVersion is this binary's version as servers advertise it to each
// other (the members map, `operator raft list-peers`). cmd/volhost sets it
// from its own version line; a test binary says "dev".
var BuildVersion = "dev"

// GateVersion is the first volhost version that advertises its features.
// A server that advertises none is older: it understands only the log
// commands of the first multi-server release (legacyTypes), and gates.go
// names this version as the one to upgrade it to.
const GateVersion = "0.2.0"

// Features lists, sorted, every feature this binary understands: each
// gate of gates.go. A server advertises them in its join request and its
// member record; the leader enables a feature once every server of the
// raft configuration advertises it (gate.go).
func Features() []string {
	out := make([]string, 0, len(gates))
	for _, g := range gates {
		out = append(out, string(g.Feature))
	}
	slices.Sort(out)
	return out
}

// understands reports whether a server advertising features understands f.
func understands(features []string, f Feature) bool {
	return slices.Contains(features, string(f))
}

// describeServer names a server and what it runs, for refusals: "s2
// (volhost 0.1.0-dev, features: none)".
func describeServer(m Member) string {
	b := m.Build
	if b == "" {
		b = "a version before " + GateVersion
	}
	fs := "none"
	if len(m.Features) > 0 {
		fs = strings.Join(m.Features, ",")
	}
	return m.ID + " (volhost " + b + ", features: " + fs + ")"
}
