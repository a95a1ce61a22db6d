package nomad

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// a1 is placed on n3, which volhost does not know, then ends there
// (complete) before n3 ever registers. Nothing is left to mirror (an
// allocation that ended before it was mirrored has nothing to release),
// and the cursor moves past a1's completion. It stayed below it at every
// batch and re-list.
func TestBridgeAllocEndedOnAnUnknownNodeFreesTheCursor(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.onUnknownNode("a1")
	done := h.nomad.setAlloc(web("a1", "n3", clientComplete, "stop"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{done}})
	h.mirrorMarker("m1")
	h.relist()
	h.relist()
	h.nomad.mu.Lock()
	idx := h.nomad.index
	h.nomad.mu.Unlock()
	if c := h.cursor(); c < idx {
		t.Fatalf("a1 ended on n3 (unknown to volhost) at index %d, nothing left to mirror; after two re-lists the cursor is %d, below Nomad's %d (problems %v)",
			done.ModifyIndex, c, idx, h.bridge.Status().Problems)
	}
	if p := h.problemsOf("allocation a1 "); len(p) > 0 {
		t.Fatalf("a1 ended before it was ever mirrored, yet problem lines remain: %v", p)
	}
}

// a1 is placed on n3 (unknown to volhost); Nomad then collects a1. Its
// problem line goes, and a later change of volhost's nodes table (any
// node's status) does not pin the cursor below a1's old index again.
// The tracked allocation was judged again forever.
func TestBridgeAllocCollectedOnAnUnknownNodeLeavesNoProblem(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.onUnknownNode("a1")
	h.nomad.remove(nil, []string{"a1"})
	h.relist()
	for _, p := range h.bridge.Status().Problems {
		if strings.Contains(p.Message, "allocation a1 ") {
			t.Errorf("Nomad collected a1, yet the problem line %q says: %s", p.Key, p.Message)
		}
	}
	// Any nodes-table change (here an operator fences and unfences n1).
	if err := h.w.apply(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n1",
		Fence: &structs.NodeFence{Reason: "test", Source: structs.FenceSourceOperator, Time: t0}}, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.w.apply(structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: "n1"}, 0); err != nil {
		t.Fatal(err)
	}
	h.mirrorMarker("m1")
	m2 := h.nomad.setAlloc(web("m2", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{m2}})
	h.waitStatus("m2", structs.AllocRunning)
	if c := h.cursor(); c < m2.ModifyIndex {
		t.Fatalf("a1 (collected by Nomad at the last re-list) still pins the cursor: m2 mirrored at index %d, cursor %d", m2.ModifyIndex, c)
	}
}
