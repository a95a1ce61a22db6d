package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/internal/testutil"
)

// TestCheckPolicyResponse covers the answer checks on both sides of the
// 64-claim switch from the bit set to the index.
func TestCheckPolicyResponse(t *testing.T) {
	decision := func(alloc string) abi.Decision {
		return abi.Decision{AllocID: alloc, Action: abi.ActionRelease}
	}
	for _, n := range []int{2, 8, 64, 65, 200} {
		req := volumeRequest(n)
		last := fmt.Sprintf("alloc-%d", n-1)
		all := make([]abi.Decision, n)
		for i := range all {
			all[i] = decision(req.Claims[i].AllocID)
		}
		cases := []struct {
			name      string
			decisions []abi.Decision
			want      string // "" for valid
		}{
			{"none", nil, ""},
			{"every claim", all, ""},
			{"the last claim", []abi.Decision{decision(last)}, ""},
			{"unknown alloc", []abi.Decision{decision("alloc-x")}, `decision for alloc "alloc-x", which is not a claim`},
			{"two for the last claim", []abi.Decision{decision(last), decision(last)}, fmt.Sprintf("two decisions for alloc %q", last)},
			{"more than claims", append(all[:n:n], decision(last)), fmt.Sprintf("%d decisions for %d claims", n+1, n)},
			{"unknown action", []abi.Decision{{AllocID: last, Action: 7}}, "unknown action 7"},
			{"negative wait", []abi.Decision{{AllocID: last, Action: abi.ActionWait, RetryAfterMs: -1}}, "negative retry_after_ms -1"},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%d claims/%s", n, tc.name), func(t *testing.T) {
				err := checkPolicyResponse(req, &abi.PolicyResponse{Decisions: tc.decisions})
				switch {
				case tc.want == "" && err != nil:
					t.Fatalf("refused: %v", err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Fatalf("error %v, want one with %q", err, tc.want)
				}
			})
		}
	}
	// Two claims with one alloc ID: one decision is answered for both, a
	// second is a duplicate (as when the check was by alloc ID).
	req := &abi.PolicyRequest{Claims: []abi.ClaimView{{AllocID: "a"}, {AllocID: "b"}, {AllocID: "a"}}}
	if err := checkPolicyResponse(req, &abi.PolicyResponse{Decisions: []abi.Decision{{AllocID: "a", Action: abi.ActionWait}, {AllocID: "a", Action: abi.ActionWait}}}); err == nil || !strings.Contains(err.Error(), "two decisions") {
		t.Fatalf("duplicate alloc ID: %v", err)
	}
}

// timerInstance checks out the one instance of a serving module with a
// 10 s call timeout, for the timer tests; it is checked in at the test's end.
func timerInstance(t *testing.T) *instance {
	wasm := exampleWasm(t, "as-default-policy")
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "p", wasm, manifest("release-policy", "limits {\n pool_size = 1\n call_timeout = \"10s\"\n}\n"))
	}, nil)
	g := (*e.m.modules.Load())["p"].cur.Load()
	if g == nil {
		t.Fatal("module p is not serving")
	}
	inst, err := g.checkout(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.checkin(inst, true) })
	return inst
}

// TestTimerStaleFire: an instance's call timer is reset per call, so its
// function may run for an earlier call after a later one armed it; it must
// stop only a call whose own deadline has passed (the per-instance
// timer), and a stop must read as that call's timeout.
func TestTimerStaleFire(t *testing.T) {
	ctx := context.Background()
	inst := timerInstance(t)
	if err := inst.armTimer(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	inst.expire() // a fire left over from an earlier call
	if inst.interrupted() || (*timerBound)(inst).Err() != nil {
		t.Fatalf("a stale fire stopped a call an hour from its deadline")
	}
	inst.flagMu.Lock()
	inst.deadline = time.Now().Add(-time.Millisecond) // this call's deadline passed
	inst.flagMu.Unlock()
	inst.expire()
	if !inst.interrupted() || !errors.Is((*timerBound)(inst).Err(), context.DeadlineExceeded) {
		t.Fatalf("the call's own deadline passed and it was not stopped")
	}
	inst.disarmTimer()
	if inst.interrupted() {
		t.Fatal("the flag outlived the call")
	}
	inst.expire() // after the call: nothing is armed
	if inst.interrupted() {
		t.Fatal("a fire between calls set the flag")
	}
}

// TestWatchStopsOnlyItsContext: the watch of a decision call's context
// stops only a call on that context, so the function of a watch that was
// ended or moved just as its context ended, still to run when the next
// call arms on another context, does not stop that call (the kept watch,
// which keeps a watch registered while its instance is idle, makes this
// possible).
func TestWatchStopsOnlyItsContext(t *testing.T) {
	inst := timerInstance(t)
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if err := inst.armTimer(ctx2, time.Hour); err != nil {
		t.Fatal(err)
	}
	inst.interruptFor(ctx1.Done()) // a late function of ctx1's old watch
	if inst.interrupted() {
		t.Fatal("the watch of another context stopped the call")
	}
	inst.interruptFor(ctx2.Done())
	if !inst.interrupted() {
		t.Fatal("the watch of the call's own context did not stop it")
	}
	inst.disarmTimer()
	inst.interruptFor(ctx2.Done()) // between calls: nothing is armed
	if inst.interrupted() {
		t.Fatal("a watch's function between calls set the flag")
	}
}

// TestTimerPendingAcrossCalls: the call timer stays pending between calls
// and is reset only when no fire is due by the armed call's deadline
// (a Reset and a Stop per call were a large part of a call's host side:
// BenchmarkHostPath). A fire due after a shorter call's deadline must not delay its
// stop, and a fire for an earlier call must re-arm for the current one.
func TestTimerPendingAcrossCalls(t *testing.T) {
	ctx := context.Background()
	inst := timerInstance(t)
	fireAt := func() (bool, time.Time, time.Time) {
		inst.flagMu.Lock()
		defer inst.flagMu.Unlock()
		return inst.pending, inst.fireAt, inst.deadline
	}

	// A second call with a later deadline keeps the first call's fire.
	if err := inst.armTimer(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	_, first, _ := fireAt()
	inst.disarmTimer()
	if pending, at, _ := fireAt(); !pending || !at.Equal(first) {
		t.Fatalf("after the call: pending %v at %v, want the call's fire at %v still pending", pending, at, first)
	}
	if err := inst.armTimer(ctx, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	if pending, at, _ := fireAt(); !pending || !at.Equal(first) {
		t.Fatalf("a later deadline reset the timer: pending %v at %v, want %v", pending, at, first)
	}
	// That fire, when it comes, re-arms for the current call's deadline.
	inst.expire()
	if pending, at, deadline := fireAt(); !pending || !at.Equal(deadline) || inst.interrupted() {
		t.Fatalf("a fire for an earlier call: pending %v at %v (deadline %v), interrupted %v", pending, at, deadline, inst.interrupted())
	}
	inst.disarmTimer()

	// A call whose deadline is before the pending fire resets it, and is
	// stopped at its own deadline.
	if err := inst.armTimer(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, at, deadline := fireAt(); !at.Equal(deadline) {
		t.Fatalf("a shorter deadline kept the fire at %v, after its deadline %v", at, deadline)
	}
	testutil.WaitFor(t, "the timer to stop the call", func() bool { return inst.interrupted() })
	if !errors.Is((*timerBound)(inst).Err(), context.DeadlineExceeded) {
		t.Fatal("the stop does not read as the call's timeout")
	}
	inst.disarmTimer()
	if pending, _, _ := fireAt(); pending {
		t.Fatal("the fire that stopped the call left the timer marked pending")
	}
}
