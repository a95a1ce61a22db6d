package nomad

import (
	"testing"
)

// Nomad places a1 (volume v1) but the read of its job's meta fails (a
// transient error: the job read timed out). Nothing of a1 is mirrored,
// and the batch's problem event is committed with the cursor below a1's
// index: at it, the store said Nomad's changes up to there were mirrored
// while a1's placement (and its claim) was not.
func TestBridgeCursorStaysBelowAnAllocWhoseMetaFailed(t *testing.T) {
	h := newHarness(t)
	h.start()
	a := h.metaUnreadable("a1")
	if h.alloc("a1") == nil && h.cursor() >= a.ModifyIndex {
		t.Fatalf("cursor %d >= a1's index %d, but a1 is not mirrored (its meta read failed): the cursor passed an uncommitted change",
			h.cursor(), a.ModifyIndex)
	}
}
