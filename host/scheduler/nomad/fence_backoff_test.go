package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a1 is held (lost on n2, down). Nomad becomes unreachable; an operator
// fences n2 while the bridge backs off. Releasing a1 needs nothing from
// Nomad (the fence attests n2 is off): the bridge judges held allocations
// again during a backoff too. It did so only inside a session, so while
// Nomad stayed unreachable a1 stayed held however many backoffs passed.
func TestBridgeActsOnAFenceDuringABackoff(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")

	h.unreachableAndRetrying()
	h.fence("n2")
	testutil.WaitFor(t, "a1 released once n2 is fenced, Nomad unreachable", func() bool {
		return h.alloc("a1").ClientStatus == structs.AllocLost
	})
}
