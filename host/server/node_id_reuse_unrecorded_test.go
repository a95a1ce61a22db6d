package server

import (
	"context"
	"errors"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/csi/csitest"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher"
)

// noNodeIDAdapter is the spec adapter answering no node ID, which the host
// accepts (abi.CheckAdapterIDs: an empty node_id passes; the claim path
// refuses it only for a plugin with PUBLISH_UNPUBLISH_VOLUME): a module for
// a node-only driver that has no use for the node ID. Its claims record no
// external node ID.
type noNodeIDAdapter struct{ watcher.SpecAdapter }

func (a noNodeIDAdapter) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	resp, err := a.SpecAdapter.AdaptRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	resp.NodeID = ""
	return resp, nil
}

// A node ID freed with a claim held that recorded no external node ID (a
// node-only plugin whose adapter answers none): web-1, staged and
// published on machine-node1, when node1 is force-deregistered. Another
// machine (machine-node2, answering ext-node2) registers under the freed
// ID with the same root_dir. Nothing tells it from the claim's machine
// (the claim names none, the node row that did is gone), so it is refused
// until the claim is released (a helper's attack on the first form of the
// rule). Accepted, a running allocation's claim on the new node1
// published on machine-node2 from a staging path staged on machine-node1
// only (the same node ID taken for the same machine: StagedFor), and
// web-1's release sent its NodeUnpublish to machine-node2 while its
// mounts stayed on machine-node1. Judged by the Oracle and the driver's
// record.
func TestNodeIDOfAHeldClaimWithoutItsMachineIsRefused(t *testing.T) {
	h := newHarness(t, "node1", "node2")
	// A node-only driver: no controller, so no node ID is needed.
	if _, err := h.srv.RegisterPlugin(h.ctx, &structs.Plugin{ID: testPlugin}); err != nil {
		t.Fatal(err)
	}
	h.mods.set("default", watcher.DefaultPolicy{}, noNodeIDAdapter{})
	ref := h.volume("default", "vol1", structs.AccessMultiNodeMultiWrite)
	h.endedClaim(ref, "web-1", "node1")
	web1 := h.vol(ref).Claims["web-1"]
	if web1.ExternalNodeID != "" || web1.StagingPath == "" {
		t.Fatalf("web-1's claim: external node ID %q, staging %q; want none recorded, staged", web1.ExternalNodeID, web1.StagingPath)
	}
	err := h.node2TakesNode1sID()
	if errors.Is(err, structs.ErrConflict) {
		return // held
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Errorf("machine-node2 (ext-node2) registered under node1, on which web-1's claim (published on machine-node1) is held")

	// What follows from it on machine-node2.
	h.liveClaim(ref, "web-2", "node1")
	_ = h.w.Assess(h.ctx, ref) // web-1's release
	for _, v := range h.oracle.Violations() {
		if v.Machine == machineOf("node2") && v.Rule != csitest.RuleAttachedFirst { // no controller here
			t.Errorf("CSI spec violated on machine-node2: %s", v)
		}
	}
	for _, m := range []string{"NodeUnstageVolume", "NodeUnpublishVolume"} {
		for _, c := range h.nodes["node2"].Calls(m) {
			if c.TargetPath == web1.TargetPath || (m == "NodeUnstageVolume" && c.StagingPath == web1.StagingPath) {
				t.Errorf("web-1's release sent %s (%s%s) to machine-node2", m, c.StagingPath, c.TargetPath)
			}
		}
	}
	if st := h.oracle.Machine(machineOf("node1")); len(st.Published) > 0 {
		t.Logf("still on machine-node1, which no release will reach: published %v, staged %v", st.Published, st.Staged)
	}
}
