package watcher

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher/attach"
)

// swappablePolicy answers WAIT with a 30 s retry_after until swapped, then
// RELEASE: a module generation N and its successor N+1.
type swappablePolicy struct {
	swapped atomic.Bool
	mu      sync.Mutex
	calls   int
}

func (p *swappablePolicy) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	resp := &abi.PolicyResponse{}
	for _, c := range req.Claims {
		d := abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait, RetryAfterMs: 30_000}
		if p.swapped.Load() {
			d = abi.Decision{AllocID: c.AllocID, Action: abi.ActionRelease}
		}
		resp.Decisions = append(resp.Decisions, d)
	}
	return resp, nil
}

func (p *swappablePolicy) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// reassessModules serves every volume with one policy and the spec adapter.
type reassessModules struct{ policy Policy }

func (m reassessModules) PolicyFor(*structs.Volume) Policy          { return m.policy }
func (m reassessModules) AdapterFor(*structs.Volume) attach.Adapter { return SpecAdapter{} }

// TestReassessRejudgesAtOnce (a module swap re-judges what the old version
// decided): a claim deferred by the
// old generation for 30 s is judged by the new one as soon as Reassess
// runs, with the clock not moved at all; volumes pred leaves out are not
// visited, and a disabled watcher queues nothing.
func TestReassessRejudgesAtOnce(t *testing.T) {
	pol := &swappablePolicy{}
	f := newFixture(t, Config{}, reassessModules{policy: pol})
	if n, err := f.w.Reassess(nil); n != 0 || err != nil {
		t.Fatalf("Reassess while disabled = %d, %v; want 0, nil", n, err)
	}
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putAlloc("b1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.store.putVolume(newVolume("other", newClaim("b1", testNode, structs.ClaimTaken)))
	f.enable(t)
	testutil.WaitFor(t, "the first judgement of both volumes", func() bool { return pol.callCount() >= 2 && f.settled() })
	if n := f.metrics.releasedCount(); n != 0 {
		t.Fatalf("%d claims released while the policy said wait", n)
	}
	calls := pol.callCount()

	pol.swapped.Store(true)
	n, err := f.w.Reassess(func(v *structs.Volume) bool { return v.ID == "v1" })
	if err != nil || n != 1 {
		t.Fatalf("Reassess = %d, %v; want 1 volume", n, err)
	}
	testutil.WaitFor(t, "v1's claim released by the new judgement", func() bool { return f.metrics.releasedCount() == 1 })
	testutil.WaitFor(t, "the watcher idle", f.w.idle)
	if got := pol.callCount(); got != calls+1 {
		t.Fatalf("policy asked %d more times, want once (v1 only)", got-calls)
	}
	if c := f.store.claim(ref("other"), "b1"); c == nil {
		t.Fatal("the volume pred left out was released")
	}
}
