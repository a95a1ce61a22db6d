package watcher

import (
	"context"
	"slices"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestReleaseFreesInTheControllerDetachedWrite: a release writes two
// checkpoints after the node steps (fewer raft writes per claim:
// BenchmarkAgentReleaseNative): node-detached, then
// controller-detached with Free (the staging test plugin adds the
// NodeUnpublished mark before NodeUnstage, so NodeUnpublish runs exactly
// once), which the store applies together with ready-to-free; a claim found
// at controller-detached (an older leader's write) gets its own
// ready-to-free checkpoint.
func TestReleaseFreesInTheControllerDetachedWrite(t *testing.T) {
	for _, tc := range []struct {
		start      structs.ClaimState
		wantStates []structs.ClaimState
		wantFree   []bool // per recorded state; a freeing write is recorded as two
	}{
		{structs.ClaimTaken,
			[]structs.ClaimState{structs.ClaimTaken, structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree},
			[]bool{false, false, true, true}},
		{structs.ClaimNodeDetached,
			[]structs.ClaimState{structs.ClaimControllerDetached, structs.ClaimReadyToFree},
			[]bool{true, true}},
		{structs.ClaimControllerDetached,
			[]structs.ClaimState{structs.ClaimReadyToFree},
			[]bool{false}},
	} {
		t.Run(string(tc.start), func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			r := ref("v1")
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, tc.start)))
			if _, err := f.w.assess(context.Background(), r); err != nil {
				t.Fatalf("assess: %v", err)
			}
			if c := f.store.claim(r, "a1"); c != nil {
				t.Fatalf("claim still present at %s", c.State)
			}
			calls := f.store.checkpointCalls()
			var states []structs.ClaimState
			var free []bool
			for _, c := range calls {
				states = append(states, c.Claim.State)
				free = append(free, c.Free)
			}
			if !slices.Equal(states, tc.wantStates) || !slices.Equal(free, tc.wantFree) {
				t.Fatalf("checkpoints %v free %v, want %v free %v", states, free, tc.wantStates, tc.wantFree)
			}
			if tc.start != structs.ClaimControllerDetached && !calls[len(calls)-2].ControllerUnpublished {
				t.Error("the freeing checkpoint does not report its ControllerUnpublish")
			}
		})
	}
}
