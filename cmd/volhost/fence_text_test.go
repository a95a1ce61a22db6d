package main

import (
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// A module's fence (ABI 1.1) says which module confirmed it; an
// operator's names the operator's token.
func TestFenceText(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		fence *structs.NodeFence
		want  string
	}{
		{nil, "-"},
		{&structs.NodeFence{Reason: "powered off", Source: structs.FenceSourceOperator, Accessor: "acc-1", Time: at},
			"powered off by operator (acc-1) at " + fmtTime(at)},
		{&structs.NodeFence{Reason: "instance i-1 is listed as terminated", Source: structs.FenceSourceModule("fence-adapter", "1.1.0"),
			Accessor: "module:fence-adapter@1.1.0", Time: at},
			"instance i-1 is listed as terminated, confirmed by adapter module fence-adapter@1.1.0 at " + fmtTime(at)},
	} {
		if got := fenceText(tc.fence); got != tc.want {
			t.Errorf("fenceText = %q, want %q", got, tc.want)
		}
	}
}

func TestABIText(t *testing.T) {
	for _, tc := range []struct {
		version  string
		optional []string
		want     string
	}{
		{"", nil, "-"},
		{"1.0", nil, "1.0"},
		{"1.1", []string{"volhost_confirm_fence"}, "1.1 (volhost_confirm_fence)"},
	} {
		if got := abiText(tc.version, tc.optional); got != tc.want {
			t.Errorf("abiText(%q, %q) = %q, want %q", tc.version, tc.optional, got, tc.want)
		}
	}
}
