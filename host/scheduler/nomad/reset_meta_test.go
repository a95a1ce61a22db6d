package nomad

import (
	"errors"
	"testing"
	"time"

	"github.com/volhost/volhost/host/scheduler"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// Nomad's state is reset (a dev agent restarted: its index starts again,
// below volhost's cursor). The reset re-list lists b1 (volume v1), whose
// job meta cannot be read. The reset commits the cursor below b1's
// ModifyIndex: b1 was not mirrored. A reset's cursor ignored the
// allocations not mirrored.
func TestBridgeResetKeepsTheCursorBelowAnAllocWhoseMetaFailed(t *testing.T) {
	h := newHarness(t)
	h.start()
	h.mirrorRunning("a1", "n1")
	done := h.nomad.setAlloc(web("a1", "n1", clientComplete, "run"), nil)
	h.nomad.push(t, Batch{Allocs: []Alloc{done}})
	h.waitStatus("a1", structs.AllocComplete)
	h.mirrorMarker("m1")
	testutil.WaitFor(t, "the cursor past a1's end", func() bool { return h.cursor() >= done.ModifyIndex })
	before := h.cursor()

	h.nomad.push(t, Batch{Err: errors.New("unexpected EOF")})
	testutil.WaitFor(t, "the retrying state", func() bool { return h.bridge.Status().State == scheduler.StateRetrying })
	// Nomad restarted with its state lost: only the two nodes (indexes 1
	// and 2) and a new allocation b1 (index 3) whose meta read fails.
	h.nomad.mu.Lock()
	h.nomad.allocs, h.nomad.index = map[string]Alloc{}, 2
	h.nomad.mu.Unlock()
	b1 := h.nomad.setAlloc(web("b1", "n1", clientRunning, "run"), nil)
	n := h.nomad.streamCount()
	h.advance(time.Second)
	testutil.WaitFor(t, "the next event stream", func() bool { return h.nomad.streamCount() > n })
	testutil.WaitFor(t, "the reset", func() bool { return h.bridge.Status().Resets == 1 })

	if h.alloc("b1") == nil && h.cursor() >= b1.ModifyIndex {
		t.Fatalf("reset re-list: cursor %d (was %d) >= b1's index %d, but b1 is not mirrored (its meta read failed): "+
			"the reset passed the cursor over an uncommitted change", h.cursor(), before, b1.ModifyIndex)
	}
}
