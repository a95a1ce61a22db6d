package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// A refused claim's rollback and the release of the same claim send the
// same undo requests, field for field (volume ID, external node ID,
// staging and target paths, secrets): both directions build them with
// attach.Requests from the claim's record and the adapter's answer. An
// undo built apart from its step drifts from the release's (another
// path, another node ID, a secret dropped), and the rollback then leaves
// a mount or an attachment that only the release would have removed.
//
// The claim's NodePublish loses its answer, so the rollback undoes all
// three steps (NodeUnpublish, NodeUnstage, ControllerUnpublish) and
// removes the record; the allocation claims again, ends, and the watcher
// releases it with the same three calls.
func TestRollbackSendsTheReleasesUndo(t *testing.T) {
	h := newHarness(t, "node1")
	ref := structs.VolumeRef{Namespace: "default", ID: "vol1"}
	if _, err := h.srv.RegisterVolumes(h.ctx, []*structs.Volume{{Namespace: ref.Namespace, ID: ref.ID,
		ExternalID: externalID(ref.Namespace, ref.ID), PluginID: testPlugin, AccessMode: structs.AccessSingleNodeWriter,
		AttachmentMode: structs.AttachFilesystem, Secrets: map[string]string{"token": "s3cret"}}}); err != nil {
		t.Fatal(err)
	}
	undos := []struct{ plugin, method string }{
		{"node1", csitest.NodeUnpublish}, {"node1", csitest.NodeUnstage}, {"controller", csitest.ControllerUnpublish},
	}

	h.nodes["node1"].Script(csitest.NodePublish, csitest.Lost(codes.Unavailable))
	h.mustAlloc(ref.Namespace, "web-1", "node1", structs.AllocRunning)
	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err == nil {
		t.Fatal("a claim whose NodePublish lost its answer was accepted")
	}
	noViolations(t, h)
	if c := h.vol(ref).Claims["web-1"]; c != nil {
		t.Fatalf("the rollback did not undo every step: the record stays %+v", c)
	}
	rollback := map[string]proto.Message{}
	for _, u := range undos {
		calls := h.calls(u.plugin, u.method, ref)
		if len(calls) != 1 {
			t.Fatalf("the rollback sent %s %d time(s), want 1", u.method, len(calls))
		}
		rollback[u.method] = calls[0].Request
	}

	if err := h.claim(ref, "web-1", "node1", structs.ClaimWrite); err != nil {
		t.Fatal(err)
	}
	h.endAndReleaseClean(ref, "web-1", "node1")
	for _, u := range undos {
		calls := h.calls(u.plugin, u.method, ref)
		if len(calls) != 2 {
			t.Fatalf("%s sent %d time(s) in all, want the rollback's and the release's", u.method, len(calls))
		}
		if got := calls[1].Request; !proto.Equal(got, rollback[u.method]) {
			t.Errorf("%s: the release sent\n  %v\nthe rollback sent\n  %v", u.method, got, rollback[u.method])
		}
	}
	if got := h.calls("controller", csitest.ControllerUnpublish, ref)[1]; got.NodeID == "" {
		t.Errorf("ControllerUnpublish sent without a node ID: %+v", got)
	}
}
