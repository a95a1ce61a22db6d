package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a1 is held in term 1 (Held 1). Leadership moves; before the new leader's
// bridge runs, Nomad's client comes back and reports a1 complete. The new
// run mirrors a1 complete and holds nothing, and its status says so: the
// count of the last leadership's holds was kept (only a hold of this run
// changing rewrote it).
func TestBridgeHeldCountIsThisLeadershipsOwn(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")
	h.stop()

	h.nomad.setNode(Node{ID: "id-n2", Name: "n2", Status: nodeReady})
	h.nomad.setAlloc(web("a1", "n2", clientComplete, "stop"), nil)
	h.w.mu.Lock()
	h.w.term = 2
	h.w.mu.Unlock()
	h.startTerm(2)
	h.waitStatus("a1", structs.AllocComplete)
	testutil.WaitFor(t, "the new leader's re-list", func() bool { return !h.bridge.Status().LastList.IsZero() })
	if st := h.bridge.Status(); st.Held != 0 {
		t.Fatalf("status Held = %d after the new leader mirrored a1 complete (nothing held; problems %v)", st.Held, st.Problems)
	}
}
