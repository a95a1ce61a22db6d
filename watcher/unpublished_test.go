package watcher

import (
	"context"
	"slices"
	"sync"
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// NodeUnpublish's success is committed before NodeUnstage runs,
// so a retry after a failed (or lost) unstage resumes at the unstage and
// the target is unpublished exactly once.
func TestNodeUnpublishNotRepeatedAfterFailedUnstage(t *testing.T) {
	for _, code := range []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			r := ref("v1")
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
			f.csi.setScript(mNodeUnstage, status.Error(code, "agent restarted"))
			if _, err := f.w.assess(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			c := f.store.claim(r, "a1")
			if c == nil || c.State != structs.ClaimTaken || !c.NodeUnpublished || c.Attempts != 1 || c.LastError.Step != StepNodeUnstage {
				t.Fatalf("after the failed unstage: claim %+v, want taken, node-unpublished, 1 attempt failed at node-unstage", c)
			}
			f.clock.Advance(DefaultBackoffMax)
			if _, err := f.w.assess(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			want := []string{mNodeUnpublish, mNodeUnstage, mNodeUnstage, mCtlUnpublish}
			if got := f.csi.methods(); !slices.Equal(got, want) {
				t.Fatalf("calls = %v, want %v (NodeUnpublish once)", got, want)
			}
			if c := f.store.claim(r, "a1"); c != nil {
				t.Fatalf("claim not released: %+v", c)
			}
		})
	}
}

// A claim whose committed state says node-unpublished (a new leader, a
// restarted server) starts at NodeUnstage.
func TestNodeUnpublishedClaimResumesAtUnstage(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	r := ref("v1")
	c := newClaim("a1", testNode, structs.ClaimTaken)
	c.NodeUnpublished = true
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", c))
	if _, err := f.w.assess(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if got, want := f.csi.methods(), []string{mNodeUnstage, mCtlUnpublish}; !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	full := []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree}
	if got := f.store.checkpointStates(); !slices.Equal(got, full) {
		t.Fatalf("checkpoints = %v, want %v", got, full)
	}
}

// The extra checkpoint is written only when a NodeUnstage follows: a claim
// that is not the last on its node, or whose plugin does not stage, keeps
// one write per step (BenchmarkAgentReleaseNative reports the raft entries per claim).
func TestNodeUnpublishedOnlyBeforeUnstage(t *testing.T) {
	full := []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree}
	for _, tc := range []struct {
		name      string
		setup     func(f *fixture, v *structs.Volume)
		wantCalls []string
		want      []structs.ClaimState
	}{
		{name: "last on the node", wantCalls: []string{mNodeUnpublish, mNodeUnstage, mCtlUnpublish},
			want: append([]structs.ClaimState{unpublishedMark}, full...)},
		{name: "another claim on the node", setup: func(f *fixture, v *structs.Volume) {
			f.store.putAlloc("a2", testNode, structs.AllocRunning)
			v.Claims["a2"] = newClaim("a2", testNode, structs.ClaimTaken)
		}, wantCalls: []string{mNodeUnpublish}, want: full},
		{name: "plugin does not stage", setup: func(f *fixture, v *structs.Volume) {
			n := readyNode(testNode)
			n.Plugins[testPlugin].StageUnstage = false
			f.store.putNode(n)
			v.Claims["a1"].StagingPath = "" // published without staging, as the claim path records it
		}, wantCalls: []string{mNodeUnpublish, mCtlUnpublish}, want: full},
		// What the claim recorded decides, not the node's registration
		// today: a claim that staged is unstaged although the node now
		// says its plugin does not stage.
		{name: "claim staged, node no longer says it stages", setup: func(f *fixture, _ *structs.Volume) {
			n := readyNode(testNode)
			n.Plugins[testPlugin].StageUnstage = false
			f.store.putNode(n)
		}, wantCalls: []string{mNodeUnpublish, mNodeUnstage, mCtlUnpublish},
			want: append([]structs.ClaimState{unpublishedMark}, full...)},
		// A claim whose publish attached nothing is not detached, although
		// the plugin now publishes.
		{name: "claim unattached", setup: func(_ *fixture, v *structs.Volume) {
			v.Claims["a1"].Unattached = true
		}, wantCalls: []string{mNodeUnpublish, mNodeUnstage},
			want: append([]structs.ClaimState{unpublishedMark}, full...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, nil)
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			v := newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken))
			if tc.setup != nil {
				tc.setup(f, v)
			}
			f.store.putVolume(v)
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			if got := f.csi.methods(); !slices.Equal(got, tc.wantCalls) {
				t.Fatalf("calls = %v, want %v", got, tc.wantCalls)
			}
			if got := f.store.checkpointStates(); !slices.Equal(got, tc.want) {
				t.Fatalf("checkpoints = %v, want %v", got, tc.want)
			}
		})
	}
}

// keyedAgent is a node agent's attach.NodeSteps as the watcher sees it: it records
// the idempotency key each call carries and the keys acknowledged, with
// the number of checkpoints committed when each ack came.
type keyedAgent struct {
	*fakeCSI
	store *fakeStore
	mu    sync.Mutex
	keys  []string
	acks  []string
	// ackedAfter is the number of checkpoints committed at each ack.
	ackedAfter []int
}

func (a *keyedAgent) NodeUnpublishVolume(ctx context.Context, ep string, req *csipb.NodeUnpublishVolumeRequest) error {
	a.record(ctx)
	return a.fakeCSI.NodeUnpublishVolume(ctx, ep, req)
}

func (a *keyedAgent) NodeUnstageVolume(ctx context.Context, ep string, req *csipb.NodeUnstageVolumeRequest) error {
	a.record(ctx)
	return a.fakeCSI.NodeUnstageVolume(ctx, ep, req)
}

func (a *keyedAgent) record(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.keys = append(a.keys, attach.StepKey(ctx))
}

func (a *keyedAgent) AckStep(key string) {
	n := len(a.store.checkpointStates())
	a.mu.Lock()
	defer a.mu.Unlock()
	a.acks = append(a.acks, key)
	a.ackedAfter = append(a.ackedAfter, n)
}

// Release steps through a node agent carry a key that names the claim
// and the step, the same on the retry after a failure (what lets the
// agent answer it from its journal), and are acknowledged only once the
// checkpoint recording their outcome is committed.
func TestReleaseStepKeys(t *testing.T) {
	f, _ := newAgentFixture(t, nil)
	ag := &keyedAgent{fakeCSI: f.csi, store: f.store}
	f.w.deps.Agents = agents{testNode: ag}
	n := readyNode(testNode)
	n.Agent = true
	f.store.putNode(n)
	r := ref("v1")
	c := newClaim("a1", testNode, structs.ClaimTaken)
	c.CreateIndex = 42
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", c))
	f.csi.setScript(mNodeUnpublish, status.Error(codes.Unavailable, "agent gone before it answered"))
	for range 2 {
		if _, err := f.w.assess(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(DefaultBackoffMax)
	}
	unpub, unstage := "default/v1/a1/42/"+StepNodeUnpublish, "default/v1/a1/42/"+StepNodeUnstage
	ag.mu.Lock()
	defer ag.mu.Unlock()
	if want := []string{unpub, unpub, unstage}; !slices.Equal(ag.keys, want) {
		t.Fatalf("keys = %q, want %q", ag.keys, want)
	}
	// The unpublish is acknowledged after its node-unpublished checkpoint
	// (the failure, then that one: 2), the unstage after node-detached (3).
	if want := []string{unpub, unstage}; !slices.Equal(ag.acks, want) || !slices.Equal(ag.ackedAfter, []int{2, 3}) {
		t.Fatalf("acks = %q after %v checkpoints, want %q after [2 3]", ag.acks, ag.ackedAfter, want)
	}
}

// The claim path's steps carry no key: a publish undone and retried must
// really run again.
func TestStepKeyAbsentOutsideRelease(t *testing.T) {
	if k := attach.StepKey(context.Background()); k != "" {
		t.Fatalf("key = %q", k)
	}
}

// A pass cancelled just as NodeUnpublish answered OK (the watcher disabled,
// a step-down under way, with the leader's term still current) still
// commits what the node did: the next pass does not repeat the unpublish.
// (Without the recording context the volume lock, taken under the
// cancelled context, failed and the unpublish went unrecorded.)
func TestCancelledPassRecordsItsUnpublish(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	r := ref("v1")
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.csi.mu.Lock()
	f.csi.answered = map[string]func(){mNodeUnpublish: cancel}
	f.csi.mu.Unlock()
	_, _ = f.w.assess(ctx, r)
	if c := f.store.claim(r, "a1"); c != nil && !c.NodeUnpublished {
		t.Fatalf("after the cancelled pass: claim %+v lost its done NodeUnpublish", c)
	}
	f.csi.mu.Lock()
	f.csi.answered = nil
	f.csi.mu.Unlock()
	f.clock.Advance(DefaultBackoffMax)
	if _, err := f.w.assess(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range f.csi.methods() {
		if m == mNodeUnpublish {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("calls = %v: NodeUnpublish %d times, want once", f.csi.methods(), n)
	}
	if c := f.store.claim(r, "a1"); c != nil {
		t.Fatalf("claim not released: %+v", c)
	}
}
