package state

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// A write transaction's reads of volumes and allocations by ID keep the
// radix paths it already copied (own_rows.go): an allocation update ending
// 512 claims (each allocation and its volume read, then written) and a
// group commit of 64 checkpoints (each volume read, then written, with its
// event) allocate far fewer objects than the same entries applied with
// every read through the transaction, which drops the index's
// writable-node cache. Two stores built alike apply the same entries; the
// reads' answers are checked against the transaction's elsewhere (TestMain).
func TestOwnRowsKeepRadixCache(t *testing.T) {
	const claimed = 512
	type cost struct{ allocs, checkpoints float64 }
	measure := func(off bool) cost {
		s := bulkLoad(t, scaleShape{volumes: 4 * claimed, claimed: claimed})
		idx := s.LatestIndex()
		ended := make([]*structs.Alloc, 0, claimed)
		for j := range claimed {
			a, err := s.Snapshot().AllocByID(nil, fmt.Sprintf("alloc-%07d", j))
			if err != nil || a == nil {
				t.Fatalf("alloc %d: %v", j, err)
			}
			a = a.Copy()
			a.ClientStatus = structs.AllocComplete
			ended = append(ended, a)
		}
		batch := &structs.ClaimCheckpointBatchRequest{}
		for j := range structs.MaxCheckpointBatch {
			v, _ := s.Snapshot().VolumeByID(nil, "default", fmt.Sprintf("vol-%07d", j*4))
			c := v.Claims[fmt.Sprintf("alloc-%07d", j)].Copy()
			c.State = structs.ClaimNodeDetached
			batch.Checkpoints = append(batch.Checkpoints, &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: v.ID, Claim: c})
		}
		defer func(check bool) { ownRowsOff, ownRowsCheck = false, check }(ownRowsCheck)
		// The check reads through the transaction: not while measuring.
		ownRowsOff, ownRowsCheck = off, false
		var resp any
		var err error
		var c cost
		c.allocs = float64(mallocsOf(func() {
			idx++
			_, err = s.ApplyAt(idx, t0, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: ended})
		})) / claimed
		if err != nil {
			t.Fatal(err)
		}
		c.checkpoints = float64(mallocsOf(func() {
			idx++
			resp, err = s.ApplyAt(idx, t0, structs.ClaimCheckpointBatchType, batch)
		})) / float64(len(batch.Checkpoints))
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range resp.([]error) {
			if err != nil {
				t.Fatalf("checkpoint %d: %v", i, err)
			}
		}
		return c
	}
	own, through := measure(false), measure(true)
	t.Logf("objects per allocation ended: %.1f (reads through the transaction: %.1f); per checkpoint: %.1f (%.1f)",
		own.allocs, through.allocs, own.checkpoints, through.checkpoints)
	// Measured: about 88 against 114 per allocation, 85 against 145 per
	// checkpoint.
	if own.allocs > 0.9*through.allocs {
		t.Errorf("allocation update: %.1f objects per allocation, want well under the %.1f of reads through the transaction", own.allocs, through.allocs)
	}
	if own.checkpoints > 0.8*through.checkpoints {
		t.Errorf("checkpoint batch: %.1f objects per checkpoint, want well under the %.1f of reads through the transaction", own.checkpoints, through.checkpoints)
	}
}

// mallocsOf is the number of heap objects f allocates.
func mallocsOf(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.Mallocs - m0.Mallocs
}
