package server

import (
	"testing"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// The claim path writes its claim ahead of the first CSI call (state
// publishing). These tests are judged by the plugins' Oracle and call
// logs: what the machines hold and which calls the CSI spec forbids.

// A refused claim whose NodeUnpublish undo fails must not go on to
// NodeUnstage (a target may still be published from the staging path) nor
// ControllerUnpublish (the disk would be detached under a mount): the
// rollback stops there, and the claim stays recorded, publishing, so that
// once the allocation ends the watcher releases what is left in the
// spec's order.
func TestRefusedClaimStopsAtFailedUndo(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish csitest.Result // NodePublish's answer: it ran, or may have
		undo    csitest.Result // the NodeUnpublish undo's answer
	}{
		{"the unpublish undo fails", csitest.Lost(codes.DeadlineExceeded), csitest.Result{Code: codes.Internal}},
		{"the unpublish undo loses its answer", csitest.Lost(codes.Unavailable), csitest.Lost(codes.Unavailable)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1")
			ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
			h.nodes["node1"].Script(csitest.NodePublish, tc.publish)
			h.nodes["node1"].Script(csitest.NodeUnpublish, tc.undo)
			h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
			if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
				t.Fatal("a claim whose NodePublish failed was accepted")
			}
			noViolations(t, h)
			if n := len(h.calls("node1", csitest.NodeUnstage, ref)); n != 0 {
				t.Errorf("the rollback sent NodeUnstage %d time(s) after its NodeUnpublish failed", n)
			}
			if n := len(h.calls("controller", csitest.ControllerUnpublish, ref)); n != 0 {
				t.Errorf("the rollback sent ControllerUnpublish %d time(s) after its NodeUnpublish failed", n)
			}
			c := h.vol(ref).Claims["web-1"]
			if c == nil || c.State != structs.ClaimPublishing {
				t.Fatalf("the refused claim whose rollback stopped is not kept publishing: %+v", c)
			}
			// It counts against the single-writer volume: no second writer
			// slips in while the disk may still be attached and mounted.
			h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
			if err := h.claim(ref, "web-2", "node1", structs.ClaimWrite); err == nil {
				t.Fatal("a second writer claimed the volume while a refused claim's attachment was left")
			}
			h.mustAlloc("default", "web-2", "node1", structs.AllocComplete)

			h.endAndReleaseClean(ref, "web-1", "node1")
		})
	}
}

// A refused claim whose every undo succeeded leaves nothing: no record,
// nothing staged, published or attached.
func TestRefusedClaimRolledBackIsRemoved(t *testing.T) {
	h := newHarness(t, "node1")
	ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
	h.nodes["node1"].Script(csitest.NodePublish, csitest.Result{Code: codes.Internal})
	h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("a claim whose NodePublish failed was accepted")
	}
	noViolations(t, h)
	if c := h.vol(ref).Claims["web-1"]; c != nil {
		t.Fatalf("a claim rolled back whole is still recorded: %+v", c)
	}
	nothingLeft(t, h, ref)
	// The allocation may claim again: its retry publishes from scratch.
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	inUse(t, h, ref, "web-1", machineOf("node1"))
}

// crashMidPublish leaves what a leader that died mid-publish leaves: the
// claim of alloc on node1 written ahead (publishing, under the current
// term) and its ControllerPublish, NodeStage and NodePublish run, with no
// confirmation.
func crashMidPublish(t *testing.T, h *harness, ref structs.VolumeRef, alloc string) {
	t.Helper()
	staging, target := csi.Paths(rootDir, testPlugin, ref.Namespace, ref.ID, alloc)
	c := &structs.Claim{AllocID: alloc, NodeID: "node1", Mode: structs.ClaimWrite, State: structs.ClaimPublishing,
		ExternalNodeID: "ext-node1", StagingPath: staging, TargetPath: target}
	if _, _, err := h.cluster.Apply(h.ctx, structs.VolumeClaimType, &structs.VolumeClaimRequest{
		Namespace: ref.Namespace, VolumeID: ref.ID, Claim: c, Term: h.cluster.ReadyTerm()}); err != nil {
		t.Fatal(err)
	}
	v := h.vol(ref)
	capability := csi.Capability(v.AccessMode, v.AttachmentMode, v.FSType, v.MountFlags)
	ext, ep := externalID(ref.Namespace, ref.ID), h.nodes["node1"].Endpoint()
	if _, err := h.srv.csi.ControllerPublishVolume(h.ctx, h.ctl.Endpoint(), &csipb.ControllerPublishVolumeRequest{
		VolumeId: ext, NodeId: "ext-node1", VolumeCapability: capability}); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.csi.NodeStageVolume(h.ctx, ep, &csipb.NodeStageVolumeRequest{
		VolumeId: ext, StagingTargetPath: staging, VolumeCapability: capability}); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.csi.NodePublishVolume(h.ctx, ep, &csipb.NodePublishVolumeRequest{
		VolumeId: ext, StagingTargetPath: staging, TargetPath: target, VolumeCapability: capability}); err != nil {
		t.Fatal(err)
	}
}

// A leader that dies between its claim's first CSI call and the claim's
// confirmation leaves a publishing record. A new server (nothing in
// memory) finishes it when the same claim is retried, and releases it like
// any claim once its allocation ends; either way nothing is left attached,
// staged or published, and no call breaks the CSI spec's order.
func TestLeaderCrashMidPublish(t *testing.T) {
	t.Run("a retry finishes the claim", func(t *testing.T) {
		h := newHarness(t, "node1")
		ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
		h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
		crashMidPublish(t, h, ref, "web-1")
		h.restartServer(h.cluster)

		// Another writer is refused meanwhile: the record holds the volume.
		h.mustAlloc("default", "web-2", "node1", structs.AllocRunning)
		if err := h.claim(ref, "web-2", "node1", structs.ClaimWrite); err == nil {
			t.Fatal("a second writer claimed a volume whose first claim is publishing")
		}
		h.mustAlloc("default", "web-2", "node1", structs.AllocComplete)

		got, err := h.srv.ClaimVolume(h.ctx, &structs.ClaimRequest{Namespace: ref.Namespace, VolumeID: ref.ID,
			AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite})
		if err != nil {
			t.Fatal(err)
		}
		if got.State != structs.ClaimTaken || h.vol(ref).Claims["web-1"].State != structs.ClaimTaken {
			t.Fatalf("the retry did not confirm the claim taken: answered %s, recorded %+v", got.State, h.vol(ref).Claims["web-1"])
		}
		noViolations(t, h)
		inUse(t, h, ref, "web-1", machineOf("node1"))
		// Idempotent: once taken, the same request answers the record.
		again, err := h.srv.ClaimVolume(h.ctx, &structs.ClaimRequest{Namespace: ref.Namespace, VolumeID: ref.ID,
			AllocID: "web-1", NodeID: "node1", Mode: structs.ClaimWrite})
		if err != nil || again.ModifyIndex != h.vol(ref).Claims["web-1"].ModifyIndex {
			t.Fatalf("the retry of a taken claim did not answer the record: %+v, %v", again, err)
		}

		h.endAndReleaseClean(ref, "web-1", "node1")
	})
	t.Run("the allocation ends first", func(t *testing.T) {
		h := newHarness(t, "node1")
		ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
		h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
		crashMidPublish(t, h, ref, "web-1")
		h.mustAlloc("default", "web-1", "node1", structs.AllocFailed)
		// A retry of an ended allocation's claim is refused, and sends nothing.
		before := len(h.nodes["node1"].AllCalls())
		if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
			t.Fatal("the claim of an ended allocation was taken up")
		}
		if n := len(h.nodes["node1"].AllCalls()); n != before {
			t.Fatalf("a refused retry sent %d node call(s)", n-before)
		}
		h.releaseClean(ref)
		for _, m := range []string{csitest.NodeUnpublish, csitest.NodeUnstage} {
			if len(h.calls("node1", m, ref)) == 0 {
				t.Errorf("the release of the publishing claim sent no %s", m)
			}
		}
	})
}

// A retry that takes up a publishing record left by a leader that died
// mid-publish cannot know what that run's calls did: its target may be
// published. When the retry's own publish fails, its rollback must not
// undo the staging or the attachment the record accounts for: a
// NodeUnstage under the earlier run's target, or a ControllerUnpublish
// under its mount, is what the CSI spec forbids. The record stays and the
// watcher releases it in the spec's order once the allocation ends.
func TestResumedClaimRollbackKeepsEarlierRunsSteps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		publish csitest.Result
	}{
		{"the retry's NodePublish fails", csitest.Result{Code: codes.Internal}},
		{"the retry's NodePublish loses its answer", csitest.Lost(codes.Unavailable)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, "node1")
			ref := h.volume("default", "vol1", structs.AccessSingleNodeWriter)
			h.mustAlloc("default", "web-1", "node1", structs.AllocRunning)
			crashMidPublish(t, h, ref, "web-1")
			h.restartServer(h.cluster)

			h.nodes["node1"].Script(csitest.NodePublish, tc.publish)
			if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
				t.Fatal("a retry whose NodePublish failed was accepted")
			}
			noViolations(t, h)
			if c := h.vol(ref).Claims["web-1"]; c == nil || c.State != structs.ClaimPublishing {
				t.Fatalf("the record of the earlier run is not kept publishing: %+v", c)
			}
			h.endAndReleaseClean(ref, "web-1", "node1")
		})
	}
}
