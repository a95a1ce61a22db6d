package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a1 (volume v1) is placed on n3, which volhost does not know. Nomad
// stops and collects a1; a re-list sees it gone. Then n3 registers in
// volhost: a1 is neither mirrored nor claimed. The re-list forgot it (no
// longer listed, never mirrored); kept, it was judged from the running
// the bridge last saw once n3 registered, and v1 claimed for an
// allocation Nomad no longer had.
func TestBridgeAllocCollectedBeforeItsNodeRegistersIsNeverMirrored(t *testing.T) {
	h := newHarness(t)
	h.start()
	n3 := h.nomad.setNode(Node{ID: "id-n3", Name: "n3", Status: nodeReady})
	a := h.nomad.setAlloc(web("a1", "n3", clientRunning, "run"), metaV1)
	h.nomad.push(t, Batch{Nodes: []Node{n3}, Allocs: []Alloc{a}})
	h.mirrorMarker("m0")
	h.nomad.remove(nil, []string{"a1"}) // stopped and collected (system gc: no event)
	h.relist()

	if err := h.w.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n3", Status: structs.NodeReady,
		Plugins: map[string]*structs.NodePlugin{"p": {PluginID: "p", Endpoint: "unix:///tmp/n3.sock", ExternalNodeID: "ext-n3"}}}}, 0); err != nil {
		t.Fatal(err)
	}
	m1 := h.nomad.setAlloc(web("m1", "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{m1}})
	h.waitStatus("m1", structs.AllocRunning)
	testutil.WaitFor(t, "m1's claim (a1's, if any, was queued before it)", func() bool { return h.claimed("v2", "m1") })
	if got := h.alloc("a1"); got != nil || h.attempts("a1") > 0 {
		var st structs.AllocClientStatus
		if got != nil {
			st = got.ClientStatus
		}
		t.Fatalf("Nomad collected a1 before n3 registered, yet the store holds a1 %q and %d claim(s) of v1 were tried for it (v1 claimed: %v)",
			st, h.attempts("a1"), h.claimed("v1", "a1"))
	}
}
