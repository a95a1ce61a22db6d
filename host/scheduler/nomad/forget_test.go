package nomad

import (
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// a1's job meta cannot be read (its job purged), then a1 completes in
// Nomad: nothing is mirrored, and its problem line goes (it stayed until
// the next leadership).
func TestBridgeEndedAllocLeavesNoMetaProblem(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.metaUnreadable("a1")
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "stop"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{done}})
	h.mirrorMarker("m1")
	h.relist()
	if p := h.problemsOf("a1"); len(p) > 0 {
		t.Fatalf("a1 ended in Nomad before it was ever mirrored, yet problem lines remain: %v", p)
	}
}

// Same, a1 collected without event.
func TestBridgeCollectedAllocLeavesNoMetaProblem(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.metaUnreadable("a1")
	h.nomad.remove(nil, []string{"a1"})
	h.relist()
	h.relist()
	if p := h.problemsOf("a1"); len(p) > 0 {
		t.Fatalf("Nomad collected a1 (never mirrored), yet problem lines remain: %v", p)
	}
}

// One batch carries a1 running then a1 complete (new to volhost): a1 is
// not mirrored at all. The running was left pending when the complete
// forgot a1, and committed: the row stayed running past the cursor.
func TestBridgeRunningThenCompleteInOneBatchIsNotMirroredRunning(t *testing.T) {
	h := newHarness(t)
	h.start()
	run := h.nomad.setAlloc(web("a1", "n1", clientRunning, "run"), metaV1)
	done := web("a1", "n1", clientComplete, "stop") // same raft index: one Nomad entry updated a1 twice
	done.ModifyIndex = run.ModifyIndex
	h.nomad.setAlloc(done, nil)
	h.nomad.push(t, Batch{Index: run.ModifyIndex, Allocs: []Alloc{run, done}})
	h.mirrorMarker("m1")
	if a := h.alloc("a1"); a != nil && !a.ClientStatus.Terminal() {
		t.Errorf("Nomad reported a1 complete (index %d) in the batch, yet the store holds a1 %s (cursor %d, claims tried %d)", done.ModifyIndex, a.ClientStatus, h.cursor(), h.attempts("a1"))
		h.relist()
		t.Logf("after a re-list: a1 %s", h.alloc("a1").ClientStatus)
	}
}

// a1 is mirrored running and claimed on n2; n2 goes down and a1 is lost
// (held). The commit of a batch fails, then Nomad collects a1; after the
// re-list a1 is still held with its claim (forgetting only touches what
// was never mirrored).
func TestBridgeHeldStaysHeldAfterAFailedCommitAndACollect(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.heldOnDownNode("a1", "n2")
	h.failNextSync(structs.ErrNoLeader)
	h.mirrorMarker2(t, "m1")
	h.nomad.remove(nil, []string{"a1"})
	h.reconnect()
	h.relist()
	if a := h.alloc("a1"); a == nil || a.ClientStatus.Terminal() || !h.claimed("v1", "a1") || h.bridge.Status().Held != 1 {
		t.Fatalf("a1 held on down unfenced n2: row %+v claimed %v held %d", a, h.claimed("v1", "a1"), h.bridge.Status().Held)
	}
}

func (h *harness) mirrorMarker2(t *testing.T, id string) {
	m := h.nomad.setAlloc(web(id, "n1", clientRunning, "run"), map[string]string{"volhost_volume_d": "v2"})
	h.nomad.push(t, Batch{Allocs: []Alloc{m}})
}
