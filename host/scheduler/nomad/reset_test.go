package nomad

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// The bridge's bookkeeping against Nomad's history (a helper's hunt): a
// change Nomad reports must end up in volhost's store, and an older report
// must never overwrite a newer one. Each test judges by the store against
// what the fake Nomad reported.

// TestRestoredNomadPastTheCursorIsAReset: Nomad is rebuilt from a
// snapshot (disaster recovery onto a new cluster: its raft index starts
// again at the snapshot's, below the old cluster's). While the bridge
// backs off, the new cluster writes past volhost's cursor, so the re-list
// sees no index going backwards (index >= cursor). It lists a1 at an index
// below the one the bridge remembers for it although the list is past that
// one: Nomad's history changed, and the bridge resets. Before, it kept its
// memory of the old cluster's ModifyIndexes and dropped the client's
// report that a1 completed as an "older replay", in the stream and at
// every re-list: a1 stayed running in volhost, its claims never released.
func TestRestoredNomadPastTheCursorIsAReset(t *testing.T) {
	h := newHarness(t)
	stop2 := h.nomadLostAfterSnapshot()
	cursor := h.cursor()

	// A new cluster restored from the snapshot at index 3; a1's client
	// reports it complete (index 4), and other jobs' activity moves the
	// index past volhost's cursor before the bridge's backoff ends.
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "stop"), nil)
	others, listIndex := h.pastCursorThenReconnect(cursor)
	// The new cluster's stream, from the list's index + 1 on, and its
	// replay of the completion too: the bridge sees a1 complete both in
	// the list and in the stream.
	h.nomad.push(t, Batch{Index: done.ModifyIndex, Allocs: []Alloc{done}})
	h.nomad.push(t, Batch{Index: others[len(others)-1].ModifyIndex, Allocs: others})
	h.mirrorMarker("m2")
	h.relist() // and the periodic re-list: it does not save it either

	if got := h.alloc("a1").ClientStatus; got != structs.AllocComplete {
		t.Fatalf("Nomad reports a1 complete (index %d, in the list and the stream; list index %d >= cursor %d, resets %d), "+
			"but volhost's store holds it %s: the completion was dropped as older than the ModifyIndex %d the bridge "+
			"remembers from before Nomad's state was restored, and its claims are never released",
			done.ModifyIndex, listIndex, cursor, h.bridge.Status().Resets, got, stop2.ModifyIndex)
	}
}

// TestReplayNeverRevivesAnAllocationListedEnded: the stream starts at the
// older of the two lists' index + 1 (the node list's, when no node
// changed lately), so it replays allocation changes the allocation list
// already showed: a5, listed complete and never mirrored, must not be
// mirrored running from the replay of its earlier "running", nor its
// volume claimed (it was).
func TestReplayNeverRevivesAnAllocationListedEnded(t *testing.T) {
	h := newHarness(t)
	running, done := h.ranAndEnded()
	h.startReplaying(running)
	// Nomad's stream from index 3: a5 running, then a5 complete.
	h.nomad.push(t, Batch{Index: running.ModifyIndex, Allocs: []Alloc{running}})
	h.nomad.push(t, Batch{Index: done.ModifyIndex, Allocs: []Alloc{done}})
	h.mirrorMarker("m1")

	if got := h.alloc("a5"); got != nil {
		t.Fatalf("a5 was listed complete (index %d) before the stream replayed its older running (index %d); "+
			"volhost's store now holds it (%s; v1 claimed by it: %v) and %d claim(s) of v1 were tried for it: the stale "+
			"replay overwrote the list's newer status", done.ModifyIndex, running.ModifyIndex, got.ClientStatus,
			h.claimed("v1", "a5"), h.attempts("a5"))
	}
}

// mirrorMarker has Nomad place allocation id (volume v2) on n1 and waits
// until it is mirrored running: every batch pushed before it was applied.
func (h *harness) mirrorMarker(id string) {
	h.t.Helper()
	m := h.nomad.setAlloc(web(id, "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(h.t, Batch{Index: m.ModifyIndex, Allocs: []Alloc{m}})
	h.waitStatus(id, structs.AllocRunning)
}

// TestRestoredNomadBelowTheCursorIsAReset is the first test's interleaving
// with the bridge re-listing before the rebuilt cluster's index passes
// volhost's cursor: the re-list sees the index go back, resets its
// memory, and the completion is mirrored. (Held: the boundary of the
// failure above.)
func TestRestoredNomadBelowTheCursorIsAReset(t *testing.T) {
	h := newHarness(t)
	h.nomadLostAfterSnapshot()
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "stop"), nil)
	n := h.nomad.streamCount()
	h.advance(time.Second)
	testutil.WaitFor(t, "the next event stream", func() bool { return h.nomad.streamCount() > n })
	h.nomad.push(t, Batch{Index: done.ModifyIndex, Allocs: []Alloc{done}})
	h.waitStatus("a1", structs.AllocComplete)
	if r := h.bridge.Status().Resets; r != 1 {
		t.Fatalf("resets %d, want 1", r)
	}
}

// nomadLostAfterSnapshot: a1 is mirrored running (index 3, committed) and
// Nomad's state at that point is the snapshot a new cluster is later
// rebuilt from. The old cluster goes on: a1's job is stopped, its client
// still runs it (shutdown_delay) and updates it twice (task events, the
// second at the returned one's index): nothing changes in volhost, so no
// commit, but the bridge remembers that index. Then the old cluster is
// lost (the stream drops, the bridge backs off) and the fake Nomad is put
// back to the snapshot.
func (h *harness) nomadLostAfterSnapshot() (stop2 Alloc) {
	t := h.t
	t.Helper()
	h.start()
	h.mirrorRunning("a1", "n1")
	h.nomad.mu.Lock()
	snapAllocs, snapIndex := maps.Clone(h.nomad.allocs), h.nomad.index
	h.nomad.mu.Unlock()
	stop1 := h.nomad.setAlloc(web("a1", "n1", clientRunning, "stop"), nil)
	stop2 = h.nomad.setAlloc(web("a1", "n1", clientRunning, "stop"), nil)
	h.nomad.push(t, Batch{Index: stop1.ModifyIndex, Allocs: []Alloc{stop1}})
	h.nomad.push(t, Batch{Index: stop2.ModifyIndex, Allocs: []Alloc{stop2}})
	h.mirrorMarker("m1") // once mirrored, both batches were applied
	h.nomad.push(t, Batch{Err: errors.New("unexpected EOF")})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	testutil.WaitFor(t, "the failure's event", func() bool { return len(h.events("unexpected EOF")) == 1 })
	h.nomad.mu.Lock()
	h.nomad.allocs, h.nomad.index = snapAllocs, snapIndex
	h.nomad.mu.Unlock()
	return stop2
}

// pastCursorThenReconnect has other jobs' allocations move Nomad's index
// to at least cursor, then ends the bridge's backoff and waits for its
// next event stream (after its re-list, at the returned index). It
// answers those allocations.
func (h *harness) pastCursorThenReconnect(cursor uint64) (others []Alloc, listIndex uint64) {
	t := h.t
	t.Helper()
	for _, id := range []string{"x1", "x2", "x3"} {
		others = append(others, h.nomad.setAlloc(web(id, "n2", clientRunning, "run"), map[string]string{"team": "x"}))
	}
	h.nomad.mu.Lock()
	listIndex = h.nomad.index
	h.nomad.mu.Unlock()
	if listIndex < cursor {
		t.Fatalf("setup: Nomad's index %d is below the cursor %d", listIndex, cursor)
	}
	n := h.nomad.streamCount()
	h.advance(time.Second)
	testutil.WaitFor(t, "the next event stream", func() bool { return h.nomad.streamCount() > n })
	return others, listIndex
}

// startReplaying starts the bridge and checks that its first stream
// starts at or before a's index: it replays a.
func (h *harness) startReplaying(a Alloc) {
	h.t.Helper()
	h.start()
	h.nomad.mu.Lock()
	from := h.nomad.from[0]
	h.nomad.mu.Unlock()
	if from > a.ModifyIndex {
		h.t.Fatalf("setup: the stream starts at %d, after %s's %s at %d", from, a.ID, a.ClientStatus, a.ModifyIndex)
	}
}

// ranAndEnded: the nodes last changed at index 2 (so the stream starts
// there, replaying allocations), then a batch job's allocation a5 ran
// (index 3) and completed (index 4) before the bridge started, or while it
// was reconnecting.
func (h *harness) ranAndEnded() (running, done Alloc) {
	h.nomad.mu.Lock()
	h.nomad.nodesIndex = h.nomad.index
	h.nomad.mu.Unlock()
	running = h.nomad.setAlloc(web("a5", "n1", clientRunning, "run"), metaV1)
	done = h.nomad.setAlloc(web("a5", "n1", clientComplete, "run"), nil)
	return running, done
}
