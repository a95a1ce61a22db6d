package server

import (
	"testing"
	"time"

	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
)

// A release held for a plugin that does not answer counts toward
// stuck_after like any hold, so the volume shows as stuck; once the
// plugin answers again as the claim's machine, the release runs there
// and the volume is no longer stuck.
func TestHeldReleaseRunsOnceThePluginAnswersAgain(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	if err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: h.nodes["node1"].Endpoint(), ProbeError: "connection refused"}); err != nil {
		t.Fatal(err)
	}
	_ = h.w.Assess(h.ctx, ref)
	h.clock.Advance(2 * time.Minute)
	_ = h.w.Assess(h.ctx, ref)
	if h.vol(ref).Stuck == nil {
		t.Fatal("a release held past stuck_after for a plugin that does not answer: the volume is not marked stuck")
	}
	if err := h.helloPlugin("node1", &structs.NodePlugin{Endpoint: h.nodes["node1"].Endpoint(), ExternalNodeID: "ext-node1", StageUnstage: true}); err != nil {
		t.Fatal(err)
	}
	_ = h.w.Assess(h.ctx, ref)
	if n := len(h.calls("node1", csitest.NodeUnpublish, ref)); n != 1 {
		t.Fatalf("after the plugin answers again: %d NodeUnpublish on machine-node1, want 1 (claim %+v, stuck %+v)", n, h.vol(ref).Claims["web-1"], h.vol(ref).Stuck)
	}
	if v := h.vol(ref); v.Stuck != nil || v.Claims["web-1"] != nil {
		t.Fatalf("after release: stuck %+v, claim %+v", v.Stuck, v.Claims["web-1"])
	}
}
