package server

import (
	"errors"
	"testing"
	"time"

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
	noViolations(t, h)
	if err == nil {
		inUse(t, h, ref, "web-2", machineOf("node1"))
		t.Fatal("a claim was taken on a machine where a ControllerUnpublish of the volume was in doubt")
	}
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("the refusal %v is not a conflict", err)
	}

	// The release's retry settles the detach; the claim is then taken.
	h.clock.Advance(10 * time.Second)
	_ = h.w.Assess(h.ctx, ref)
	if err := h.claim(ref, "web-2", "node1", structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	noViolations(t, h)
	inUse(t, h, ref, "web-2", machineOf("node1"))
	h.mustAlloc("default", "web-2", "node1", structs.AllocComplete)
	h.releaseAll(ref)
	noViolations(t, h)
	nothingLeft(t, h, ref)
}
