package server

import (
	"context"
	"errors"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// A ControllerUnpublishVolume whose caller's deadline passed while the
// storage goes on detaching: a claim on that machine now finds the
// attachment still there (ControllerPublish answers OK, idempotent), stages
// and publishes, and the detach then ends under its mount (CSI spec:
// ControllerUnpublish only after every node step on the node). While a
// release's detach on a machine is in doubt, a claim there must wait.
func TestClaimWaitsForDetachInDoubt(t *testing.T) {
	h := newHarness(t, "node1")
	h.withCSITimeout(200 * time.Millisecond)
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	detaching := make(chan struct{})
	h.ctl.Script(csitest.ControllerUnpublish, csitest.Result{Block: detaching, Ran: true})
	_ = h.w.Assess(h.ctx, ref)
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimNodeDetached {
		close(detaching)
		t.Fatalf("the release did not stop at its ControllerUnpublish: %+v", c)
	}

	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	err := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
	close(detaching) // the storage's detach ends
	if err := h.ctl.WaitFor(h.ctx, func() bool { return h.ctl.InFlight(csitest.ControllerUnpublish) == 0 }); err != nil {
		t.Fatal(err)
	}
	h.refusedWhile(ref, "web-2", "node1", err, "a ControllerUnpublish of the volume was in doubt", "")

	// The release's retry settles the detach; the claim is then taken.
	h.retryRelease(ref)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	h.endAndReleaseClean(ref, "web-2", "node1")
}

// `volume deregister -force` while a release's NodeUnstage is in doubt
// (its caller's deadline passed, the driver still unmounting), then the
// usual workaround: the volume registered again and claimed on the same
// machine. The new row has no claim that says an unstage may still run;
// the leftover does, and the claim waits for the operator to clear it
// (a claim taken there would stage and publish, and the old unmount end
// under it).
func TestForceDeregisterDuringUnstageThenReclaim(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	h.withCSITimeout(200 * time.Millisecond)
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	unmounting := make(chan struct{})
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Block: unmounting, Ran: true})
	_ = h.w.Assess(h.ctx, ref)
	if c := h.vol(ref).Claims["web-1"]; c == nil || !c.NodeUnpublished {
		close(unmounting)
		t.Fatalf("the release did not stop at its unstage: %+v", c)
	}
	leftovers, _, err := h.srv.DeregisterVolume(h.ctx, ref.Namespace, ref.ID, true)
	if err != nil || len(leftovers) != 1 || leftovers[0].InDoubt != "NodeUnstageVolume" {
		close(unmounting)
		t.Fatalf("force deregister: %v, leftovers %+v: want one with its unstage in doubt", err, leftovers)
	}
	h.volume(ref.Namespace, ref.ID, structs.AccessMultiNodeMultiWrite)
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	claimErr := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
	close(unmounting)
	if err := h.nodes["node1"].WaitFor(h.ctx, func() bool { return h.nodes["node1"].InFlight(csitest.NodeUnstage) == 0 }); err != nil {
		t.Fatal(err)
	}
	h.refusedWhile(ref, "web-2", "node1", claimErr, "a force-deregistered claim's NodeUnstage was in doubt", "leftovers -clear")
	// Another machine is not held up.
	h.liveClaim(ref, "web-3", "node2")
	// The operator checked the machine and clears the leftover.
	if _, err := h.srv.ClearLeftovers(h.ctx, []string{leftovers[0].ID}, false); err != nil {
		t.Fatal(err)
	}
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	inUse(t, h, ref, "web-3", machineOf("node2"))
	h.mustAlloc("default", "web-2", "node1", structs.AllocComplete)
	h.endAndReleaseClean(ref, "web-3", "node2")
}

// A release step that failed with a definitive answer (Internal: the
// driver says it did not unmount or detach) is tried again; the leader
// that sends the retry steps down (or dies) before the answer, and
// writes nothing more. The driver goes on with the retry. Committed
// state still holds the first, definitive, answer: read as "the call is
// over", it lets a claim on that machine publish while the unmount or
// detach of the retry runs, and ends under the new claim's mount.
func TestClaimWaitsForRetryInDoubtAfterDefinitiveFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		server func(h *harness) *csitest.Server
		state  structs.ClaimState
	}{
		{"unstage", csitest.NodeUnstage, func(h *harness) *csitest.Server { return h.nodes["node1"] }, structs.ClaimTaken},
		{"detach", csitest.ControllerUnpublish, func(h *harness) *csitest.Server { return h.ctl }, structs.ClaimNodeDetached},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1")
			ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
			h.endedClaim(ref, "web-1", "node1")
			srv := tc.server(h)
			srv.Script(tc.method, csitest.Result{Code: codes.Internal, Message: "device busy"})
			_ = h.w.Assess(h.ctx, ref)
			if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != tc.state || c.LastError == nil || c.LastError.Code != uint32(codes.Internal) {
				t.Fatalf("the release did not stop at its failed %s: %+v", tc.method, c)
			}

			// The retry: the driver runs it, slowly; its leader steps
			// down while it waits (the pass's context ends).
			running := make(chan struct{})
			srv.Script(tc.method, csitest.Result{Block: running, Ran: true})
			h.clock.Advance(10 * time.Second)
			pass, stepDown := context.WithCancel(h.ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = h.w.Assess(pass, ref) }()
			if err := srv.WaitFor(h.ctx, func() bool { return srv.InFlight(tc.method) == 1 }); err != nil {
				close(running)
				t.Fatal(err)
			}
			stepDown()
			<-done

			h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
			claimErr := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
			close(running) // the driver's retry ends
			if err := srv.WaitFor(h.ctx, func() bool { return srv.InFlight(tc.method) == 0 }); err != nil {
				t.Fatal(err)
			}
			h.refusedWhile(ref, "web-2", "node1", claimErr, "a retried "+tc.method+" was in doubt", "")
			h.retryRelease(ref)
			h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
			h.endAndReleaseClean(ref, "web-2", "node1")
		})
	}
}

// The same doubt on a claim still publishing: a leader died mid-publish
// (or a refused claim's rollback stopped), the allocation ended, and the
// watcher's release of the publishing record sent NodeUnstage, whose
// answer was lost while the driver goes on unmounting. A claim on that
// machine must wait for it as for a taken claim's.
func TestClaimWaitsForPublishingClaimsUnstageInDoubt(t *testing.T) {
	h := newHarness(t, "node1")
	h.withCSITimeout(200 * time.Millisecond)
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	crashMidPublish(t, h, ref, "web-1")
	h.mustAlloc("default", "web-1", "node1", structs.AllocComplete)
	unmounting := make(chan struct{})
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Block: unmounting, Ran: true})
	_ = h.w.Assess(h.ctx, ref)
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimPublishing || !c.NodeUnpublished {
		close(unmounting)
		t.Fatalf("the release did not stop at its unstage: %+v", c)
	}

	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	claimErr := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
	close(unmounting)
	if err := h.nodes["node1"].WaitFor(h.ctx, func() bool { return h.nodes["node1"].InFlight(csitest.NodeUnstage) == 0 }); err != nil {
		t.Fatal(err)
	}
	h.refusedWhile(ref, "web-2", "node1", claimErr, "a publishing claim's NodeUnstage was in doubt", "")
	h.retryRelease(ref)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	h.endAndReleaseClean(ref, "web-2", "node1")
}

// A node force-deregistered while it holds a claim comes back under
// another node ID on the same machine (same plugin, same external node
// ID) but with another root_dir: a claim there would stage the volume at a
// second staging path on one machine (CSI spec: NodeStageVolume is once
// per volume per node), and the old claim's release, seeing the new claim
// staged on its machine, leaves the first path staged; the last release's
// ControllerUnpublish then detaches the disk under it. One volume has one
// staging path per machine: a claim that would stage another is refused
// until the claims holding the first one are released.
func TestMachineBackWithAnotherRootDirStagesNoSecondPath(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.machineBackAs("node1", aliasNode, altRoot)
	h.mustAlloc("default", "web-2", aliasNode, structs.AllocRunning)
	claimErr := h.claim(ref, "web-2", aliasNode, structs.ClaimWrite)
	noViolations(t, h)
	if claimErr == nil {
		_ = h.w.Assess(h.ctx, ref)
		noViolations(t, h)
		h.mustAlloc("default", "web-2", aliasNode, structs.AllocComplete)
		h.releaseClean(ref)
		t.Fatal("a claim staged a second staging path for the volume on one machine")
	}
	if !errors.Is(claimErr, structs.ErrConflict) {
		t.Fatalf("the refusal %v is not a conflict", claimErr)
	}
	// Once the old claim is released through the machine, the claim is
	// taken at the new root.
	h.releaseAll(ref)
	if err := h.claim(ref, "web-2", aliasNode, structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	noViolations(t, h)
	inUse(t, h, ref, "web-2", machineOf("node1"))
	h.mustAlloc("default", "web-2", aliasNode, structs.AllocComplete)
	h.releaseClean(ref)
}

// `volume deregister -force` of a single-node volume whose claim was never
// released (its allocation ended, the release had not run): the leftover
// says the disk may still be attached to node1. The volume registered
// again for the same disk and claimed on node2 would attach the disk to a
// second machine (CSI spec: a volume without a MULTI_NODE capability is
// published to one node at a time; a multi-attach disk would take it). The
// claim waits until the operator has cleaned the leftover up and cleared
// it; on node1 too, where the mounts it lists may still be.
func TestForceDeregisteredAttachmentKeepsDiskFromAnotherMachine(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.endedClaim(ref, "web-1", "node1")
	leftovers, _, err := h.srv.DeregisterVolume(h.ctx, ref.Namespace, ref.ID, true)
	if err != nil || len(leftovers) != 1 {
		t.Fatalf("force deregister: %v, leftovers %+v", err, leftovers)
	}
	h.volume(ref.Namespace, ref.ID, structs.AccessSingleNodeWriter)
	for _, node := range []string{"node2", "node1"} {
		alloc := "web-on-" + node
		h.mustAlloc("default", alloc, node, structs.AllocRunning)
		claimErr := h.claim(ref, alloc, node, structs.ClaimWrite)
		h.refusedWhile(ref, alloc, node, claimErr, "a force-deregistered claim of the disk may still hold it on node1", "leftovers -clear")
		h.mustAlloc("default", alloc, node, structs.AllocFailed)
	}
	// The operator cleans node1 up (here: the release's own steps, by hand)
	// and clears the leftover; the disk is then claimed on node2.
	h.cleanUpByHand(ref, "web-1", "node1")
	if _, err := h.srv.ClearLeftovers(h.ctx, []string{leftovers[0].ID}, false); err != nil {
		t.Fatal(err)
	}
	h.mustAlloc("default", "web-2", "node2", structs.AllocRunning)
	h.claimInUse(ref, "web-2", "node2", machineOf("node2"))
	h.endAndReleaseClean(ref, "web-2", "node2")
}

// cleanUpByHand is what an operator does for a leftover: unpublish,
// unstage and detach the disk of alloc's claim on node, straight at the
// plugins.
func (h *harness) cleanUpByHand(ref structs.VolumeRef, alloc, node string) {
	h.t.Helper()
	staging, target := csi.Paths(rootDir, testPlugin, ref.Namespace, ref.ID, alloc)
	ext, ep := externalID(ref.Namespace, ref.ID), h.nodes[node].Endpoint()
	if err := h.srv.csi.NodeUnpublishVolume(h.ctx, ep, &csipb.NodeUnpublishVolumeRequest{VolumeId: ext, TargetPath: target}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.srv.csi.NodeUnstageVolume(h.ctx, ep, &csipb.NodeUnstageVolumeRequest{VolumeId: ext, StagingTargetPath: staging}); err != nil {
		h.t.Fatal(err)
	}
	if err := h.srv.csi.ControllerUnpublishVolume(h.ctx, h.ctl.Endpoint(), &csipb.ControllerUnpublishVolumeRequest{VolumeId: ext, NodeId: "ext-" + node}); err != nil {
		h.t.Fatal(err)
	}
}

// An allocation ends and its claim's release is half done (target
// unpublished, unstage refused); the allocation is then deleted (the
// scheduler garbage-collected it) and an allocation with the same ID
// written again as running. Terminal is for good for an allocation that
// exists, but a deleted one came back: its claim, still taken, is then
// answered to its "retry" as published (no CSI call) while its target is
// gone, and the release stops under a live allocation. An allocation that
// a claim still names is not written again once gone.
func TestDeletedAllocationWithClaimDoesNotComeBack(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Code: codes.Internal, Message: "device busy"})
	_ = h.w.Assess(h.ctx, ref)
	if c := h.vol(ref).Claims["web-1"]; c == nil || !c.NodeUnpublished {
		t.Fatalf("the release did not stop after its NodeUnpublish: %+v", c)
	}
	if _, _, err := h.cluster.Apply(h.ctx, structs.AllocDeleteType, &structs.AllocDeleteRequest{AllocIDs: []string{"web-1"}}); err != nil {
		t.Fatal(err)
	}
	upErr := h.alloc("default", "web-1", "node1", structs.AllocRunning)
	if upErr == nil {
		claimErr := h.claim(ref, "web-1", "node1", structs.ClaimWrite)
		if claimErr == nil {
			inUse(t, h, ref, "web-1", machineOf("node1"))
		}
		t.Fatalf("a deleted allocation whose claim is being released was written again as running (claim: %v)", claimErr)
	}
	if !errors.Is(upErr, structs.ErrConflict) {
		t.Fatalf("the refusal %v is not a conflict", upErr)
	}
	h.releaseClean(ref)
}

// A refused claim's rollback loses the answer of its NodeUnstage undo
// (the caller's deadline passed while the driver goes on unmounting): the
// rollback stops and the claim's publishing record stays. Unless it says
// an unstage may still run (as a release records node_unpublished before
// its own NodeUnstage), a claim of the volume on that machine stages
// (idempotent: the path is still staged), publishes, and the rollback's
// unmount ends under it.
func TestClaimWaitsForRollbackUnstageInDoubt(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the CSI client's 10 s call timeout")
	}
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	h.nodes["node1"].Script(csitest.NodePublish, csitest.Result{Code: codes.Internal, Message: "mount failed"})
	unmounting := make(chan struct{})
	h.nodes["node1"].Script(csitest.NodeUnstage, csitest.Result{Block: unmounting, Ran: true})
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
		close(unmounting)
		t.Fatal("the claim whose NodePublish failed was taken")
	}
	h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
	claimErr := h.claim(ref, "web-2", "node1", structs.ClaimWrite)
	close(unmounting)
	if err := h.nodes["node1"].WaitFor(h.ctx, func() bool { return h.nodes["node1"].InFlight(csitest.NodeUnstage) == 0 }); err != nil {
		t.Fatal(err)
	}
	h.refusedWhile(ref, "web-2", "node1", claimErr, "a rollback's NodeUnstage was in doubt", "")
	if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimPublishing || !c.UnstageInDoubt() {
		t.Fatalf("the refused claim's record does not say its unstage is in doubt: %+v", c)
	}
	// The retry of the refused claim does not take the record up.
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("a retry took up a record whose rollback's unstage is in doubt")
	}
	// The allocation fails; the watcher releases the record, re-sending
	// the unstage, and the claim on the machine is then taken.
	h.mustAlloc("default", "web-1", "node1", structs.AllocFailed)
	h.releaseAll(ref)
	h.claimInUse(ref, "web-2", "node1", machineOf("node1"))
	h.endAndReleaseClean(ref, "web-2", "node1")
}
