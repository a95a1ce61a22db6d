package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// Node n1 is reinstalled: Nomad registers it again under a new node ID
// (same name, the default node_id = "name" mapping) and keeps listing the
// old ID as down until its node GC (24h by default). Nomad says n1 is
// ready and runs a1 there: volhost n1 stays ready at every re-list. Each
// Nomad node judged alone against one snapshot, the old ID's "down"
// wrote n1 down and the new ID's "ready" saw the stale ready and did
// nothing: n1 flapped at every re-list, and while down no claim could be
// taken there for the allocation Nomad runs.
func TestBridgeReinstalledNodeUnderANewIDStaysReady(t *testing.T) {
	h := newHarness(t)
	h.start()
	old := h.nomad.setNode(Node{ID: "id-n1", Name: "n1", Status: nodeDown})
	h.nomad.push(t, Batch{Nodes: []Node{old}})
	testutil.WaitFor(t, "n1 down", h.nodeIs("n1", structs.NodeDown))
	fresh := h.nomad.setNode(Node{ID: "id-n1-new", Name: "n1", Status: nodeReady})
	h.nomad.push(t, Batch{Nodes: []Node{fresh}})
	testutil.WaitFor(t, "n1 ready under its new Nomad ID", h.nodeIs("n1", structs.NodeReady))

	a := Alloc{ID: "a1", Namespace: "default", NodeID: "id-n1-new", NodeName: "n1", JobID: "web", TaskGroup: "g",
		ClientStatus: clientRunning, DesiredStatus: "run"}
	a = h.nomad.setAlloc(a, metaV1)
	h.nomad.push(t, Batch{Allocs: []Alloc{a}})
	h.waitStatus("a1", structs.AllocRunning)

	for i := range 4 {
		h.relist()
		vn, _ := h.store.Snapshot().NodeByID(nil, "n1")
		if vn.Status != structs.NodeReady {
			t.Fatalf("re-list %d: Nomad lists n1 ready (ID id-n1-new, running a1) and the old ID id-n1 down; volhost n1 is %s (%q), "+
				"so a1's claim of v1 cannot be taken (claimed=%v)", i+1, vn.Status, vn.StatusReason, h.claimed("v1", "a1"))
		}
	}
}
