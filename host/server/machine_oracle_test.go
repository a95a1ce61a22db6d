package server

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// These tests drive the claim and release paths through the server's
// public calls and judge them by the plugins' Oracle: what the machines and
// the storage really hold, and the CSI spec's preconditions on every call,
// not volhost's own view of its claims.

// noViolations stops t with every CSI spec precondition the host broke.
func noViolations(t testing.TB, h *harness) {
	t.Helper()
	var b strings.Builder
	for _, v := range h.oracle.Violations() {
		fmt.Fprintf(&b, "\n  CSI spec violated: %s", v)
	}
	if b.Len() > 0 {
		t.Fatal(b.String())
	}
}

// inUse checks that the running allocation alloc's claim on ref is real on
// machine mach: the volume attached there, published at the claim's target
// and staged at the path that target was published from.
func inUse(t testing.TB, h *harness, ref structs.VolumeRef, alloc, mach string) {
	t.Helper()
	ext := externalID(ref.Namespace, ref.ID)
	c := h.vol(ref).Claims[alloc]
	if c == nil {
		t.Fatalf("the claim of running allocation %s is gone", alloc)
	}
	if !h.oracle.AttachedTo(ext, mach) {
		t.Errorf("%s of running allocation %s is not attached to %s: attachments %v", ext, alloc, mach, h.oracle.Attachments())
	}
	st := h.oracle.Machine(mach)
	tgt, ok := st.Published[c.TargetPath]
	if !ok || tgt.VolumeID != ext {
		t.Fatalf("%s of running allocation %s is not published at its target %s on %s: %v", ext, alloc, c.TargetPath, mach, st.Published)
	}
	if st.Staged[tgt.StagingPath] != ext {
		t.Errorf("running allocation %s's target on %s is published from %s, where nothing is staged (its writes go to the node's root disk): staged %v",
			alloc, mach, tgt.StagingPath, st.Staged)
	}
}

// nothingLeft checks that nothing of ref is staged, published or attached
// anywhere, except where the host reported a leftover for that node.
func nothingLeft(t testing.TB, h *harness, ref structs.VolumeRef) {
	t.Helper()
	ext := externalID(ref.Namespace, ref.ID)
	leftovers, err := h.store.Snapshot().Leftovers(nil)
	if err != nil {
		t.Fatal(err)
	}
	reported := func(node string) bool {
		for _, l := range leftovers {
			if l.ExternalID == ext && (l.ExternalNodeID == node || h.oracle.MachineOf(l.ExternalNodeID) == h.oracle.MachineOf(node)) {
				return true
			}
		}
		return false
	}
	for _, a := range h.oracle.Attachments() {
		if a.VolumeID == ext && !reported(a.NodeID) {
			t.Errorf("%s is still attached to %s (machine %q) with no claim and no leftover reported", ext, a.NodeID, a.Machine)
		}
	}
	for _, mach := range h.oracle.Machines() {
		st := h.oracle.Machine(mach)
		for p, v := range st.Staged {
			if v == ext {
				t.Errorf("%s is still staged at %s on %s", ext, p, mach)
			}
		}
		for p, tgt := range st.Published {
			if tgt.VolumeID == ext {
				t.Errorf("%s is still published at %s on %s", ext, p, mach)
			}
		}
	}
}

// A release whose NodeUnstage ran but whose answer was lost (a broken
// connection, a node agent's stream breaking mid-step) leaves the staging
// path in doubt. A new claim on that node waits until the release's retry
// has the driver's answer (the unmount may still be running), then
// stages before it publishes: publishing from a path nobody staged mounts
// an empty directory, and the allocation's writes go to the node's root
// disk.
func TestReclaimAfterLostUnstageRestages(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Lost(codes.Unavailable))
	_ = h.w.Assess(h.ctx, ref)
	if st := h.oracle.Machine(machineOf("node1")); len(st.Staged) != 0 {
		t.Fatalf("the lost NodeUnstage did not run: staged %v", st.Staged)
	}

	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	if err := h.claim(ref, "web-2", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("a claim was taken while the release's NodeUnstage on its machine was in doubt")
	}
	noViolations(t, h)
	h.clock.Advance(10 * time.Second)
	_ = h.w.Assess(h.ctx, ref) // web-1's retry settles the unstage
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))

	h.endAndReleaseClean(ref, "web-2", "node1")
}

// A node agent's hello that reports another machine's external node ID (or
// a new one, as after an instance was replaced) must not redirect the
// release of a claim made before: ControllerUnpublish goes to the node ID
// the claim was published to, never the one the node reports now. Sending
// it to node2 detaches the disk under node2's running allocation; sending
// it to a new instance answers OK as a no-op and leaves the old attachment
// behind with the claim freed. A hello the host refuses changes nothing.
func TestAgentHelloDoesNotRedirectControllerUnpublish(t *testing.T) {
	for _, tc := range []struct {
		name, ext string
		replaced  bool // node1's plugin answers ext from now on
	}{
		{name: "another machine's external node ID", ext: "ext-node2"},
		{name: "a replaced instance's new external node ID", ext: "ext-node1-replaced", replaced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1", "node2")
			ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
			for _, a := range [][2]string{{"web-1", "node1"}, {"web-2", "node2"}} {
				h.liveClaim(ref, a[0], a[1])
			}
			before, _ := h.store.Snapshot().NodeByID(nil, "node1")
			if tc.replaced {
				h.nodes["node1"].SetNodeID(tc.ext)
			}
			if _, err := h.hello("node1", h.nodes["node1"].Endpoint(), tc.ext, rootDir); err != nil {
				if after, _ := h.store.Snapshot().NodeByID(nil, "node1"); !equalNodes(before, after) {
					t.Fatalf("a refused hello (%v) changed node1: %+v -> %+v", err, before, after)
				}
				h.agents.connect("node1", true) // the agent stays connected with its old registration
			}
			h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)
			_ = h.w.Assess(h.ctx, ref)
			noViolations(t, h)
			inUse(t, h, ref, "web-2", machineOf("node2"))

			h.endAndReleaseClean(ref, "web-2", "node2")
		})
	}
}

// The same machine registered under two node IDs (same plugin endpoint, so
// the same external node ID and staging paths): releasing an ended claim
// on one ID must not unstage or detach what a running allocation under the
// other ID uses. Staging paths and attachments belong to the machine, not
// to the host's node ID. A registration the host refuses changes nothing.
func TestOneMachineUnderTwoNodeIDsKeepsLiveClaim(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.liveClaim(ref, "web-1", "node1")
	_, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: aliasNode, RootDir: rootDir,
		Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes["node1"].Endpoint()}}})
	if err != nil {
		if n, _ := h.store.Snapshot().NodeByID(nil, aliasNode); n != nil {
			t.Fatalf("a refused registration (%v) recorded node %s", err, aliasNode)
		}
		return // refused: one machine cannot be two nodes
	}
	h.endedClaim(ref, "web-2", aliasNode)
	_ = h.w.Assess(h.ctx, ref)
	noViolations(t, h)
	inUse(t, h, ref, "web-1", machineOf("node1"))

	h.endAndReleaseClean(ref, "web-1", "node1")
}

// A claim made while its node had no plugin endpoint (its agent said hello
// while the driver's socket was away) stages nothing. Once the endpoint is
// back, the next claim on the node must stage (the first claim holds no
// staging path), and a release must not skip the unstage of a path a claim
// really staged because a claim that staged nothing is still taken:
// "staged" is not "taken".
func TestClaimAfterEndpointRegainedStages(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	hello := func(ep string) {
		t.Helper()
		if _, err := h.hello("node1", ep, "ext-node1", rootDir); err != nil {
			t.Fatal(err)
		}
	}
	hello("")
	h.liveClaim(ref, "web-1", "node1")
	hello(h.nodes["node1"].Endpoint())
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))

	// web-2 ends first: its release is the last that staged, so it
	// unstages although web-1 (which staged nothing) is still taken;
	// then web-1's release detaches a disk nothing uses.
	h.mustAlloc("default", "web-2", "node1", structs.AllocComplete)
	_ = h.w.Assess(h.ctx, ref)
	noViolations(t, h)
	if st := h.oracle.Machine(machineOf("node1")); len(st.Staged) != 0 {
		t.Errorf("web-2's release left its staging path staged behind web-1, which staged nothing: %v", st.Staged)
	}
	h.endAndReleaseClean(ref, "web-1", "node1")
}

// releaseAll runs release passes over ref until its claims are gone (the
// clock moved past the harness's backoff between passes), failing if they
// never are.
func (h *harness) releaseAll(ref structs.VolumeRef) {
	h.t.Helper()
	for range 8 {
		_ = h.w.Assess(h.ctx, ref)
		if len(h.vol(ref).Claims) == 0 {
			return
		}
		h.clock.Advance(10 * time.Second)
	}
	for id, c := range h.vol(ref).Claims {
		h.t.Errorf("claim of ended allocation %s never released: %s, last error %v", id, c.State, c.LastError)
	}
}

func equalNodes(a, b *structs.Node) bool { return reflect.DeepEqual(a, b) }

// The steps the attack tests repeat, written once: a claim that must be
// taken and real, a claim that must wait, and the end every scenario is
// judged by.

// claimInUse claims ref for running allocation alloc on node, which must
// be taken, break no CSI precondition, and be real on machine mach.
func (h *harness) claimInUse(ref structs.VolumeRef, alloc, node, mach string) {
	h.t.Helper()
	if err := h.claim(ref, alloc, node, structs.ClaimWrite); err != nil {
		h.t.Fatal(err)
	}
	noViolations(h.t, h)
	inUse(h.t, h, ref, alloc, mach)
}

// refusedWhile checks claimErr, the answer to alloc's claim of ref on
// node's machine while what may still run there: a conflict (whose
// message names want, when set) that broke no CSI precondition. A claim
// taken is shown in use on the machine before the test fails, so the
// failure says what the claim got.
func (h *harness) refusedWhile(ref structs.VolumeRef, alloc, node string, claimErr error, what, want string) {
	h.t.Helper()
	noViolations(h.t, h)
	if claimErr == nil {
		inUse(h.t, h, ref, alloc, machineOf(node))
		h.t.Fatalf("a claim was taken on a machine where %s", what)
	}
	if !errors.Is(claimErr, structs.ErrConflict) {
		h.t.Fatalf("the refusal %v is not a conflict", claimErr)
	}
	if !strings.Contains(claimErr.Error(), want) {
		h.t.Fatalf("the refusal %v does not say what to do (%q)", claimErr, want)
	}
}

// retryRelease moves the clock past the release's backoff and runs a
// pass over ref: the retry that settles a step in doubt.
func (h *harness) retryRelease(ref structs.VolumeRef) {
	h.clock.Advance(10 * time.Second)
	_ = h.w.Assess(h.ctx, ref)
}

// releaseClean releases every claim of ref (releaseAll), then checks that
// no CSI precondition was broken and nothing of ref is left on any
// machine or on the storage.
func (h *harness) releaseClean(ref structs.VolumeRef) {
	h.t.Helper()
	h.releaseAll(ref)
	noViolations(h.t, h)
	nothingLeft(h.t, h, ref)
}

// endAndReleaseClean ends allocation alloc on node, then releaseClean.
func (h *harness) endAndReleaseClean(ref structs.VolumeRef, alloc, node string) {
	h.t.Helper()
	h.mustAlloc(ref.Namespace, alloc, node, structs.AllocComplete)
	h.releaseClean(ref)
}

// machineBackAs force-deregisters node (with the claims it still holds)
// and registers its machine (the same plugin endpoint) again as node id
// with root dir root: a machine back under another name.
func (h *harness) machineBackAs(node, id, root string) {
	h.t.Helper()
	if _, _, err := h.srv.DeregisterNode(h.ctx, node, true); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.srv.RegisterNode(h.ctx, &structs.Node{ID: id, RootDir: root,
		Plugins: map[string]*structs.NodePlugin{testPlugin: {Endpoint: h.nodes[node].Endpoint()}}}); err != nil {
		h.t.Fatal(err)
	}
}

// A claim whose publish fails is rolled back, and the rollback must follow
// the CSI spec's order as a release does: no ControllerUnpublish while the
// volume may still be staged or published on the machine, and no
// NodeUnstage under a target that may be published. A failed undo step
// stops the steps that need it (the attachment is left and logged, never
// detached under a mounted filesystem), and a step whose answer was lost
// may have run: it is undone (NodeUnstage and NodeUnpublish are
// idempotent) like one that answered OK.
func TestRefusedClaimRollbackFollowsSpecOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scripts map[string]csitest.Result
	}{
		{"the rollback's unstage fails", map[string]csitest.Result{
			csitest.NodePublish: {Code: codes.Aborted}, csitest.NodeUnstage: {Code: codes.Aborted}}},
		{"the stage ran and its answer was lost", map[string]csitest.Result{
			csitest.NodeStage: csitest.Lost(codes.Unavailable)}},
		{"the publish ran and its answer was lost", map[string]csitest.Result{
			csitest.NodePublish: csitest.Lost(codes.DeadlineExceeded)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1")
			ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
			for method, r := range tc.scripts {
				h.nodes["node1"].Script(method, r)
			}
			h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
			if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
				t.Fatal("a claim whose node step failed was accepted")
			}
			noViolations(t, h)
		})
	}
}
