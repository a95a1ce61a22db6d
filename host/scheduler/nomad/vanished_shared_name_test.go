package nomad

import (
	"testing"

	"github.com/volhost/volhost/internal/testutil"
)

// Two Nomad nodes map to volhost node n1 (node_id = "name"): the machine
// id-n1 that ran a1, now down in Nomad (a1 lost, held), and id-n1-b,
// ready (a reinstall under a new ID, or a second machine wrongly given
// the same name). Leadership moves; Nomad garbage-collects a1 meanwhile.
// The new leader's re-list finds a1 vanished and, not having seen it in
// this leadership, judges it by the Nomad node among those mapping to n1
// that is not ready: a1 stays held. Picked by map iteration order, the
// ready one released a1 as "its node is up" although the node it ran on
// was down and unfenced.
func TestBridgeVanishedOnASharedNameIsJudgedByTheDownNode(t *testing.T) {
	const runs = 16
	released := 0
	for i := range runs {
		h := newHarness(t)
		h.start()
		h.claimRunning("a1", "n1")
		b := h.nomad.setNode(Node{ID: "id-n1-b", Name: "n1", Status: nodeReady})
		h.nomad.push(t, Batch{Nodes: []Node{b}})
		h.lostOnDownNode("a1", "n1")
		h.stop()

		h.nomad.remove(nil, []string{"a1"}) // job GC while no bridge runs
		h.w.mu.Lock()
		h.w.term = 2
		h.w.mu.Unlock()
		h.startTerm(2)
		testutil.WaitFor(t, "the new leader's re-list", func() bool { return !h.bridge.Status().LastList.IsZero() })
		if got := h.alloc("a1").ClientStatus; got.Terminal() {
			released++
			t.Logf("run %d: a1 %s, v1 claimed by a1: %v", i, got, h.claimed("v1", "a1"))
		}
		h.stop()
	}
	if released > 0 {
		t.Fatalf("%d of %d runs released a1 (lost on Nomad node id-n1, down and unfenced) because its vanish was judged against id-n1-b, "+
			"another Nomad node with the same name that is ready", released, runs)
	}
}
