package watcher

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// agingPolicy waits with a reason that is new on every call, as
// grace-policy 1.0.0's did ("allocation complete 1.2s ago, grace 30s").
type agingPolicy struct{ calls *atomic.Int64 }

func (p agingPolicy) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	resp := &abi.PolicyResponse{}
	for _, c := range req.Claims {
		n := p.calls.Add(1)
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait,
			RetryAfterMs: 3_600_000, Reason: fmt.Sprintf("allocation complete %dms ago", n)})
	}
	return resp, nil
}

// TestHoldReasonChangingEveryCall: a policy whose wait reason changes on
// every call gets its hold written once, then again for its reason at
// most once per holdReasonEvery. The hold write is a change of the
// volume, which runs a pass: before, each pass wrote a new hold, a log
// write loop without end.
func TestHoldReasonChangingEveryCall(t *testing.T) {
	var calls atomic.Int64
	f := newFixture(t, Config{}, testModules{policy: agingPolicy{&calls}})
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.w.SetEnabled(true)
	// The hold write runs a second pass (and policy call) of its own.
	testutil.WaitFor(t, "the hold, a pass after it, then an idle watcher", func() bool {
		c := f.store.claim(ref("v1"), "a1")
		return c != nil && c.Hold != nil && calls.Load() >= 2 && f.settled()
	})
	first := f.store.claim(ref("v1"), "a1").Hold.Reason
	if n := len(f.store.checkpointCalls()); n != 1 {
		t.Fatalf("%d claim writes after %d policy calls, want the hold written once", n, calls.Load())
	}
	// Past holdReasonEvery the new reason is written, once.
	f.clock.Advance(holdReasonEvery)
	testutil.WaitFor(t, "the hold's new reason, then an idle watcher", func() bool {
		c := f.store.claim(ref("v1"), "a1")
		return c != nil && c.Hold != nil && c.Hold.Reason != first && f.settled()
	})
	if n := len(f.store.checkpointCalls()); n != 2 {
		t.Fatalf("%d claim writes after %d policy calls, want 2 (the hold, its reason a minute later)", n, calls.Load())
	}
	if h := f.store.claim(ref("v1"), "a1").Hold; !h.Since.Equal(t0) {
		t.Fatalf("hold since %v, want %v: a new reason is the same hold", h.Since, t0)
	}
}
