package nomad

import (
	"fmt"
	"testing"
	"time"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// a1 is held (lost on n2, down in Nomad). An operator fences n2; the
// session's reheld releases a1 but its commit finds no leader (a
// transient election). The session fails and Nomad is unreachable from
// then on. A fence needs nothing from Nomad to release what it held
// (TestBridgeActsOnAFenceDuringABackoff): a1 is released in the backoff.
// Forgotten before the commit (the pending release then dropped, the
// fence's watch already fired), a1 stayed running with its claim however
// many backoffs passed, until Nomad answered again.
func TestBridgeFenceReleaseWhoseCommitFailedIsRetriedInTheBackoff(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")

	h.unreachable()
	h.failNextSync(fmt.Errorf("committing: %w", structs.ErrNoLeader))
	h.fence("n2")
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	backoff := time.Second
	for range 5 {
		f := h.bridge.Status().Failures
		h.advance(backoff)
		backoff *= 2
		testutil.WaitFor(t, "the next failed session", func() bool { return h.bridge.Status().Failures > f })
	}
	if got := h.alloc("a1").ClientStatus; got != structs.AllocLost {
		t.Fatalf("n2 fenced, a1 still %s after 5 backoffs (Nomad unreachable): the release whose commit failed was dropped "+
			"and a1 forgotten; the fence is acted on only when Nomad answers again (held %d)", got, h.bridge.Status().Held)
	}
}
