package state

import (
	"errors"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// TestCheckpointFree: a checkpoint at controller-detached with Free set
// (one raft write fewer per claim) applies both transitions in one write, each with its event,
// or, refused, neither; the checks of a ready-to-free checkpoint of its
// own (the allocation must not run) hold for the freeing half too.
func TestCheckpointFree(t *testing.T) {
	free := func(f *fixture, vol, alloc string, state structs.ClaimState, unpublished bool) *structs.ClaimCheckpointRequest {
		c := f.volume("default", vol).Claims[alloc].Copy()
		c.State = state
		return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: vol, Claim: c,
			ControllerUnpublished: unpublished, Free: true}
	}
	t.Run("applies both transitions in one write", func(t *testing.T) {
		f := newFixture(t)
		f.claim("vol-sw", "a1", structs.ClaimWrite)
		f.setAlloc("a1", structs.AllocComplete)
		if err := f.checkpoint("vol-sw", "a1", structs.ClaimNodeDetached); err != nil {
			t.Fatal(err)
		}
		before := len(f.events())
		f.must(structs.ClaimCheckpointType, free(f, "vol-sw", "a1", structs.ClaimControllerDetached, true))
		v := f.volume("default", "vol-sw")
		if len(v.Claims) != 0 || v.ModifyIndex != f.idx {
			t.Fatalf("volume after the freeing checkpoint: claims %v at index %d, want none at %d", v.Claims, v.ModifyIndex, f.idx)
		}
		evs := f.events()[before:]
		want := []string{"claim node-detached -> controller-detached", "claim controller-detached -> ready-to-free: released and removed"}
		if len(evs) != len(want) {
			t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
		}
		for i, ev := range evs {
			if ev.Message != want[i] || ev.Index != f.idx || ev.Type != structs.EventClaimTransition || ev.AllocID != "a1" {
				t.Errorf("event %d: %+v, want %q at index %d", i, ev, want[i], f.idx)
			}
		}
		checkStats(t, f.s)
	})
	t.Run("in a batch, refused alone", func(t *testing.T) {
		f := newFixture(t)
		f.claim("vol-sw", "a1", structs.ClaimWrite)
		f.claim("vol-mw", "a2", structs.ClaimWrite)
		f.setAlloc("a1", structs.AllocComplete)
		f.setAlloc("a2", structs.AllocComplete)
		for _, ck := range [][2]string{{"vol-sw", "a1"}, {"vol-mw", "a2"}} {
			if err := f.checkpoint(ck[0], ck[1], structs.ClaimNodeDetached); err != nil {
				t.Fatal(err)
			}
		}
		resp := f.must(structs.ClaimCheckpointBatchType, &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{
			free(f, "vol-sw", "a1", structs.ClaimControllerDetached, true),
			free(f, "vol-mw", "a2", structs.ClaimNodeDetached, false), // not controller-detached: refused
		}})
		errs := resp.([]error)
		var ve *structs.ValidationError
		if errs[0] != nil || !errors.As(errs[1], &ve) {
			t.Fatalf("batch answers %v, want nil and a validation error", errs)
		}
		if len(f.volume("default", "vol-sw").Claims) != 0 {
			t.Error("a1 was not freed")
		}
		if s := f.volume("default", "vol-mw").Claims["a2"].State; s != structs.ClaimNodeDetached {
			t.Errorf("refused a2 is %s, want node-detached", s)
		}
		checkStats(t, f.s)
	})
	refusals := []struct {
		name  string
		setup func(*fixture) *structs.ClaimCheckpointRequest
		want  error // nil: a validation error
	}{
		{"not at controller-detached", func(f *fixture) *structs.ClaimCheckpointRequest {
			f.claim("vol-sw", "a1", structs.ClaimWrite)
			f.setAlloc("a1", structs.AllocComplete)
			return free(f, "vol-sw", "a1", structs.ClaimNodeDetached, false)
		}, nil},
		{"allocation running", func(f *fixture) *structs.ClaimCheckpointRequest {
			f.claim("vol-sw", "a1", structs.ClaimWrite)
			return free(f, "vol-sw", "a1", structs.ClaimControllerDetached, false)
		}, structs.ErrConflict},
		{"controller unpublished under another claim on the node", func(f *fixture) *structs.ClaimCheckpointRequest {
			f.claim("vol-mw", "a1", structs.ClaimWrite) // on n1
			f.claim("vol-mw", "a5", structs.ClaimWrite) // on n1, running on
			f.setAlloc("a1", structs.AllocComplete)
			if err := f.checkpoint("vol-mw", "a1", structs.ClaimNodeDetached); err != nil {
				t.Fatal(err)
			}
			return free(f, "vol-mw", "a1", structs.ClaimControllerDetached, true)
		}, structs.ErrConflict},
	}
	for _, tc := range refusals {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			f := newFixture(t)
			req := tc.setup(f)
			digest, events := f.digest(), len(f.events())
			_, err := f.apply(structs.ClaimCheckpointType, req)
			var ve *structs.ValidationError
			if (tc.want == nil && !errors.As(err, &ve)) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("apply: %v, want %v", err, tc.want)
			}
			if f.digest() != digest || len(f.events()) != events {
				t.Error("a refused freeing checkpoint changed the state")
			}
		})
	}
}
