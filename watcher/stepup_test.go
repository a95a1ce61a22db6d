package watcher

import (
	"context"
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// gatedFeed holds the watcher's first blocking query (index 0, the whole
// table after the step-up list) until gate closes, so a test can order a
// step-up pass and other writers before it.
type gatedFeed struct {
	VolumeFeed
	gate chan struct{}
}

func (g gatedFeed) VolumesChangedSince(ctx context.Context, index uint64) ([]*structs.Volume, uint64, error) {
	if index == 0 {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	return g.VolumeFeed.VolumesChangedSince(ctx, index)
}

// gatedFixture is newFixture whose watcher's first blocking query waits
// for the returned gate.
func gatedFixture(t *testing.T, cfg Config) (*fixture, chan struct{}) {
	t.Helper()
	f := newFixture(t, Config{}, nil)
	gate := make(chan struct{})
	cfg.Clock, cfg.Metrics, cfg.Jitter = f.clock, f.metrics, -1
	f.w = New(cfg, Deps{Feed: gatedFeed{f.store, gate}, State: f.store, Writer: f.store, Node: f.csi, Controller: f.csi}, nil)
	return f, gate
}

// The first answer of the blocking query lists the whole table after the
// step-up list; these tests order it against the step-up passes and other
// writers (a helper's attack on the rule in volState.covers).

// TestStepUpKeepsAChangeMadeDuringItsPass: a volume on the step-up list
// whose pass has run is changed by another writer before the first
// blocking query answers: the change gets a pass of its own. Before, the
// first answer skipped every volume the step-up list had named, so the
// new claim, releasable, was not released until the periodic claim GC.
// Judged by the driver's calls: the new claim's unpublish reaches it.
func TestStepUpKeepsAChangeMadeDuringItsPass(t *testing.T) {
	f, gate := gatedFixture(t, Config{})
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.w.SetEnabled(true)
	testutil.WaitFor(t, "the step-up pass released a1", func() bool {
		return f.store.claim(ref("v1"), "a1") == nil && f.w.idle()
	})

	// Another writer claims v1 again; that allocation has ended too.
	f.store.putAlloc("b1", testNode, structs.AllocComplete)
	v, _ := f.store.Volume("default", "v1")
	v.Claims["b1"] = newClaim("b1", testNode, structs.ClaimTaken)
	f.store.putVolume(v)
	close(gate)

	testutil.WaitFor(t, "b1 unpublished on its node and released", func() bool {
		for _, c := range f.csi.callList() {
			if c.Method == mNodeUnpublish && c.Path == "/target/b1" {
				return f.store.claim(ref("v1"), "b1") == nil
			}
		}
		return false
	})
}

// TestStepUpKeepsAFailedPassBackoff: the store refuses writes. The
// step-up pass sends NodeUnpublish, its checkpoint fails, and the volume
// waits for its volume-level backoff (1 s on the clock). The first
// blocking answer then hands over v1 again, unchanged (no write
// committed, its ModifyIndex the one the pass read): it must not run
// again before the backoff. Re-running every listed volume whose pass had
// started sent the same NodeUnpublish again at once, the clock never
// moved.
func TestStepUpKeepsAFailedPassBackoff(t *testing.T) {
	check := func(t *testing.T, f *fixture) {
		t.Helper()
		testutil.WaitFor(t, "the first answer handled and the watcher settled", f.settled)
		if n := len(f.store.checkpointCalls()); n != 0 {
			t.Fatalf("%d checkpoints committed, want 0 (the store refuses writes)", n)
		}
		if n := f.csi.count(mNodeUnpublish); n != 1 {
			t.Fatalf("NodeUnpublish of a1 sent %d times with nothing committed in between and the clock not moved "+
				"(calls: %s): the first answer re-ran a volume that had not changed, bypassing the failed pass's backoff",
				n, fmtCalls(f.csi.callList()))
		}
	}

	// The step-up pass has ended (failed, backoff armed) when the first
	// answer arrives: v1 is neither queued nor running, so it is queued.
	t.Run("pass-ended", func(t *testing.T) {
		f, gate := gatedFixture(t, Config{})
		f.store.putAlloc("a1", testNode, structs.AllocComplete)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
		f.setFailWrites(structs.ErrNoLeader)
		f.w.SetEnabled(true)
		testutil.WaitFor(t, "the step-up pass failed its checkpoint", func() bool {
			return f.csi.count(mNodeUnpublish) == 1 && f.w.idle()
		})
		close(gate)
		check(t, f)
	})

	// The first answer arrives while the step-up pass is inside its
	// NodeUnpublish (what an ungated step-up does whenever the worker
	// starts before the first answer is handled): v1 is running, so it is
	// marked dirty, and finish re-queues it at once, ignoring the backoff
	// the failed pass asked for.
	t.Run("pass-running", func(t *testing.T) {
		f, gate := gatedFixture(t, Config{})
		f.store.putAlloc("a1", testNode, structs.AllocComplete)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
		f.setFailWrites(structs.ErrNoLeader)
		inCall, release := make(chan struct{}), make(chan struct{})
		var once bool
		f.csi.mu.Lock()
		f.csi.answered = map[string]func(){mNodeUnpublish: func() {
			if !once {
				once = true
				close(inCall)
			}
			<-release
		}}
		f.csi.mu.Unlock()
		idx := f.storeIndex()
		f.w.SetEnabled(true)
		<-inCall
		close(gate)
		testutil.WaitFor(t, "the first answer handled while the pass runs", func() bool { return f.w.feedIndex.Load() >= idx })
		close(release)
		check(t, f)
	})
}

// The interleavings below hold (liveness): each write leaving v1 with a
// releasable claim is released without the clock moving.

// A write while the step-up pass is inside a CSI call, before the first
// answer.
func TestStepUpHoldsWriteDuringPassBeforeFirstAnswer(t *testing.T) {
	f, gate := gatedFixture(t, Config{})
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
	ctlGate := make(chan struct{})
	started := make(chan string, 64)
	f.csi.mu.Lock()
	f.csi.gate, f.csi.started = ctlGate, started
	f.csi.mu.Unlock()
	f.w.SetEnabled(true)
	if m := <-started; m != mCtlUnpublish {
		t.Fatalf("first call %s", m)
	}
	f.store.putAlloc("b1", "n2", structs.AllocComplete)
	f.store.putNode(readyNode("n2"))
	v, _ := f.store.Volume("default", "v1")
	v.Claims["b1"] = newClaim("b1", "n2", structs.ClaimTaken)
	f.store.putVolume(v)
	close(gate)
	testutil.WaitFor(t, "first answer handled", func() bool { return f.w.feedIndex.Load() > 0 })
	close(ctlGate)
	testutil.WaitFor(t, "b1 released", func() bool {
		return f.store.claim(ref("v1"), "b1") == nil && f.store.claim(ref("v1"), "a1") == nil && f.settled()
	})
}

// A write while v1's step-up pass is still queued (the only worker is busy
// with v0), the first answer handled before it starts.
func TestStepUpHoldsWriteWhileQueued(t *testing.T) {
	f, gate := gatedFixture(t, Config{MaxConcurrency: 1})
	f.store.putAlloc("a0", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v0", newClaim("a0", testNode, structs.ClaimNodeDetached)))
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
	ctlGate := make(chan struct{})
	f.csi.mu.Lock()
	f.csi.gate = ctlGate
	f.csi.mu.Unlock()
	f.w.SetEnabled(true)
	testutil.WaitFor(t, "v0's controller call in flight", func() bool { return f.csi.count(mCtlUnpublish) == 1 })
	f.store.putAlloc("b1", "n2", structs.AllocComplete)
	f.store.putNode(readyNode("n2"))
	v, _ := f.store.Volume("default", "v1")
	v.Claims["b1"] = newClaim("b1", "n2", structs.ClaimTaken)
	f.store.putVolume(v)
	idx := f.storeIndex()
	close(gate)
	testutil.WaitFor(t, "first answer handled", func() bool { return f.w.feedIndex.Load() >= idx })
	close(ctlGate)
	testutil.WaitFor(t, "everything released", func() bool {
		return f.store.claim(ref("v1"), "b1") == nil && f.store.claim(ref("v1"), "a1") == nil &&
			f.store.claim(ref("v0"), "a0") == nil && f.settled()
	})
	if n := f.csi.count(mCtlUnpublish); n != 3 {
		t.Fatalf("%d controller calls, want 3 (%s)", n, fmtCalls(f.csi.callList()))
	}
}

// A new term at once: step down, a write, step up.
func TestStepUpHoldsQuickNewTerm(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.w.SetEnabled(true)
	f.w.SetEnabled(false)
	f.store.putAlloc("b1", testNode, structs.AllocComplete)
	v, _ := f.store.Volume("default", "v1")
	v.Claims["b1"] = newClaim("b1", testNode, structs.ClaimTaken)
	f.store.putVolume(v)
	f.w.SetEnabled(true)
	f.w.SetEnabled(false)
	f.w.SetEnabled(true)
	testutil.WaitFor(t, "both released", func() bool {
		return f.store.claim(ref("v1"), "a1") == nil && f.store.claim(ref("v1"), "b1") == nil
	})
	// Exactly one NodeUnpublish per claim target unless a step-down
	// cancelled one mid-call (they are not blocked here, so a repeat
	// would only follow a cancelled, unrecorded call).
	t.Logf("calls: %s", fmtCalls(f.csi.callList()))
}

// restoringFeed answers its next query after restore is set as a restore
// does: every volume and an index lower than asked.
type restoringFeed struct {
	*fakeStore
	restore chan struct{} // closed: the next answer is a restore
	done    bool
}

func (r *restoringFeed) VolumesChangedSince(ctx context.Context, index uint64) ([]*structs.Volume, uint64, error) {
	vols, next, err := r.fakeStore.VolumesChangedSince(ctx, index)
	if err != nil || index == 0 || r.done {
		return vols, next, err
	}
	select {
	case <-r.restore:
		r.done = true
		all, _, err := r.fakeStore.VolumesChangedSince(ctx, 0)
		return all, 1, err
	default:
		return vols, next, err
	}
}

// A restore answer (index lower than asked) after step-up, then a write.
func TestStepUpHoldsRestore(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	feed := &restoringFeed{fakeStore: f.store, restore: make(chan struct{})}
	f.w = New(Config{Clock: f.clock, Metrics: f.metrics, Jitter: -1},
		Deps{Feed: feed, State: f.store, Writer: f.store, Node: f.csi, Controller: f.csi}, nil)
	f.store.putAlloc("a1", testNode, structs.AllocRunning)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.enable(t)
	close(feed.restore)
	f.store.putAlloc("a1", testNode, structs.AllocComplete) // no volume write
	f.store.putVolume(newVolume("other"))                   // wakes the query: the restore answer
	testutil.WaitFor(t, "a1 released after the restore", func() bool { return f.store.claim(ref("v1"), "a1") == nil })
	f.store.putAlloc("b1", testNode, structs.AllocComplete)
	v, _ := f.store.Volume("default", "v1")
	v.Claims["b1"] = newClaim("b1", testNode, structs.ClaimTaken)
	f.store.putVolume(v)
	testutil.WaitFor(t, "b1 released after the restore", func() bool { return f.store.claim(ref("v1"), "b1") == nil && f.settled() })
}
