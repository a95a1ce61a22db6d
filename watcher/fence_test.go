package watcher

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher/attach"
)

// fakeLeadership confirms a term only while ok is set.
type fakeLeadership struct {
	term uint64
	ok   atomic.Bool
}

func (l *fakeLeadership) ReadyTerm() uint64 { return l.term }

func (l *fakeLeadership) ConfirmLeader(_ context.Context, term uint64) error {
	if !l.ok.Load() || term != l.term {
		return fmt.Errorf("term %d not confirmed: %w", term, structs.ErrNoLeader)
	}
	return nil
}

// The failover fence: no CSI call leaves a server whose leadership of the
// pass's term cannot be confirmed (a paused leader that woke up), and the
// claim is left exactly as checkpointed for the next leader; every
// checkpoint carries the term, for the FSM's fence.
func TestCSICallsNeedConfirmedLeadership(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	lead := &fakeLeadership{term: 7}
	f.w.deps.Leadership = lead
	f.w.term = 7 // what SetEnabled(true) reads from ReadyTerm; passes run by hand here
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))

	_, err := f.w.assess(context.Background(), ref("v1"))
	if !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("pass without confirmed leadership: %v, want ErrNoLeader", err)
	}
	if calls := f.csi.callList(); len(calls) != 0 {
		t.Fatalf("CSI calls sent without confirmed leadership: %s", fmtCalls(calls))
	}
	if c := f.store.claim(ref("v1"), "a1"); c.State != structs.ClaimTaken || c.Attempts != 0 || c.LastError != nil {
		t.Fatalf("claim %s attempts %d error %v: a fence is not the claim's failure", c.State, c.Attempts, c.LastError)
	}

	lead.ok.Store(true)
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if c := f.store.claim(ref("v1"), "a1"); c != nil {
		t.Fatalf("claim %s after confirmed leadership, want released", c.State)
	}
	cks := f.store.checkpointCalls()
	if len(cks) == 0 {
		t.Fatal("no checkpoints")
	}
	for _, ck := range cks {
		if ck.Term != 7 {
			t.Fatalf("checkpoint at %s carries term %d, want 7", ck.Claim.State, ck.Term)
		}
	}
}

// stuckNode is a node plugin whose NodeUnpublish ignores cancellation
// until released: a driver that is slow to give up.
type stuckNode struct {
	attach.NodeRelease
	entered chan struct{}
	release chan struct{}
}

func (n *stuckNode) NodeUnpublishVolume(context.Context, string, *csipb.NodeUnpublishVolumeRequest) error {
	close(n.entered)
	<-n.release
	return nil
}

// A step-down waits for an operator's detach as for the
// watcher's own passes; it returns only once the detach's CSI call has.
func TestStepDownWaitsForDetach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		node := &stuckNode{NodeRelease: f.csi, entered: make(chan struct{}), release: make(chan struct{})}
		f.w.deps.Node = node
		f.w.SetEnabled(true)
		f.store.putAlloc("a1", testNode, structs.AllocComplete)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))

		detached := make(chan struct{})
		go func() {
			defer close(detached)
			_, _ = f.w.Detach(context.Background(), "default", "v1", testNode)
		}()
		<-node.entered
		var disabled atomic.Bool
		go func() {
			f.w.SetEnabled(false)
			disabled.Store(true)
		}()
		synctest.Wait()
		if disabled.Load() {
			t.Fatal("step-down returned while a detach was still in a CSI call")
		}
		close(node.release)
		<-detached
		synctest.Wait()
		if !disabled.Load() {
			t.Fatal("step-down did not return once the detach had")
		}
	})
}

// A step-up whose enable reads no term (a step-down landed between the
// leader signal and the enable) does not start the watcher: its passes
// would stamp term 0, which the FSM takes as unfenced, on the checkpoints
// that need no CSI call and so are never confirmed (a hold, an abandon).
// The next step-up enables it under its own term, and every checkpoint
// carries that term.
func TestEnableWithoutTermStaysDisabled(t *testing.T) {
	f, _ := newAgentFixture(t, agents{})
	lead := &fakeLeadership{} // ReadyTerm 0: no longer leading
	lead.ok.Store(true)
	f.w.deps.Leadership = lead
	// A claim the host holds, with no CSI call, while its node's agent
	// is heartbeat-lost.
	f.store.putNode(agentNode(structs.NodeDown, true, nil))
	f.store.putAlloc("a1", testNode, structs.AllocFailed)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))

	f.w.SetEnabled(true)
	if f.w.Enabled() {
		t.Fatal("the watcher enabled without a leadership term")
	}
	f.w.SetEnabled(false) // the step-down's own signal

	lead.term = 8
	f.enable(t)
	defer f.w.SetEnabled(false)
	testutil.WaitFor(t, "the step-up pass's hold", func() bool {
		c := f.store.claim(ref("v1"), "a1")
		return c != nil && c.Hold != nil
	})
	for _, ck := range f.store.checkpointCalls() {
		if ck.Term != 8 {
			t.Fatalf("checkpoint (hold %v) carries term %d, want 8", ck.Claim.Hold != nil, ck.Term)
		}
	}
}
