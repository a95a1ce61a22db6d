package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
	"github.com/volhost/volhost/watcher/attach"
)

// A claim whose NodePublish fails rolls back only what it
// created. web-1 holds the attachment of disk-1 on node1; web-2's failed
// read claim on the same node must not ControllerUnpublish it, while a
// first claim's failed publish still undoes its own attachment.
func TestRollbackUndoesOnlyWhatTheClaimCreated(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	disk := externalID(ref.Namespace, ref.ID)

	// A first claim that fails after ControllerPublish: its own attachment
	// is undone.
	h.mustAlloc("default", "web-0", "node1", structs.AllocRunning)
	h.nodes["node1"].Script(csitest.NodePublish, csitest.Result{Code: codes.Internal})
	if err := h.claim(ref, "web-0", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("claim with a failing NodePublish succeeded")
	}
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 1 {
		t.Fatalf("a failed first claim sent %d ControllerUnpublish, want 1 (its own attachment)", n)
	}
	if h.ctl.Attached(disk, "ext-node1") {
		t.Fatal("a failed first claim left its attachment")
	}

	h.liveClaim(ref, "web-1", "node1")
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	h.nodes["node1"].Script(csitest.NodePublish, csitest.Result{Code: codes.Internal})
	err := h.claim(ref, "web-2", "node1", structs.ClaimRead)
	if err == nil {
		t.Fatal("claim with a failing NodePublish succeeded")
	}
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 1 {
		t.Fatalf("web-2's rollback sent ControllerUnpublish under web-1 (%d calls in all, want the first claim's 1)", n)
	}
	if n := len(h.calls("node1", csitest.NodeUnstage, ref)); n != 1 {
		t.Fatalf("web-2's rollback unstaged web-1's staging path (%d NodeUnstage, want the first claim's 1)", n)
	}
	if !h.ctl.Attached(disk, "ext-node1") {
		t.Fatal("disk-1 detached from node1 while web-1 runs there")
	}
	if v := h.vol(ref); v.Claims["web-1"] == nil || v.Claims["web-2"] != nil {
		t.Fatalf("claims after the failed claim: %v", v.Claims)
	}
}

// A claim committed on the node while a release pass is
// between its NodeUnpublish and its NodeUnstage makes the pass leave the
// staging path and the attachment to the new claim.
func TestReleaseRechecksCommittedClaimsBeforeNodeUnstage(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")

	// The hook runs on the plugin's gRPC goroutine: hand the result over
	// on a channel (the race detector does not see through the socket).
	claimed := make(chan error, 1)
	var once sync.Once
	h.setOnCall(func(plugin string, c csitest.Call) {
		if plugin == "node1" && c.Method == csitest.NodeUnpublish {
			once.Do(func() {
				// The pass has read its claims; a new workload claims now.
				err := h.alloc("default", "web-2", "node1", structs.AllocRunning)
				if err == nil {
					err = h.claim(ref, "web-2", "node1", structs.ClaimWrite)
				}
				claimed <- err
			})
		}
	})
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	h.setOnCall(nil)
	select {
	case err := <-claimed:
		if err != nil {
			t.Fatalf("the interleaved claim failed: %v", err)
		}
	default:
		t.Fatal("the interleaved claim did not happen")
	}
	if n := len(h.calls("node1", csitest.NodeUnstage, ref)); n != 0 {
		t.Fatalf("NodeUnstage sent while web-2 holds a taken claim on node1 (%d calls)", n)
	}
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 0 {
		t.Fatalf("ControllerUnpublish sent while web-2 holds a taken claim on node1 (%d calls)", n)
	}
	v := h.vol(ref)
	if v.Claims["web-1"] != nil || v.Claims["web-2"] == nil || v.Claims["web-2"].State != structs.ClaimTaken {
		t.Fatalf("claims %v: want web-1 released (the attachment handed to web-2) and web-2 taken", v.Claims)
	}
	if !h.ctl.Attached(externalID(ref.Namespace, ref.ID), "ext-node1") {
		t.Fatal("the attachment web-2 uses is gone")
	}
}

// unknownLog commits like the real log but answers every claim write that
// confirms a claim taken with ErrOutcomeUnknown, as a cancelled wait or a
// lost leadership does. (A publishing record whose commit is unconfirmed
// stops the claim before any CSI call; a retry takes it up and publishes.)
type unknownLog struct{ Log }

func (l unknownLog) Apply(ctx context.Context, t structs.MessageType, req any) (uint64, any, error) {
	idx, resp, err := l.Log.Apply(ctx, t, req)
	if r, ok := req.(*structs.VolumeClaimRequest); err == nil && ok && r.Claim.State == structs.ClaimTaken {
		return idx, resp, fmt.Errorf("apply: %w (%w)", structs.ErrOutcomeUnknown, context.Canceled)
	}
	return idx, resp, err
}

// A claim whose commit could not be confirmed is not
// rolled back (it may be recorded), answers ErrOutcomeUnknown, and the same
// request again answers the recorded claim without any CSI call.
func TestClaimWithUnknownOutcomeIsKeptAndRetrySafe(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	real := h.srv.log
	h.srv.log = unknownLog{real}
	err := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
	if !errors.Is(err, structs.ErrOutcomeUnknown) || !strings.Contains(err.Error(), "retrying the same request is safe") {
		t.Fatalf("claim error %v, want ErrOutcomeUnknown saying a retry is safe", err)
	}
	for _, m := range []string{csitest.NodeUnpublish, csitest.NodeUnstage} {
		if n := len(h.calls("node1", m, ref)); n != 0 {
			t.Fatalf("%d %s after a commit of unknown outcome", n, m)
		}
	}
	if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 0 {
		t.Fatalf("%d ControllerUnpublish after a commit of unknown outcome", n)
	}
	h.srv.log = real
	before := len(h.ctl.AllCalls()) + len(h.nodes["node1"].AllCalls())
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err != nil {
		t.Fatalf("retry of the same claim: %v", err)
	}
	if after := len(h.ctl.AllCalls()) + len(h.nodes["node1"].AllCalls()); after != before {
		t.Fatalf("the retry made %d CSI calls, want none (the claim is recorded)", after-before)
	}
	if err := h.claim(ref, "web-1", "node1", structs.ClaimRead); !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("the same allocation asking for another mode: %v, want a conflict", err)
	}
}

// Every module answer is bounded by what the host can
// verify; a violation is a module fault, with no CSI call made.
func TestHostileModuleAnswersAreFaults(t *testing.T) {
	cases := []struct {
		name    string
		policy  watcher.Policy
		adapter attach.Adapter
		script  func(h *harness)
		// no call of these methods may happen
		forbidden []string
		state     structs.ClaimState
		message   string
	}{
		{name: "adapter names another disk", adapter: lyingAdapter{volumeID: "disk-of-someone-else"},
			forbidden: []string{csitest.NodeUnpublish, csitest.NodeUnstage, csitest.ControllerUnpublish},
			state:     structs.ClaimTaken, message: `answered volume ID "disk-of-someone-else"`},
		{name: "adapter names another instance", adapter: lyingAdapter{nodeID: "projects/p/zones/z/instances/evil"},
			forbidden: []string{csitest.ControllerUnpublish},
			state:     structs.ClaimNodeDetached, message: `answered node ID "projects/p/zones/z/instances/evil"`},
		{name: "adapter calls a failed detach done", adapter: lyingAdapter{allDone: true},
			script: func(h *harness) {
				h.ctl.Script(csitest.ControllerUnpublish, csitest.Result{Code: codes.Internal, Message: "disk busy"})
			},
			state: structs.ClaimNodeDetached, message: "a failed step is never done"},
		{name: "policy skips the node step of a ready node", policy: releaseEverything{skipNode: true},
			forbidden: []string{csitest.NodeUnpublish, csitest.ControllerUnpublish},
			state:     structs.ClaimTaken, message: `skip the node step of allocation "web-1" on node "node1", which is ready`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1")
			ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
			h.endedClaim(ref, "web-1", "node1")
			h.mods.set("default", tc.policy, tc.adapter)
			if tc.script != nil {
				tc.script(h)
			}
			if err := h.w.Assess(h.ctx, ref); err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.forbidden {
				plugin := "node1"
				if m == csitest.ControllerUnpublish {
					plugin = "controller"
				}
				if n := len(h.calls(plugin, m, ref)); n != 0 {
					t.Errorf("%d %s calls made on a hostile answer", n, m)
				}
			}
			c := h.vol(ref).Claims["web-1"]
			if c == nil {
				t.Fatal("the claim was released on a hostile answer")
			}
			if c.State != tc.state || c.LastError == nil || c.LastError.Fault != attach.FaultUnsafe ||
				!strings.Contains(c.LastError.Message, tc.message) {
				t.Fatalf("claim %s, last error %+v: want %s with an unsafe fault saying %q", c.State, c.LastError, tc.state, tc.message)
			}
			if !h.ctl.Attached(externalID(ref.Namespace, ref.ID), "ext-node1") {
				t.Fatal("the disk was detached on a hostile answer")
			}
		})
	}
}

// The claim path holds an adapter to the node's external ID too: a module
// that names another instance attaches nothing.
func TestClaimRefusesAnAdapterNamingAnotherNode(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	h.mods.set("default", nil, lyingAdapter{nodeID: "projects/p/zones/z/instances/evil"})
	err := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
	if err == nil || !strings.Contains(err.Error(), `whose external node ID is "ext-node1"`) {
		t.Fatalf("claim error %v", err)
	}
	if n := len(h.calls("controller", csitest.ControllerPublish, ref)); n != 0 {
		t.Fatalf("%d ControllerPublish with a node ID the host cannot verify", n)
	}
}

// A policy that waits forever with an overflowing retry_after holds the
// claim visibly (who, why, until when, clamped to max_retry_after) and the
// hold counts toward stuck_after.
func TestPolicyHoldIsBoundedVisibleAndCountsTowardStuck(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.endedClaim(ref, "web-1", "node1")
	h.mods.set("default", waitForever{}, nil)
	start := h.clock.Now()
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	c := h.vol(ref).Claims["web-1"]
	if c.Hold == nil || c.Hold.Reason != "never" || !c.Hold.Since.Equal(start) || !c.Hold.Until.Equal(start.Add(watcher.DefaultMaxRetryAfter)) {
		t.Fatalf("hold %+v: want reason never, since %s, until %s (retry_after clamped)", c.Hold, start, start.Add(watcher.DefaultMaxRetryAfter))
	}
	idx := h.vol(ref).ModifyIndex
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	if got := h.vol(ref).ModifyIndex; got != idx {
		t.Fatalf("an unchanged hold was written again (index %d -> %d): a log write per pass", idx, got)
	}
	h.clock.Advance(time.Minute) // the harness's stuck_after
	if err := h.w.Assess(h.ctx, ref); err != nil {
		t.Fatal(err)
	}
	v := h.vol(ref)
	if v.Stuck == nil || v.Stuck.Reason != watcher.ReasonHeld {
		t.Fatalf("stuck %+v after a hold of stuck_after: want %q", v.Stuck, watcher.ReasonHeld)
	}
	if v.Claims["web-1"] == nil {
		t.Fatal("the held claim was released")
	}
}

// The failover fence on the claim path: a server that does not lead a ready term
// makes no CSI call for a claim.
func TestClaimNeedsAReadyLeaderTerm(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	h.srv.log = staleLog{h.srv.log}
	err := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
	if !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("claim on a server whose leadership cannot be confirmed: %v", err)
	}
	if n := len(h.calls("controller", csitest.ControllerPublish, ref)); n != 0 {
		t.Fatalf("%d ControllerPublish without confirmed leadership", n)
	}
}

// staleLog is a log whose leadership is never confirmed (a paused leader
// that woke up after its lease).
type staleLog struct{ Log }

func (staleLog) ConfirmLeader(_ context.Context, term uint64) error {
	return fmt.Errorf("term %d: %w", term, structs.ErrNoLeader)
}

// A null plugin entry in a node registration is a
// validation error naming the field, not a panic.
func TestRegisterNodeWithNullPluginEntry(t *testing.T) {
	h := newHarness(t)
	_, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: "n9", Plugins: map[string]*structs.NodePlugin{"csitest": nil}})
	var ve *structs.ValidationError
	if !errors.As(err, &ve) || ve.Field != "node.plugins[csitest]" {
		t.Fatalf("error %v, want a validation error on node.plugins[csitest]", err)
	}
	if n, _ := h.store.Snapshot().NodeByID(nil, "n9"); n != nil {
		t.Fatal("the node was recorded")
	}
}

// A node registered with plugin endpoints needs a root for the staging
// directory and the target's parent the CO must provide (CSI spec): one
// given is absolute and clean, and one left out defaults under TMPDIR
// instead of the relative paths drivers refuse.
func TestRegisterNodeRootDir(t *testing.T) {
	h := newHarness(t, "node1")
	// n9's own driver: node1's would make n9 node1's machine, which a
	// second node may not be.
	ep := csitest.NewServer(t, csitest.Options{NodeID: "ext-n9", StageUnstage: true}).Endpoint()
	for _, tt := range []struct {
		root, want string
		invalid    bool
	}{
		{"", DefaultNodeRoot("n9"), false},
		{"/srv/volhost/n9", "/srv/volhost/n9", false},
		{"relative/dir", "", true},
		{"/srv/../etc", "", true},
	} {
		n, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: "n9", RootDir: tt.root,
			Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: ep}}})
		var ve *structs.ValidationError
		if tt.invalid {
			if !errors.As(err, &ve) || ve.Field != "node.root_dir" {
				t.Errorf("root_dir %q: %v, want a validation error on node.root_dir", tt.root, err)
			}
			continue
		}
		if err != nil || n.RootDir != tt.want || !filepath.IsAbs(n.RootDir) {
			t.Errorf("root_dir %q: node %+v, %v; want root %q", tt.root, n, err, tt.want)
		}
	}
	if got := DefaultNodeRoot(".."); filepath.Base(got) == ".." || !strings.HasPrefix(got, os.TempDir()) {
		t.Errorf("DefaultNodeRoot(..) = %q escapes its parent", got)
	}
}
