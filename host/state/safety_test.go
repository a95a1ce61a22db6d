package state

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// A release pass racing a new claim on the same node: a checkpoint that ran NodeUnstage or ControllerUnpublish
// on the ground that no other claim on the node needed it is refused when a
// committed claim on that node says otherwise, and changes nothing.
func TestCheckpointRefusesPerNodeStepUnderAnotherClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		other    structs.ClaimState // the other claim's state on the same node
		unstaged bool
		ctl      bool
		refused  bool
	}{
		{"unstage under a taken claim", structs.ClaimTaken, true, false, true},
		{"unstage beside a node-detached claim", structs.ClaimNodeDetached, true, false, false},
		{"controller unpublish under a taken claim", structs.ClaimTaken, false, true, true},
		{"controller unpublish under a node-detached claim", structs.ClaimNodeDetached, false, true, true},
		{"controller unpublish beside a controller-detached claim", structs.ClaimControllerDetached, false, true, false},
		{"no per-node step", structs.ClaimTaken, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.publishedClaim("vol-mw", "a4", "n1", "ext-n1") // a4 on n1: the claim being released
			f.publishedClaim("vol-mw", "a1", "n1", "ext-n1") // a1 running, on n1
			f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "a4", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}}})
			if tc.other != structs.ClaimTaken {
				// Move a1 on as the watcher would once it ended.
				f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocComplete}}})
				for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached} {
					if st.Order() > tc.other.Order() {
						break
					}
					f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw",
						Claim: &structs.Claim{AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, State: st}})
				}
			}
			to := structs.ClaimNodeDetached
			if tc.ctl {
				f.must(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw",
					Claim: &structs.Claim{AllocID: "a4", NodeID: "n1", Mode: structs.ClaimWrite, State: structs.ClaimNodeDetached}})
				to = structs.ClaimControllerDetached
			}
			before := f.index(TableVolumes)
			_, err := f.apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-mw",
				Claim:    &structs.Claim{AllocID: "a4", NodeID: "n1", Mode: structs.ClaimWrite, State: to},
				Unstaged: tc.unstaged, ControllerUnpublished: tc.ctl})
			if tc.refused != errors.Is(err, structs.ErrConflict) {
				t.Fatalf("checkpoint: %v, want refused %v", err, tc.refused)
			}
			if tc.refused && f.index(TableVolumes) != before {
				t.Fatal("a refused checkpoint changed the volumes table")
			}
		})
	}
}

// After a restore of an older snapshot the watcher's feed, waiting above the pre-restore
// index, wakes on a restore of an older snapshot and hands over every
// volume with the restored (lower) index, so the watcher assesses them all.
func TestVolumesChangedSinceWakesOnRestoreOfOlderState(t *testing.T) {
	older := newFixture(t)
	older.claim("vol-sw", "a1", structs.ClaimWrite)
	var buf bytesBuffer
	if err := older.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	f.idx += 1000 // this store has moved far past the snapshot
	f.must(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-ro"}}})
	after := f.index(TableVolumes)

	type res struct {
		vols []*structs.Volume
		idx  uint64
		err  error
	}
	done := make(chan res, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	started := make(chan struct{})
	go func() {
		close(started)
		v, i, err := f.s.VolumesChangedSince(ctx, after)
		done <- res{v, i, err}
	}()
	<-started
	if err := f.s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	var r res
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("the feed kept waiting for an index above the pre-restore one")
	}
	if r.err != nil || r.idx >= after || len(r.vols) != 5 {
		t.Fatalf("got %d volumes at index %d (%v), want all 5 at the restored index below %d", len(r.vols), r.idx, r.err, after)
	}
	// Called again with an index the restored store has not reached (a
	// restore between two calls), it answers at once too.
	vols, idx, err := f.s.VolumesChangedSince(ctx, after)
	if err != nil || idx >= after || len(vols) != 5 {
		t.Fatalf("after the restore: %d volumes at %d (%v)", len(vols), idx, err)
	}
}
