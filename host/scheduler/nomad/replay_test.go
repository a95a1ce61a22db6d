package nomad

import (
	"errors"
	"maps"
	"testing"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/internal/testutil"
)

// TestRestoredNomadRunsAnAllocationSeenEnded: Nomad is rebuilt from a
// snapshot taken while a5 ran; the bridge had seen a5 only ended (index 4)
// and never mirrored it. The rebuilt cluster runs a5 (listed at 3, its
// client's update at 4) and its index passes the cursor before the bridge
// re-lists: a5 must be mirrored running and its volume claimed. A memory
// of allocations seen ended, which the reset check did not look at,
// dropped every report of a5 up to index 4 (a helper's attack on an
// earlier form of the replay fix).
func TestRestoredNomadRunsAnAllocationSeenEnded(t *testing.T) {
	h := newHarness(t)
	running := h.nomad.setAlloc(web("a5", "n1", clientRunning, "run"), metaV1) // index 3
	h.nomad.mu.Lock()
	snapAllocs, snapIndex := maps.Clone(h.nomad.allocs), h.nomad.index
	h.nomad.mu.Unlock()
	ended := h.nomad.setAlloc(web("a5", "n1", clientComplete, "run"), nil) // index 4
	h.start()                                                              // lists a5 ended, never mirrored
	if h.alloc("a5") != nil {
		t.Fatal("setup: a5 mirrored")
	}

	// The old cluster is lost.
	h.nomad.push(t, Batch{Err: errors.New("unexpected EOF")})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	testutil.WaitFor(t, "the failure's event", func() bool { return len(h.events("unexpected EOF")) == 1 })
	cursor := h.cursor()

	// Rebuilt from the snapshot at index 3 (a5 running); a5's client
	// reports it running (index 4), other jobs move the index past the
	// cursor.
	h.nomad.mu.Lock()
	h.nomad.allocs, h.nomad.index = snapAllocs, snapIndex
	h.nomad.mu.Unlock()
	again := h.nomad.setAlloc(web("a5", "n1", clientRunning, "run"), nil)
	others, listIndex := h.pastCursorThenReconnect(cursor)
	h.nomad.push(t, Batch{Index: again.ModifyIndex, Allocs: []Alloc{again}})
	h.nomad.push(t, Batch{Index: others[len(others)-1].ModifyIndex, Allocs: others})
	h.mirrorMarker("m2")
	h.relist()

	if got := h.alloc("a5"); got == nil {
		t.Fatalf("Nomad (rebuilt from a snapshot) lists a5 running at %d and streams it running at %d (list index %d >= cursor %d, resets %d); "+
			"volhost's store has no a5 and v1 is not claimed for it (claimed=%v): every report up to the index %d it was once seen ended at is dropped",
			running.ModifyIndex, again.ModifyIndex, listIndex, cursor, h.bridge.Status().Resets, h.claimed("v1", "a5"), ended.ModifyIndex)
	}
}

// TestReplayNeverRevivesAnAllocationCollectedBeforeTheList: a5 ran (3)
// and completed (4) and Nomad collected it (5) before the bridge listed:
// the list (at 5) does not show it. The stream starts at the node list's
// index + 1 (2 + 1) and replays a5 running: an allocation event at or
// below the allocation list's index is not news, so a5 is never mirrored
// nor its volume claimed.
func TestReplayNeverRevivesAnAllocationCollectedBeforeTheList(t *testing.T) {
	h := newHarness(t)
	running, done := h.ranAndEnded()
	h.nomad.remove(nil, []string{"a5"}) // index 5: collected
	h.startReplaying(running)
	// The stream replays a5's running; its completion follows in the
	// next batch (after the test looked).
	h.nomad.push(t, Batch{Index: running.ModifyIndex, Allocs: []Alloc{running}})
	h.mirrorMarker("m1")
	if got := h.alloc("a5"); got != nil {
		t.Errorf("a5 completed (index %d) and was collected before the list the stream follows; the replay of its running "+
			"(index %d) put it in volhost's store as %s and its claim of v1 is wanted (claimed %v)",
			done.ModifyIndex, running.ModifyIndex, got.ClientStatus, h.claimed("v1", "a5"))
	}
	h.nomad.push(t, Batch{Index: done.ModifyIndex, Allocs: []Alloc{done}})
}
