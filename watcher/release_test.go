package watcher

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/watcher/attach"
)

// TestReleaseStateMachine drives one claim from every starting state through
// every CSI outcome at every step and checks the resulting claim, the CSI
// calls in order, the checkpoints written and the stuck mark.
func TestReleaseStateMachine(t *testing.T) {
	type outcome struct {
		name     string
		err      error
		fatal    bool
		retrying bool
	}
	outcomes := []outcome{
		{name: "OK"},
		{name: "NotFound", err: status.Error(codes.NotFound, "no such volume"), retrying: true},
		{name: "Aborted", err: status.Error(codes.Aborted, "operation pending"), retrying: true},
		{name: "Unavailable", err: status.Error(codes.Unavailable, "driver down"), retrying: true},
		{name: "DeadlineExceeded", err: status.Error(codes.DeadlineExceeded, "slow"), retrying: true},
		{name: "Internal", err: status.Error(codes.Internal, "boom"), retrying: true},
		{name: "Unimplemented", err: status.Error(codes.Unimplemented, "nope"), fatal: true},
	}
	type step struct {
		start    structs.ClaimState
		failAt   string   // the CSI method that returns the outcome
		calls    []string // calls made up to and including failAt
		allCalls []string // calls made when everything succeeds
		// stays is the claim state after a failure at failAt.
		stays structs.ClaimState
		// okStates are the checkpoints when everything succeeds.
		okStates []structs.ClaimState
		// failStates are the checkpoints before the failure's own one.
		failStates []structs.ClaimState
		// failMark is how the failure's own checkpoint shows (default stays).
		failMark structs.ClaimState
	}
	all := []string{mNodeUnpublish, mNodeUnstage, mCtlUnpublish}
	full := []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree}
	// The node plugin stages: NodeUnpublish's success is committed before
	// NodeUnstage runs (exactly one NodeUnpublish), one write more than a claim without an
	// unstage to follow (TestNodeUnpublishedOnlyBeforeUnstage).
	staged := append([]structs.ClaimState{unpublishedMark}, full...)
	steps := []step{
		{start: structs.ClaimTaken, failAt: mNodeUnpublish, calls: all[:1], allCalls: all,
			stays: structs.ClaimTaken, okStates: staged},
		{start: structs.ClaimTaken, failAt: mNodeUnstage, calls: all[:2], allCalls: all,
			stays: structs.ClaimTaken, okStates: staged, failStates: staged[:1], failMark: unpublishedMark},
		{start: structs.ClaimTaken, failAt: mCtlUnpublish, calls: all, allCalls: all,
			stays: structs.ClaimNodeDetached, okStates: staged, failStates: staged[:2]},
		{start: structs.ClaimNodeDetached, failAt: mCtlUnpublish, calls: all[2:], allCalls: all[2:],
			stays: structs.ClaimNodeDetached, okStates: full[1:]},
		// controller-detached makes no CSI call: every outcome ends released.
		{start: structs.ClaimControllerDetached, failAt: "", calls: nil, allCalls: nil,
			okStates: full[2:]},
	}
	for _, st := range steps {
		for _, oc := range outcomes {
			name := string(st.start) + "/" + st.failAt + "/" + oc.name
			if st.failAt == "" {
				name = string(st.start) + "/" + oc.name
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, Config{}, nil)
				r := ref("v1")
				f.store.putAlloc("a1", testNode, structs.AllocComplete)
				f.store.putVolume(newVolume("v1", newClaim("a1", testNode, st.start)))
				if st.failAt != "" {
					f.csi.setScript(st.failAt, oc.err)
				}
				wake, err := f.w.assess(context.Background(), r)
				if err != nil {
					t.Fatalf("assess: %v", err)
				}
				failed := st.failAt != "" && oc.err != nil
				c := f.store.claim(r, "a1")
				if !failed {
					if got := f.csi.methods(); !slices.Equal(got, st.allCalls) {
						t.Fatalf("calls = %v, want %v", got, st.allCalls)
					}
					if c != nil {
						t.Fatalf("claim still present at %s, want removed at ready-to-free", c.State)
					}
					if got := f.store.checkpointStates(); !slices.Equal(got, st.okStates) {
						t.Fatalf("checkpoints = %v, want %v", got, st.okStates)
					}
					if !wake.IsZero() {
						t.Fatalf("wake = %v, want none", wake)
					}
					return
				}
				if got := f.csi.methods(); !slices.Equal(got, st.calls) {
					t.Fatalf("calls = %v, want %v", got, st.calls)
				}
				if c == nil {
					t.Fatal("claim released despite a failed step")
				}
				if c.State != st.stays {
					t.Errorf("state = %s, want %s", c.State, st.stays)
				}
				if c.Attempts != 1 || !c.FirstFailure.Equal(t0) {
					t.Errorf("attempts = %d first failure = %v, want 1 at %v", c.Attempts, c.FirstFailure, t0)
				}
				wantCode, _ := status.FromError(oc.err)
				if c.LastError == nil || c.LastError.Kind != structs.ErrorCSI || codes.Code(c.LastError.Code) != wantCode.Code() ||
					c.LastError.CodeName != wantCode.Code().String() || c.LastError.Fatal != oc.fatal {
					t.Fatalf("last error = %+v, want csi %s fatal=%v", c.LastError, wantCode.Code(), oc.fatal)
				}
				wantStep := map[string]string{mNodeUnpublish: StepNodeUnpublish, mNodeUnstage: StepNodeUnstage, mCtlUnpublish: StepControllerUnpublish}[st.failAt]
				if c.LastError.Step != wantStep {
					t.Errorf("last error step = %q, want %q", c.LastError.Step, wantStep)
				}
				wantDelay := DefaultBackoffBase
				if oc.fatal {
					wantDelay = DefaultBackoffMax
				}
				if !c.NextAttempt.Equal(t0.Add(wantDelay)) || !wake.Equal(c.NextAttempt) {
					t.Errorf("next attempt = %v wake = %v, want %v", c.NextAttempt, wake, t0.Add(wantDelay))
				}
				mark := st.stays
				if st.failMark != "" {
					mark = st.failMark
				}
				wantStates := append(slices.Clone(st.failStates), mark)
				if got := f.store.checkpointStates(); !slices.Equal(got, wantStates) {
					t.Errorf("checkpoints = %v, want %v (one write per failed attempt)", got, wantStates)
				}
				stuck := f.store.stuck(r)
				if oc.fatal != (stuck != nil) {
					t.Fatalf("stuck = %+v, want stuck=%v", stuck, oc.fatal)
				}
				if stuck != nil && (stuck.Reason != ReasonFatal || stuck.AllocID != "a1" || stuck.Code != uint32(codes.Unimplemented) || stuck.Attempts != 1) {
					t.Errorf("stuck = %+v", stuck)
				}
			})
		}
	}
}

// TestRetryAfterBackoff: a failed claim is not retried before NextAttempt,
// is retried by the wake-up when the clock reaches it, and success resets
// the failure bookkeeping.
func TestRetryAfterBackoff(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	r := ref("v1")
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
	f.csi.setScript(mCtlUnpublish, status.Error(codes.Unavailable, "x"), status.Error(codes.Unavailable, "x"))
	f.w.SetEnabled(true)
	testutil.WaitFor(t, "first failure", func() bool { c := f.store.claim(r, "a1"); return c != nil && c.Attempts == 1 })
	testutil.WaitFor(t, "watcher idle", f.w.idle)
	if n := f.csi.count(mCtlUnpublish); n != 1 {
		t.Fatalf("controller calls before backoff = %d, want 1", n)
	}
	f.clock.Advance(DefaultBackoffBase - time.Millisecond)
	testutil.WaitFor(t, "watcher idle", f.w.idle)
	if n := f.csi.count(mCtlUnpublish); n != 1 {
		t.Fatalf("retried before NextAttempt: %d calls", n)
	}
	f.clock.Advance(time.Millisecond)
	testutil.WaitFor(t, "second failure", func() bool { c := f.store.claim(r, "a1"); return c != nil && c.Attempts == 2 })
	c := f.store.claim(r, "a1")
	if want := t0.Add(DefaultBackoffBase + 2*DefaultBackoffBase); !c.NextAttempt.Equal(want) {
		t.Fatalf("second backoff: next attempt %v, want %v (doubling)", c.NextAttempt, want)
	}
	if !c.FirstFailure.Equal(t0) {
		t.Fatalf("first failure moved to %v", c.FirstFailure)
	}
	f.clock.Advance(2 * DefaultBackoffBase)
	testutil.WaitFor(t, "release", func() bool { return f.store.claim(r, "a1") == nil })
}

// TestStuck: MaxAttempts and StuckAfter mark the volume stuck once per
// reason (no repeated writes), and releasing the claim clears it.
func TestStuck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		reason string
	}{
		{"max-attempts", Config{MaxAttempts: 3, StuckAfter: time.Hour}, ReasonMaxAttempts},
		{"stuck-after", Config{StuckAfter: 3 * time.Second}, ReasonStuckAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg, nil)
			r := ref("v1")
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
			errs := make([]error, 6)
			for i := range errs {
				errs[i] = status.Error(codes.Aborted, "pending")
			}
			f.csi.setScript(mCtlUnpublish, errs...)
			ctx := context.Background()
			var stuckAt int
			for i := 1; i <= 6; i++ {
				if _, err := f.w.assess(ctx, r); err != nil {
					t.Fatal(err)
				}
				if stuckAt == 0 && f.store.stuck(r) != nil {
					stuckAt = i
				}
				f.clock.Advance(DefaultBackoffMax)
			}
			if stuckAt != 3 && tc.reason == ReasonMaxAttempts {
				t.Fatalf("stuck at attempt %d, want 3", stuckAt)
			}
			if stuckAt == 0 || stuckAt > 3 {
				t.Fatalf("stuck at attempt %d, want by 3", stuckAt)
			}
			s := f.store.stuck(r)
			if s.Reason != tc.reason || s.AllocID != "a1" || s.NodeID != testNode || s.Code != uint32(codes.Aborted) || s.CodeName != "Aborted" {
				t.Fatalf("stuck = %+v", s)
			}
			if n := len(f.store.stuckCalls()); n != 1 {
				t.Fatalf("MarkStuck called %d times, want once (no spam)", n)
			}
			if _, err := f.w.assess(ctx, r); err != nil { // script exhausted: OK
				t.Fatal(err)
			}
			if f.store.claim(r, "a1") != nil {
				t.Fatal("claim not released")
			}
			if f.store.stuck(r) != nil {
				t.Fatal("stuck mark not cleared after release")
			}
		})
	}
}

// TestNodeDownSkipsNodeStep: a down or gone node skips the node step; the
// controller step still runs with the node ID (Kubernetes: force detach
// skips the node wait, not ControllerUnpublish).
func TestNodeDownSkipsNodeStep(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setup     func(f *fixture)
		wantCalls []csiCall
		abandoned bool
	}{
		{"down", func(f *fixture) { n := readyNode(testNode); n.Status = structs.NodeDown; f.store.putNode(n) },
			[]csiCall{{Method: mCtlUnpublish, Endpoint: ctlEP, VolumeID: "vol-v1", NodeID: "ext-n1"}}, false},
		// Gone node: the claim's recorded external node ID is used.
		{"gone", func(f *fixture) { f.store.mu.Lock(); delete(f.store.nodes, testNode); f.store.mu.Unlock() },
			[]csiCall{{Method: mCtlUnpublish, Endpoint: ctlEP, VolumeID: "vol-v1", NodeID: "ext-n1"}}, false},
		{"gone-without-node-id", func(f *fixture) {
			f.store.mu.Lock()
			delete(f.store.nodes, testNode)
			f.store.vols[ref("v1")].Claims["a1"].ExternalNodeID = ""
			f.store.mu.Unlock()
		}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			f.store.putAlloc("a1", testNode, structs.AllocFailed)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
			tc.setup(f)
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			got := f.csi.callList()
			for i := range got {
				got[i].Secrets = nil
			}
			if !slices.EqualFunc(got, tc.wantCalls, func(a, b csiCall) bool {
				return a.Method == b.Method && a.VolumeID == b.VolumeID && a.NodeID == b.NodeID && a.Endpoint == b.Endpoint
			}) {
				t.Fatalf("calls = %s, want %s", fmtCalls(got), fmtCalls(tc.wantCalls))
			}
			if f.store.claim(ref("v1"), "a1") != nil {
				t.Fatal("claim not released")
			}
			f.store.mu.Lock()
			cps := f.store.checkpoints
			f.store.mu.Unlock()
			if !cps[0].Claim.SkipNodeStep {
				t.Error("node-detached checkpoint does not record SkipNodeStep")
			}
			last := cps[len(cps)-1].Claim
			if tc.abandoned != (last.LastError != nil && strings.Contains(last.LastError.Message, "abandoned")) {
				t.Errorf("abandoned note = %+v, want abandoned=%v", last.LastError, tc.abandoned)
			}
		})
	}
}

// TestEmptyNodeIDNeverSent: a live node without an external node ID is a
// precondition error, never an RPC with an empty node ID
// (hashicorp/nomad#25349).
func TestEmptyNodeIDNeverSent(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	n := readyNode(testNode)
	n.Plugins[testPlugin].ExternalNodeID = ""
	f.store.putNode(n)
	c := newClaim("a1", testNode, structs.ClaimNodeDetached)
	c.ExternalNodeID = ""
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", c))
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if n := len(f.csi.callList()); n != 0 {
		t.Fatalf("%d CSI calls, want none", n)
	}
	got := f.store.claim(ref("v1"), "a1")
	if got.State != structs.ClaimNodeDetached || got.LastError == nil || got.LastError.Kind != structs.ErrorPrecondition || got.Attempts != 1 {
		t.Fatalf("claim = %+v / %+v", got, got.LastError)
	}
}

// TestSharedNode: stage/unstage only on the last claim on a node; the
// controller step is left while another claim on the node still uses the
// volume, and runs exactly once after every node step there.
func TestSharedNode(t *testing.T) {
	t.Run("both-terminal", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		f.store.putAlloc("a1", testNode, structs.AllocComplete)
		f.store.putAlloc("a2", testNode, structs.AllocComplete)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken), newClaim("a2", testNode, structs.ClaimTaken)))
		if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
			t.Fatal(err)
		}
		want := []string{mNodeUnpublish, mNodeUnpublish, mNodeUnstage, mCtlUnpublish}
		if got := f.csi.methods(); !slices.Equal(got, want) {
			t.Fatalf("calls = %v, want %v", got, want)
		}
		if f.store.claim(ref("v1"), "a1") != nil || f.store.claim(ref("v1"), "a2") != nil {
			t.Fatal("claims not released")
		}
	})
	t.Run("other-alloc-running", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		f.store.putAlloc("a1", testNode, structs.AllocComplete)
		f.store.putAlloc("a2", testNode, structs.AllocRunning)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken), newClaim("a2", testNode, structs.ClaimTaken)))
		if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
			t.Fatal(err)
		}
		if got, want := f.csi.methods(), []string{mNodeUnpublish}; !slices.Equal(got, want) {
			t.Fatalf("calls = %v, want %v (no unstage, no controller unpublish while a2 runs)", got, want)
		}
		if f.store.claim(ref("v1"), "a1") != nil {
			t.Fatal("a1 not released")
		}
		if c := f.store.claim(ref("v1"), "a2"); c == nil || c.State != structs.ClaimTaken {
			t.Fatalf("a2 = %+v, want untouched", c)
		}
		// a2 ends: it unstages and unpublishes the controller attachment.
		f.store.putAlloc("a2", testNode, structs.AllocComplete)
		if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
			t.Fatal(err)
		}
		want := []string{mNodeUnpublish, mNodeUnpublish, mNodeUnstage, mCtlUnpublish}
		if got := f.csi.methods(); !slices.Equal(got, want) {
			t.Fatalf("calls = %v, want %v", got, want)
		}
	})
	t.Run("other-node", func(t *testing.T) {
		f := newFixture(t, Config{}, nil)
		f.store.putNode(readyNode("n2"))
		f.store.putAlloc("a1", testNode, structs.AllocComplete)
		f.store.putAlloc("a2", "n2", structs.AllocRunning)
		f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken), newClaim("a2", "n2", structs.ClaimTaken)))
		if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
			t.Fatal(err)
		}
		want := []string{mNodeUnpublish, mNodeUnstage, mCtlUnpublish}
		if got := f.csi.methods(); !slices.Equal(got, want) {
			t.Fatalf("calls = %v, want %v", got, want)
		}
		if calls := f.csi.callList(); calls[2].NodeID != "ext-n1" || calls[2].Secrets["token"] != "s3cret" {
			t.Fatalf("controller call = %+v", calls[2])
		}
	})
}

// scriptPolicy answers with fixed decisions (or an error).
type scriptPolicy struct {
	decisions func(req *abi.PolicyRequest) []abi.Decision
	err       error
	calls     int
}

func (p *scriptPolicy) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	p.calls++
	if p.err != nil {
		return nil, p.err
	}
	return &abi.PolicyResponse{Decisions: p.decisions(req)}, nil
}

func (p *scriptPolicy) ModuleName() string    { return "test-policy" }
func (p *scriptPolicy) ModuleVersion() string { return "0.1.0" }

type testModules struct {
	policy  Policy
	adapter attach.Adapter
}

func (m testModules) PolicyFor(*structs.Volume) Policy {
	if m.policy == nil {
		return DefaultPolicy{}
	}
	return m.policy
}

func (m testModules) AdapterFor(*structs.Volume) attach.Adapter {
	if m.adapter == nil {
		return SpecAdapter{}
	}
	return m.adapter
}

type fakeFault struct{}

func (fakeFault) Error() string         { return "wasm trap: unreachable" }
func (fakeFault) ModuleName() string    { return "trap-policy" }
func (fakeFault) ModuleVersion() string { return "1.2.3" }
func (fakeFault) FaultKind() string     { return "trap" }

// TestPolicyValidation: the host never releases a claim whose allocation
// runs, whatever the policy says; bad answers are module faults that fail
// closed with the module named.
func TestPolicyValidation(t *testing.T) {
	releaseAll := func(req *abi.PolicyRequest) []abi.Decision {
		var out []abi.Decision
		for _, c := range req.Claims {
			out = append(out, abi.Decision{AllocID: c.AllocID, Action: abi.ActionRelease})
		}
		return out
	}
	type want struct {
		released []string          // claims gone after the pass
		faults   map[string]string // alloc -> fault kind
		module   string
	}
	for _, tc := range []struct {
		name   string
		policy *scriptPolicy
		want   want
	}{
		{"release-running", &scriptPolicy{decisions: releaseAll},
			want{released: []string{"done"}, faults: map[string]string{"live": attach.FaultUnsafe}, module: "test-policy"}},
		{"unknown-alloc", &scriptPolicy{decisions: func(req *abi.PolicyRequest) []abi.Decision {
			return append(releaseAll(req), abi.Decision{AllocID: "stranger", Action: abi.ActionRelease})
		}}, want{faults: map[string]string{"done": attach.FaultBadOutput}, module: "test-policy"}},
		{"duplicate", &scriptPolicy{decisions: func(*abi.PolicyRequest) []abi.Decision {
			return []abi.Decision{{AllocID: "done", Action: abi.ActionRelease}, {AllocID: "done", Action: abi.ActionRelease}}
		}}, want{faults: map[string]string{"done": attach.FaultBadOutput}, module: "test-policy"}},
		{"unknown-action", &scriptPolicy{decisions: func(*abi.PolicyRequest) []abi.Decision {
			return []abi.Decision{{AllocID: "done", Action: 42}}
		}}, want{faults: map[string]string{"done": attach.FaultBadOutput}, module: "test-policy"}},
		{"module-fault", &scriptPolicy{err: fakeFault{}},
			want{faults: map[string]string{"done": "trap"}, module: "trap-policy"}},
		{"plain-error", &scriptPolicy{err: errors.New("confused")},
			want{faults: map[string]string{"done": attach.FaultError}, module: "test-policy"}},
		{"no-decision", &scriptPolicy{decisions: func(*abi.PolicyRequest) []abi.Decision { return nil }},
			want{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, testModules{policy: tc.policy})
			f.store.putNode(readyNode("n2"))
			f.store.putAlloc("done", testNode, structs.AllocComplete)
			f.store.putAlloc("live", "n2", structs.AllocRunning)
			f.store.putVolume(newVolume("v1", newClaim("done", testNode, structs.ClaimTaken), newClaim("live", "n2", structs.ClaimTaken)))
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			if tc.policy.calls != 1 {
				t.Fatalf("policy called %d times, want once per pass", tc.policy.calls)
			}
			for _, id := range []string{"done", "live"} {
				c := f.store.claim(ref("v1"), id)
				released := slices.Contains(tc.want.released, id)
				if released != (c == nil) {
					t.Fatalf("claim %s released=%v, want %v", id, c == nil, released)
				}
				if c == nil {
					continue
				}
				fault, faulted := tc.want.faults[id]
				if !faulted {
					if c.LastError != nil || c.State != structs.ClaimTaken {
						t.Fatalf("claim %s = %s %+v, want untouched", id, c.State, c.LastError)
					}
					continue
				}
				e := c.LastError
				if e == nil || e.Kind != structs.ErrorModule || e.Fault != fault || e.Module != tc.want.module || c.Attempts != 1 || !c.NextAttempt.After(t0) {
					t.Fatalf("claim %s last error = %+v attempts %d, want module fault %s by %s", id, e, c.Attempts, fault, tc.want.module)
				}
			}
			for _, call := range f.csi.callList() {
				if call.Path == "/target/live" {
					t.Fatal("node-unpublished a running allocation's claim")
				}
			}
		})
	}
}

// TestDefaultPolicy pins the native policy's decisions (the Wasm
// default-policy must match them).
func TestDefaultPolicy(t *testing.T) {
	req := &abi.PolicyRequest{
		Claims: []abi.ClaimView{
			{AllocID: "run", NodeID: "n1", State: "taken"},
			{AllocID: "pend", NodeID: "n1", State: "taken"},
			{AllocID: "done", NodeID: "n1", State: "taken"},
			{AllocID: "gone", NodeID: "n1", State: "taken"},
			{AllocID: "down", NodeID: "n2", State: "taken"},
			{AllocID: "nonode", NodeID: "n3", State: "taken"},
			{AllocID: "downlater", NodeID: "n2", State: "node-detached"},
		},
		Allocs: []abi.AllocView{{ID: "run", ClientStatus: "running"}, {ID: "pend", ClientStatus: "pending"},
			{ID: "done", ClientStatus: "complete"}, {ID: "gone", ClientStatus: "gone"}, {ID: "down", ClientStatus: "failed"},
			{ID: "nonode", ClientStatus: "lost"}, {ID: "downlater", ClientStatus: "complete"}},
		Nodes: []abi.NodeView{{ID: "n1", Status: "ready"}, {ID: "n2", Status: "down"}},
	}
	resp, err := DefaultPolicy{}.DecideRelease(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]abi.Action{"run": abi.ActionWait, "pend": abi.ActionWait, "done": abi.ActionRelease,
		"gone": abi.ActionRelease, "down": abi.ActionReleaseSkipNode, "nonode": abi.ActionReleaseSkipNode,
		"downlater": abi.ActionRelease}
	if len(resp.Decisions) != len(want) {
		t.Fatalf("%d decisions, want %d", len(resp.Decisions), len(want))
	}
	for _, d := range resp.Decisions {
		if d.Action != want[d.AllocID] || d.RetryAfterMs != 0 {
			t.Errorf("%s: action %d retry %d, want %d", d.AllocID, d.Action, d.RetryAfterMs, want[d.AllocID])
		}
	}
}

// TestSpecAdapterClassify pins the CSI-spec classification.
func TestSpecAdapterClassify(t *testing.T) {
	for code, want := range map[codes.Code]abi.Outcome{
		codes.OK: abi.OutcomeDone, codes.NotFound: abi.OutcomeRetry, codes.Aborted: abi.OutcomeRetry,
		codes.Unavailable: abi.OutcomeRetry, codes.DeadlineExceeded: abi.OutcomeRetry, codes.Canceled: abi.OutcomeRetry,
		codes.ResourceExhausted: abi.OutcomeRetry, codes.Internal: abi.OutcomeRetry, codes.Unknown: abi.OutcomeRetry,
		codes.FailedPrecondition: abi.OutcomeRetry, codes.Unimplemented: abi.OutcomeFatal,
		codes.InvalidArgument: abi.OutcomeFatal, codes.PermissionDenied: abi.OutcomeFatal, codes.Unauthenticated: abi.OutcomeFatal,
	} {
		resp, err := SpecAdapter{}.ClassifyError(context.Background(), &abi.ClassifyRequest{Code: uint32(code)})
		if err != nil || resp.Outcome != want {
			t.Errorf("%s: outcome %v err %v, want %v", code, resp.Outcome, err, want)
		}
	}
}

// doneAdapter classifies NotFound as done (a driver whose unpublish of an
// unknown volume means "nothing attached").
type doneAdapter struct{ SpecAdapter }

func (doneAdapter) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	if codes.Code(req.Code) == codes.NotFound {
		return &abi.ClassifyResponse{Outcome: abi.OutcomeDone}, nil
	}
	if codes.Code(req.Code) == codes.ResourceExhausted {
		return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, RetryAfterMs: 7000}, nil
	}
	return SpecAdapter{}.ClassifyError(ctx, req)
}

// TestAdapterOutcomes: Retry honours RetryAfterMs; Done on a failed step is
// an unsafe module fault that keeps the claim where it is, with the
// driver's code (a module may never declare a failed detach done).
func TestAdapterOutcomes(t *testing.T) {
	f := newFixture(t, Config{}, testModules{adapter: doneAdapter{}})
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
	f.csi.setScript(mCtlUnpublish, status.Error(codes.ResourceExhausted, "quota"))
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	if c := f.store.claim(ref("v1"), "a1"); !c.NextAttempt.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("next attempt %v, want retry-after 7s", c.NextAttempt)
	}
	f.clock.Advance(7 * time.Second)
	f.csi.setScript(mCtlUnpublish, status.Error(codes.NotFound, "gone"))
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	c := f.store.claim(ref("v1"), "a1")
	if c == nil || c.State != structs.ClaimNodeDetached {
		t.Fatalf("claim %+v, want it kept at node-detached (a failed detach classified done)", c)
	}
	if e := c.LastError; e == nil || e.Fault != attach.FaultUnsafe || e.CodeName != "NotFound" {
		t.Fatalf("last error %+v, want an unsafe fault keeping the driver's NotFound", e)
	}
	if n := len(f.csi.callList()); n != 2 {
		t.Fatalf("%d CSI calls, want 2 (no third after the unsafe classification)", n)
	}
}

// recordingPolicy keeps the last request and delegates to DefaultPolicy.
type recordingPolicy struct {
	DefaultPolicy
	last *abi.PolicyRequest
}

func (p *recordingPolicy) DecideRelease(ctx context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	p.last = req
	return p.DefaultPolicy.DecideRelease(ctx, req)
}

// TestPolicyRequestView: the policy sees the clock's time, "gone" for a
// missing allocation or node, ages in milliseconds and the node plugin's
// external ID; a gone allocation's claim is released, skipping the gone node.
func TestPolicyRequestView(t *testing.T) {
	pol := &recordingPolicy{}
	f := newFixture(t, Config{}, testModules{policy: pol})
	f.store.putNode(readyNode("n2"))
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.deleteAlloc("a1")
	f.store.putAlloc("a2", "n2", structs.AllocRunning)
	f.store.putVolume(newVolume("v1", newClaim("a1", "n9", structs.ClaimTaken), newClaim("a2", "n2", structs.ClaimTaken)))
	f.clock.Advance(90 * time.Second)
	if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
		t.Fatal(err)
	}
	req := pol.last
	if req == nil || req.NowUnixMs != t0.Add(90*time.Second).UnixMilli() || req.Volume.ExternalID != "vol-v1" {
		t.Fatalf("request = %+v", req)
	}
	if len(req.Claims) != 2 || req.Claims[0].AllocID != "a1" || req.Allocs[0].ClientStatus != attach.StatusGone || req.Allocs[1].ClientStatus != "running" {
		t.Fatalf("claims/allocs = %+v / %+v", req.Claims, req.Allocs)
	}
	if len(req.Nodes) != 2 || req.Nodes[0].Status != attach.StatusGone || req.Nodes[1].Status != "ready" ||
		req.Nodes[1].LastSeenAgeMs != 90_000 || req.Nodes[1].ExternalID != "ext-n2" || req.Nodes[1].Meta != nil {
		t.Fatalf("nodes = %+v", req.Nodes)
	}
	if f.store.claim(ref("v1"), "a1") != nil {
		t.Fatal("claim of a gone allocation not released")
	}
	if n := f.csi.count(mNodeUnpublish); n != 0 {
		t.Fatalf("%d node calls for a gone node", n)
	}
}

// TestEscapeHatch: with the opt-in automatic escape hatch, a volume stuck
// for AutoForceAfter whose allocations are all terminal is force-deregistered
// once; never while an allocation is live, never when off.
func TestEscapeHatch(t *testing.T) {
	for _, tc := range []struct {
		name      string
		on        bool
		liveOther bool
		want      bool
	}{
		{"on", true, false, true},
		{"on-live-alloc", true, true, false},
		{"off", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{AutoForceDeregister: tc.on, AutoForceAfter: 15 * time.Minute}, nil)
			f.store.putNode(readyNode("n2"))
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			f.store.putAlloc("a2", "n2", structs.AllocComplete)
			if tc.liveOther {
				f.store.putAlloc("a2", "n2", structs.AllocRunning)
			}
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached), newClaim("a2", "n2", structs.ClaimTaken)))
			errs := make([]error, 40)
			for i := range errs {
				errs[i] = status.Error(codes.Unimplemented, "no")
			}
			f.csi.setScript(mCtlUnpublish, errs...)
			ctx := context.Background()
			for range 17 { // one pass a minute: stuck at once, 15 min later the hatch
				if _, err := f.w.assess(ctx, ref("v1")); err != nil {
					t.Fatal(err)
				}
				if _, err := f.w.assess(ctx, ref("v1")); err != nil { // a repeat pass must not double-act
					t.Fatal(err)
				}
				f.clock.Advance(time.Minute)
			}
			f.store.mu.Lock()
			forced := len(f.store.forced)
			_, exists := f.store.vols[ref("v1")]
			f.store.mu.Unlock()
			if tc.want != (forced == 1) || forced > 1 || tc.want == exists {
				t.Fatalf("force-deregistered %d times, volume exists=%v; want deregistered=%v", forced, exists, tc.want)
			}
			if tc.want {
				f.store.mu.Lock()
				req := f.store.forced[0]
				f.store.mu.Unlock()
				if !req.Force || req.Reason != "escape-hatch" || req.Time.Before(t0.Add(15*time.Minute)) {
					t.Fatalf("request = %+v", req)
				}
			}
		})
	}
}

// TestReleaseFailuresLoggedAtWarn: a claim failing the same way warns at
// attempts 1, 2, 4 and 8, and a different failure warns at once (before,
// only the first of several release failures reached the log at WARN).
func TestReleaseFailuresLoggedAtWarn(t *testing.T) {
	var buf bytes.Buffer // assess runs on this goroutine; the watcher is not enabled
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &buf})
	f := newLoggedFixture(t, Config{MaxAttempts: 100, StuckAfter: 1000 * time.Hour}, nil, logger)
	r := ref("v1")
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
	var errs []error
	for range 9 {
		errs = append(errs, status.Error(codes.Unavailable, "controller busy"))
	}
	errs = append(errs, status.Error(codes.Internal, "disk wedged"))
	f.csi.setScript(mCtlUnpublish, errs...)
	ctx := context.Background()
	for range len(errs) {
		if _, err := f.w.assess(ctx, r); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(DefaultBackoffMax)
	}
	var warned []string
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "release attempt failed") {
			i := strings.Index(line, "attempts=")
			warned = append(warned, strings.Fields(line[i:])[0])
		}
	}
	want := []string{"attempts=1", "attempts=2", "attempts=4", "attempts=8", "attempts=10"}
	if !slices.Equal(warned, want) {
		t.Fatalf("WARN lines at %v, want %v\n%s", warned, want, buf.String())
	}
	if !strings.Contains(buf.String(), "disk wedged") {
		t.Fatalf("the changed error is not in the WARN log:\n%s", buf.String())
	}
}
