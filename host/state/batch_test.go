package state

import (
	"errors"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A batch applies each checkpoint that passes on its own, in order, and
// answers each separately: a refused checkpoint (a running alloc, an
// unknown claim, a move backwards) changes nothing and does not fail the
// ones beside it, and a later checkpoint of the same claim sees the
// earlier one's effect, as two entries in that order would.
func TestCheckpointBatchRefusesIndependently(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-sw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	f.claim("vol-ms", "a5", structs.ClaimWrite)
	f.setAlloc("a1", structs.AllocComplete)
	f.setAlloc("a2", structs.AllocComplete)
	// a5 still runs: its release must be refused.
	ck := func(vol, alloc string, state structs.ClaimState) *structs.ClaimCheckpointRequest {
		c := f.volume("default", vol).Claims[alloc].Copy()
		c.State = state
		return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: vol, Claim: c}
	}
	unknown := ck("vol-sw", "a1", structs.ClaimNodeDetached)
	unknown.Claim = unknown.Claim.Copy()
	unknown.Claim.AllocID = "no-such-alloc"
	batch := &structs.ClaimCheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{
		ck("vol-sw", "a1", structs.ClaimNodeDetached),
		ck("vol-ms", "a5", structs.ClaimNodeDetached), // alloc running: refused
		unknown, // no such claim: refused
		ck("vol-mw", "a2", structs.ClaimNodeDetached),       //
		ck("vol-sw", "a1", structs.ClaimControllerDetached), // follows the first
		ck("vol-sw", "a1", structs.ClaimTaken),              // backwards now: refused
	}}
	resp := f.must(structs.ClaimCheckpointBatchType, batch)
	errs, ok := resp.([]error)
	if !ok || len(errs) != len(batch.Checkpoints) {
		t.Fatalf("response %T %v: want one error slot per checkpoint", resp, resp)
	}
	wantRefused := map[int]error{1: structs.ErrConflict, 2: structs.ErrNotFound, 5: structs.ErrConflict}
	for i, err := range errs {
		if want, refused := wantRefused[i]; refused {
			if !errors.Is(err, want) {
				t.Errorf("checkpoint %d: %v, want %v", i, err, want)
			}
		} else if err != nil {
			t.Errorf("checkpoint %d refused: %v", i, err)
		}
	}
	if s := f.volume("default", "vol-sw").Claims["a1"].State; s != structs.ClaimControllerDetached {
		t.Errorf("a1 is %s, want controller-detached (two checkpoints applied in order)", s)
	}
	if s := f.volume("default", "vol-mw").Claims["a2"].State; s != structs.ClaimNodeDetached {
		t.Errorf("a2 is %s, want node-detached", s)
	}
	if v := f.volume("default", "vol-ms"); v.Claims["a5"].State != structs.ClaimTaken || v.ModifyIndex == f.idx {
		t.Errorf("refused checkpoint moved vol-ms: %+v", v)
	}
	if f.volume("default", "vol-sw").ModifyIndex != f.idx || f.index(TableVolumes) != f.idx {
		t.Error("the batch's writes do not carry its index")
	}
	checkStats(t, f.s)

	for _, bad := range []*structs.ClaimCheckpointBatchRequest{{}, {Checkpoints: []*structs.ClaimCheckpointRequest{nil}},
		{Checkpoints: make([]*structs.ClaimCheckpointRequest, structs.MaxCheckpointBatch+1)}} {
		var ve *structs.ValidationError
		if _, err := f.apply(structs.ClaimCheckpointBatchType, bad); !errors.As(err, &ve) {
			t.Errorf("batch of %d: %v, want a validation error", len(bad.Checkpoints), err)
		}
	}
}
