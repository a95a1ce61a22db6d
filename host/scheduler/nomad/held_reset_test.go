package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a1 is held (lost on a down n2). Nomad loses its state (a dev agent
// restarted): its index starts again below the cursor, it lists n1 and n2
// ready and no allocation. The reset re-list releases a1 (vanished on a
// ready node), and the status counts no held allocation: the reset
// replaced what it tracked without recounting.
func TestBridgeResetRecountsTheHeld(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")

	h.nomad.mu.Lock()
	h.nomad.nodes = map[string]Node{
		"id-n1": {ID: "id-n1", Name: "n1", Status: nodeReady, ModifyIndex: 1},
		"id-n2": {ID: "id-n2", Name: "n2", Status: nodeReady, ModifyIndex: 2},
	}
	h.nomad.allocs = map[string]Alloc{}
	h.nomad.index = 2
	h.nomad.mu.Unlock()
	h.reconnect()
	h.waitStatus("a1", structs.AllocLost)
	testutil.WaitFor(t, "the reset re-list", func() bool { return h.bridge.Status().Resets > 0 })
	if st := h.bridge.Status(); st.Held != 0 {
		t.Fatalf("a1 released (%s) by the reset's re-list, nothing held, but status Held = %d (problems %v)",
			h.alloc("a1").ClientStatus, st.Held, st.Problems)
	}
}
