package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// Nomad places a1 (volume v1) on Nomad node n3, which volhost does not
// know yet (its agent registers a moment later). a1 cannot be mirrored,
// like an allocation whose meta read failed, and the cursor stays below
// its index. Once n3 registers (the nodes table moves, the nodes watch
// fires) a1 is mirrored and claimed, without waiting for a periodic
// re-list. Before, the cursor passed a1 and only held allocations were
// judged again.
func TestBridgeAllocOnAnUnknownNodeIsMirroredOnceItRegisters(t *testing.T) {
	h := newHarness(t)
	h.start()
	a := h.onUnknownNode("a1")
	if h.alloc("a1") == nil && h.cursor() >= a.ModifyIndex {
		t.Fatalf("a1 placed on n3 (unknown to volhost) at index %d: cursor %d committed past it while a1 was not mirrored",
			a.ModifyIndex, h.cursor())
	}
	if err := h.w.apply(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n3", Status: structs.NodeReady,
		Plugins: map[string]*structs.NodePlugin{"p": {PluginID: "p", Endpoint: "unix:///tmp/n3.sock", ExternalNodeID: "ext-n3"}}}}, 0); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "a1 mirrored and claimed once n3 registers, without a periodic re-list", func() bool {
		return h.alloc("a1") != nil && h.claimed("v1", "a1")
	})
}
