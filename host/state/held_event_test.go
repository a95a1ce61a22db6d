package state

import (
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A claim whose attempt failed and which is then held (its node went gone
// or lost) is announced as held, not as the same failed attempt again;
// lifting the hold is not a failure either. Only a new attempt is.
func TestCheckpointEventsAfterAFailedAttempt(t *testing.T) {
	f := newFixture(t)
	f.must(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-sw",
		Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite}})
	f.setAlloc("a1", structs.AllocComplete)
	checkpoint := func(mutate func(c *structs.Claim)) *structs.Event {
		t.Helper()
		c := f.volume("default", "vol-sw").Claims["a1"].Copy()
		mutate(c)
		f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c})
		evs := f.events()
		return evs[len(evs)-1]
	}
	lastErr := &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unpublish", Message: "node n1 is not connected to this server"}
	steps := []struct {
		name    string
		mutate  func(c *structs.Claim)
		typ     string
		message string
	}{
		{"attempt 1 fails", func(c *structs.Claim) { c.Attempts, c.LastError = 1, lastErr },
			structs.EventClaimFailed, "claim release attempt 1 failed at taken"},
		{"node gone: held", func(c *structs.Claim) {
			c.Hold = &structs.ClaimHold{Module: "volhost", Reason: "node n1 is gone: run volhost node fence"}
		}, structs.EventClaimHeld, "claim held at taken by volhost: node n1 is gone"},
		{"node lost: held again", func(c *structs.Claim) {
			c.Hold = &structs.ClaimHold{Module: "volhost", Reason: "node n1 is lost"}
		}, structs.EventClaimHeld, "claim held at taken by volhost: node n1 is lost"},
		{"node back: hold lifted", func(c *structs.Claim) { c.Hold = nil },
			structs.EventClaimTransition, "claim at taken: hold by volhost lifted, attempt 2 next"},
		{"attempt 2 fails", func(c *structs.Claim) { c.Attempts = 2 },
			structs.EventClaimFailed, "claim release attempt 2 failed at taken"},
		{"attempt 3 fails and is held at once", func(c *structs.Claim) {
			c.Attempts, c.Hold = 3, &structs.ClaimHold{Module: "volhost", Reason: "node n1 is down"}
		}, structs.EventClaimFailed, "claim release attempt 3 failed at taken"},
	}
	for _, s := range steps {
		e := checkpoint(s.mutate)
		if e.Type != s.typ || !strings.HasPrefix(e.Message, s.message) {
			t.Errorf("%s: event %s %q, want %s %q", s.name, e.Type, e.Message, s.typ, s.message)
		}
	}
}
