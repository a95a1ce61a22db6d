package nomad

import (
	"fmt"
	"testing"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// A batch (a1's completion) whose commit failed with an error other than
// ErrNoLeader/ErrStaleTerm (here ErrOutcomeUnknown for an entry that did
// not reach the log; a validation refusal behaves the same) is listed
// again, and the error's event is committed with the cursor where it
// was: at the failed batch's index, the store said a1's completion was
// mirrored while a1 was still running in volhost.
func TestBridgeCursorStaysBelowAFailedBatch(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	before := h.cursor()
	h.failNextSync(fmt.Errorf("committing: %w", structs.ErrOutcomeUnknown))
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{done}})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	testutil.WaitFor(t, "the failure's event", func() bool { return len(h.events("outcome is unknown")) == 1 })
	if got := h.alloc("a1").ClientStatus; got == structs.AllocRunning && h.cursor() >= done.ModifyIndex {
		t.Fatalf("cursor moved from %d to %d (a1's completion at index %d) although that batch's commit failed: a1 is still %s in volhost",
			before, h.cursor(), done.ModifyIndex, got)
	}
}
