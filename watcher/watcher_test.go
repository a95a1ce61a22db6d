package watcher

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// TestStepDownCancelsAndResumes: disabling mid-release cancels the in-flight
// CSI call, leaves the claim as checkpointed (no failure recorded), and a
// re-enable resumes from that state without repeating finished steps.
func TestStepDownCancelsAndResumes(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.csi.setBlock(mCtlUnpublish, true)
	started := make(chan string, 16)
	f.csi.mu.Lock()
	f.csi.started = started
	f.csi.mu.Unlock()

	f.w.SetEnabled(true)
	if !f.w.Enabled() {
		t.Fatal("not enabled")
	}
	deadline := time.After(20 * time.Second)
	for m := ""; m != mCtlUnpublish; {
		select {
		case m = <-started:
		case <-deadline:
			t.Fatal("controller call never started")
		}
	}
	f.w.SetEnabled(false) // returns once every goroutine has exited
	f.csi.mu.Lock()
	ctxErrs := slices.Clone(f.csi.ctxErrs)
	f.csi.started = nil
	f.csi.mu.Unlock()
	if len(ctxErrs) != 1 || !errors.Is(ctxErrs[0], context.Canceled) {
		t.Fatalf("in-flight call saw %v, want context.Canceled", ctxErrs)
	}
	if !f.w.idle() {
		t.Fatal("workers still running after SetEnabled(false)")
	}
	c := f.store.claim(ref("v1"), "a1")
	if c.State != structs.ClaimNodeDetached || c.Attempts != 0 || c.LastError != nil {
		t.Fatalf("claim after step-down = %s attempts %d err %+v, want node-detached untouched", c.State, c.Attempts, c.LastError)
	}
	if _, err := f.w.Detach(context.Background(), "default", "v1", testNode); !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("detach while disabled: %v, want ErrNoLeader", err)
	}

	f.csi.setBlock(mCtlUnpublish, false)
	f.w.SetEnabled(true)
	testutil.WaitFor(t, "claim released after re-enable", func() bool { return f.store.claim(ref("v1"), "a1") == nil })
	if n := f.csi.count(mNodeUnpublish); n != 1 {
		t.Fatalf("NodeUnpublish called %d times, want 1 (resume at node-detached)", n)
	}
	if n := f.csi.count(mCtlUnpublish); n != 2 {
		t.Fatalf("ControllerUnpublish called %d times, want 2 (cancelled + resumed)", n)
	}
}

// TestOnlyChangedVolumesEnqueued: step-up assesses the releasable volumes
// only; afterwards only volumes whose index moved get a pass.
func TestOnlyChangedVolumesEnqueued(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	for i := range 5 {
		id := fmt.Sprintf("live%d", i)
		f.store.putAlloc("a-"+id, testNode, structs.AllocRunning)
		f.store.putVolume(newVolume(id, newClaim("a-"+id, testNode, structs.ClaimTaken)))
	}
	for _, id := range []string{"r1", "r2"} {
		f.store.putAlloc("a-"+id, testNode, structs.AllocComplete)
		f.store.putVolume(newVolume(id, newClaim("a-"+id, testNode, structs.ClaimTaken)))
	}
	f.store.putVolume(newVolume("empty"))
	f.enable(t)
	testutil.WaitFor(t, "releasable volumes released", func() bool {
		return f.store.claim(ref("r1"), "a-r1") == nil && f.store.claim(ref("r2"), "a-r2") == nil
	})
	testutil.WaitFor(t, "idle", f.w.idle)
	for i := range 5 {
		if n := f.metrics.get(ref(fmt.Sprintf("live%d", i))); n != 0 {
			t.Fatalf("live%d assessed %d times on step-up, want 0", i, n)
		}
	}
	f.store.touch(ref("live3"))
	testutil.WaitFor(t, "live3 assessed", func() bool { return f.metrics.get(ref("live3")) == 1 })
	testutil.WaitFor(t, "idle", f.w.idle)
	for _, id := range []string{"live0", "live1", "live2", "live4", "empty"} {
		if n := f.metrics.get(ref(id)); n != 0 {
			t.Fatalf("%s assessed %d times, want 0 (index did not move)", id, n)
		}
	}
}

// TestGCWakesWatcher: an allocation that ended without a volume write is
// found by the GC claim (explicit and periodic), whose index bump wakes the
// watcher.
func TestGCWakesWatcher(t *testing.T) {
	t.Run("system-gc", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		f.store.putAlloc("a1", testNode, structs.AllocRunning)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
		f.enable(t)
		f.store.touch(ref("v1"))
		testutil.WaitFor(t, "first pass", func() bool { return f.metrics.get(ref("v1")) == 1 })
		f.store.putAlloc("a1", testNode, structs.AllocComplete) // no volume bump
		n, err := f.w.GC(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("GC = %d, %v; want 1 volume", n, err)
		}
		testutil.WaitFor(t, "release after GC", func() bool { return f.store.claim(ref("v1"), "a1") == nil })
	})
	t.Run("periodic", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		f.store.putAlloc("a1", testNode, structs.AllocRunning)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
		f.enable(t)
		// Nothing is releasable, so the only clock waiter is the GC ticker.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := f.clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal("GC ticker never armed")
		}
		f.store.putAlloc("a1", testNode, structs.AllocComplete) // ModifyTime t0
		f.clock.Advance(DefaultGCInterval - time.Second)
		f.clock.Advance(time.Second)
		testutil.WaitFor(t, "release after periodic GC", func() bool { return f.store.claim(ref("v1"), "a1") == nil })
		f.store.mu.Lock()
		gcs := len(f.store.gcs)
		f.store.mu.Unlock()
		if gcs != 1 {
			t.Fatalf("%d GC writes, want 1", gcs)
		}
	})
}

// TestIdleVolumesHoldNoGoroutine: the goroutine count with 1,000 assessed
// idle volumes equals that with 10; their bookkeeping is dropped after
// IdleTimeout.
func TestIdleVolumesHoldNoGoroutine(t *testing.T) {
	measure := func(n int) int {
		f := newFixture(t, Config{}, nil)
		for i := range n {
			id := fmt.Sprintf("v%d", i)
			f.store.putAlloc("a-"+id, testNode, structs.AllocRunning)
			f.store.putVolume(newVolume(id, newClaim("a-"+id, testNode, structs.ClaimTaken)))
		}
		f.enable(t)
		for i := range n {
			f.store.touch(ref(fmt.Sprintf("v%d", i)))
		}
		testutil.WaitFor(t, "all assessed", func() bool { return f.metrics.distinct() == n })
		testutil.WaitFor(t, "idle", f.w.idle)
		g := runtime.NumGoroutine()
		if got := f.w.trackedVolumes(); got != n {
			t.Fatalf("tracked %d volumes, want %d before the idle timeout", got, n)
		}
		f.clock.Advance(DefaultIdleTimeout)
		testutil.WaitFor(t, "idle bookkeeping dropped", func() bool { return f.w.trackedVolumes() == 0 })
		f.w.SetEnabled(false)
		return g
	}
	g10 := measure(10)
	g1000 := measure(1000)
	t.Logf("goroutines while idle: 10 volumes %d, 1000 volumes %d", g10, g1000)
	if g1000-g10 > 3 {
		t.Fatalf("goroutines grow with idle volumes: %d (10) vs %d (1000)", g10, g1000)
	}
}

// TestConcurrencyLimits: controller calls per plugin never exceed
// ControllerConcurrency, and volumes worked at once never exceed
// MaxConcurrency.
func TestConcurrencyLimits(t *testing.T) {
	for _, tc := range []struct {
		maxConc, ctlConc, want int
	}{
		{16, 1, 1},
		{16, 3, 3},
		{2, 16, 2},
	} {
		t.Run(fmt.Sprintf("max%d-ctl%d", tc.maxConc, tc.ctlConc), func(t *testing.T) {
			f := newFixture(t, Config{MaxConcurrency: tc.maxConc, ControllerConcurrency: tc.ctlConc}, nil)
			gate := make(chan struct{})
			f.csi.mu.Lock()
			f.csi.gate = gate
			f.csi.mu.Unlock()
			const n = 20
			for i := range n {
				id := fmt.Sprintf("v%d", i)
				f.store.putAlloc("a-"+id, testNode, structs.AllocComplete)
				f.store.putVolume(newVolume(id, newClaim("a-"+id, testNode, structs.ClaimNodeDetached)))
			}
			f.w.SetEnabled(true)
			inFlight := func() int {
				f.csi.mu.Lock()
				defer f.csi.mu.Unlock()
				return f.csi.inFlight[ctlEP]
			}
			testutil.WaitFor(t, "calls in flight", func() bool { return inFlight() == tc.want })
			close(gate)
			testutil.WaitFor(t, "all released", func() bool { return f.metrics.releasedCount() == n })
			f.csi.mu.Lock()
			maxSeen := f.csi.maxFlight[ctlEP]
			f.csi.mu.Unlock()
			if maxSeen != tc.want {
				t.Fatalf("max controller calls in flight = %d, want %d", maxSeen, tc.want)
			}
		})
	}
}

// waitPolicy always waits: the watcher itself never releases, so Detach's
// own behaviour is observable.
type waitPolicy struct{}

func (waitPolicy) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	resp := &abi.PolicyResponse{}
	for _, c := range req.Claims {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait})
	}
	return resp, nil
}

// TestDetach: refused with a clear conflict naming the live allocation on
// that node, nothing written; otherwise the node's claims are released now.
func TestDetach(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, Config{}, testModules{policy: waitPolicy{}})
	f.store.putNode(readyNode("n2"))
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putAlloc("a2", testNode, structs.AllocRunning)
	f.store.putAlloc("b1", "n2", structs.AllocComplete)
	inBackoff := newClaim("a1", testNode, structs.ClaimTaken)
	inBackoff.Attempts, inBackoff.NextAttempt, inBackoff.FirstFailure = 3, t0.Add(time.Hour), t0
	f.store.putVolume(newVolume("v1", inBackoff, newClaim("a2", testNode, structs.ClaimTaken), newClaim("b1", "n2", structs.ClaimTaken)))
	f.w.SetEnabled(true)
	// The step-up pass records the policy's hold on b1, the one due
	// releasable claim (a hold is visible); wait for it, so what
	// the refused detach writes is counted alone.
	testutil.WaitFor(t, "the step-up pass's hold", func() bool {
		c := f.store.claim(ref("v1"), "b1")
		return c != nil && c.Hold != nil && f.settled()
	})
	before := len(f.store.checkpointStates())

	_, err := f.w.Detach(ctx, "default", "v1", testNode)
	if !errors.Is(err, structs.ErrConflict) || !strings.Contains(err.Error(), "a2 (running)") {
		t.Fatalf("detach with live alloc: %v, want conflict naming a2", err)
	}
	// The IDs are quoted, as in every other message (a bare ID ran into the prose).
	if want := fmt.Sprintf("volume %q is in use on node %q", "default/v1", testNode); !strings.Contains(err.Error(), want) {
		t.Fatalf("detach with live alloc: %v, want %q", err, want)
	}
	if n := len(f.store.checkpointStates()) - before; n != 0 || len(f.csi.callList()) != 0 {
		t.Fatalf("refused detach wrote %d checkpoints and made %d calls", n, len(f.csi.callList()))
	}
	for _, tc := range []struct{ ns, vol, node string }{{"default", "nope", testNode}, {"default", "v1", "nope"}} {
		if _, err := f.w.Detach(ctx, tc.ns, tc.vol, tc.node); !errors.Is(err, structs.ErrNotFound) {
			t.Fatalf("detach %s/%s on %s: %v, want not found", tc.ns, tc.vol, tc.node, err)
		}
	}
	var ve *structs.ValidationError
	if _, err := f.w.Detach(ctx, "default", "v1", ""); !errors.As(err, &ve) || ve.Field != "node_id" {
		t.Fatalf("detach with empty node: %v, want validation error on node_id", err)
	}

	// n2's claim: released now, whatever the policy says.
	res, err := f.w.Detach(ctx, "default", "v1", "n2")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Released, []string{"b1"}) || len(res.Claims) != 1 || res.Claims[0].State != structs.ClaimReadyToFree {
		t.Fatalf("detach n2 = %+v", res)
	}
	// a2 ends: n1's claims (one in backoff) are released now.
	f.store.putAlloc("a2", testNode, structs.AllocComplete)
	res, err = f.w.Detach(ctx, "default", "v1", testNode)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Released, []string{"a1", "a2"}) {
		t.Fatalf("released %v, want [a1 a2]", res.Released)
	}
	want := []string{mNodeUnpublish, mNodeUnstage, mCtlUnpublish, mNodeUnpublish, mNodeUnpublish, mNodeUnstage, mCtlUnpublish}
	if got := f.csi.methods(); !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
}

// TestRateLimit: the optional per-volume limiter defers passes with a clock
// wake-up instead of parking a goroutine.
func TestRateLimit(t *testing.T) {
	f := newFixture(t, Config{VolumeRateLimit: 1, VolumeRateBurst: 1}, nil)
	f.store.putAlloc("a1", testNode, structs.AllocRunning)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.enable(t)
	f.store.touch(ref("v1"))
	testutil.WaitFor(t, "first pass", func() bool { return f.metrics.get(ref("v1")) == 1 })
	testutil.WaitFor(t, "idle", f.w.idle)
	f.store.touch(ref("v1"))
	testutil.WaitFor(t, "deferred", f.w.idle)
	if n := f.metrics.get(ref("v1")); n != 1 {
		t.Fatalf("%d passes within the rate limit, want 1", n)
	}
	f.clock.Advance(time.Second)
	testutil.WaitFor(t, "second pass after the limiter's delay", func() bool { return f.metrics.get(ref("v1")) == 2 })
}

// TestStoreFailureRetried: a pass that fails on a log write (not the
// claim's fault) is retried after a volume-level backoff on the clock.
func TestStoreFailureRetried(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.store.mu.Lock()
	f.store.failWrites = structs.ErrNoLeader
	f.store.mu.Unlock()
	f.w.SetEnabled(true)
	// At least one: enabling and the store's first change are two wakes,
	// and a pass that fails fast may run for each (it was == 1, which
	// the second pass sometimes passed over between two polls).
	testutil.WaitFor(t, "failed pass", func() bool { return f.csi.count(mNodeUnpublish) >= 1 })
	testutil.WaitFor(t, "idle", f.w.idle)
	if c := f.store.claim(ref("v1"), "a1"); c.State != structs.ClaimTaken || c.Attempts != 0 {
		t.Fatalf("claim = %s attempts %d, want untouched", c.State, c.Attempts)
	}
	f.store.mu.Lock()
	f.store.failWrites = nil
	f.store.mu.Unlock()
	if f.store.claim(ref("v1"), "a1") == nil {
		t.Fatal("released before the clock reached the retry's backoff")
	}
	// The backoff after one failure or two: one base, or two.
	f.clock.Advance(2 * DefaultBackoffBase)
	testutil.WaitFor(t, "release after the retry", func() bool { return f.store.claim(ref("v1"), "a1") == nil })
}
