package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// An operator marks the direct node n1 down (PUT /v1/node/n1/status: its
// own word, heartbeat_lost cleared), while Nomad still reports n1 ready.
// The bridge's next re-list (every relist_interval, or any event about
// the node) must not bring n1 back: the bridge has no operator:write, and
// the store refuses a node token the same undo.
func TestBridgeRelistLeavesAnOperatorsDown(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.relist() // the bridge has seen n1 ready in Nomad
	if err := h.w.apply(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n1", Status: structs.NodeDown, LastSeen: t0}, 0); err != nil {
		t.Fatal(err)
	}
	h.relist()
	if vn, _ := h.store.Snapshot().NodeByID(nil, "n1"); vn.Status != structs.NodeDown {
		t.Fatalf("the operator's down on n1 undone by the Nomad bridge's re-list: status=%q heartbeat_lost=%v reason=%q",
			vn.Status, vn.HeartbeatLost, vn.StatusReason)
	}
}

// Nomad reported n1 down (the bridge wrote it down as a lost heartbeat);
// the operator then marks it down itself (its word: the node's claims go
// on without node steps). When Nomad reports n1 ready again the bridge
// must leave the operator's down alone, as the tracker does
// (Tracker.Beat moves only a heartbeat-lost node).
func TestBridgeLeavesAnOperatorsDownOverNomadsDown(t *testing.T) {
	h := newHarness(t)
	h.start()
	n1 := h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeDown})
	h.nomad.push(t, Batch{Nodes: []Node{n1}})
	testutil.WaitFor(t, "node n1 down", h.nodeIs("n1", structs.NodeDown))
	if err := h.w.apply(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n1", Status: structs.NodeDown, LastSeen: t0}, 0); err != nil {
		t.Fatal(err)
	}
	if vn, _ := h.store.Snapshot().NodeByID(nil, "n1"); vn.HeartbeatLost {
		t.Fatalf("operator's down kept heartbeat_lost: %+v", vn)
	}
	n1 = h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeReady})
	h.nomad.push(t, Batch{Nodes: []Node{n1}})
	testutil.WaitFor(t, "the batch applied", func() bool { return h.streamDrained() })
	h.relist()
	if vn, _ := h.store.Snapshot().NodeByID(nil, "n1"); vn.Status != structs.NodeDown {
		t.Fatalf("the operator's down on n1 undone by the Nomad bridge: status=%q heartbeat_lost=%v reason=%q",
			vn.Status, vn.HeartbeatLost, vn.StatusReason)
	}
}
